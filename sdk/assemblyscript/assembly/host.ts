// Host functions (hostabi/ABI.md §5): import module "sluice". Only the ones a
// policy uses end up imported.

// @ts-ignore: decorator
@external("sluice", "log")
export declare function log(level: i32, ptr: usize, len: i32): void;
// @ts-ignore: decorator
@external("sluice", "config")
export declare function config(buf: usize, cap: i32): i32;
// @ts-ignore: decorator
@external("sluice", "now_ms")
export declare function now_ms(): i64;
// @ts-ignore: decorator
@external("sluice", "doc_get")
export declare function doc_get(pathPtr: usize, pathLen: i32, buf: usize, cap: i32): i32;
// @ts-ignore: decorator
@external("sluice", "doc_set")
export declare function doc_set(pathPtr: usize, pathLen: i32, valPtr: usize, valLen: i32): i32;
// @ts-ignore: decorator
@external("sluice", "doc_delete")
export declare function doc_delete(pathPtr: usize, pathLen: i32): i32;
// @ts-ignore: decorator
@external("sluice", "header_set")
export declare function header_set(namePtr: usize, nameLen: i32, valPtr: usize, valLen: i32): i32;
// @ts-ignore: decorator
@external("sluice", "header_remove")
export declare function header_remove(namePtr: usize, nameLen: i32): i32;
// @ts-ignore: decorator
@external("sluice", "use_upstream")
export declare function use_upstream(ptr: usize, len: i32): i32;
// @ts-ignore: decorator
@external("sluice", "reject")
export declare function reject(ptr: usize, len: i32): i32;
