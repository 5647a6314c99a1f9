package main

import (
	"unsafe"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/sdk"
)

var in = []byte(`{"surface":"responses_stream","upstream":"primary","code":"usage_limit_reached","http_status":429,"replay_count":0,"response_created_seen":false,"response_id_assigned":false,"pending_requests":0,"has_previous_response_id":false}`)

//go:wasmexport p_decode
func pDecode() int32 { x, _ := hostabi.DecodeReplayInput(in); return int32(len(x.Code)) }

//go:wasmexport p_config
func pConfig() int32 { return int32(len(sdk.Config())) }

//go:wasmexport p_lookup
func pLookup() int32 { s, _ := sdk.Lookup(`{"penalty_ms":1500}`, "penalty_ms"); return int32(len(s)) }

//go:wasmexport p_alloc
func pAlloc() int32 { b := make([]byte, 300); return int32(uintptr(unsafe.Pointer(&b[0])) & 1) }

//go:wasmexport p_nothing
func pNothing() int32 { return 1 }

func init() { sdk.HandleReplay(func(in sdk.ReplayInput) (sdk.ReplayOutput, error) { return hostabi.DefaultReplay(in), nil }) }
func main() {}

var str = []byte(`"surface responses_stream upstream primary code usage_limit_reached"`)

//go:wasmexport p_skip
func pSkip() int32 { return int32(hostabi.ProbeSkip(in)) }

//go:wasmexport p_members
func pMembers() int32 { return int32(hostabi.ProbeMembers(in)) }

//go:wasmexport p_str
func pStr() int32 { return int32(hostabi.ProbeStr(str)) }

var sink string
var key = []byte("response_created_seen")

//go:wasmexport p_str20
func pStr20() int32 { sink = string(key); return 1 }

//go:noinline
func callee(x int) int { return x + 1 }

//go:wasmexport p_call10
func pCall10() int32 {
	x := callee(0)
	x = callee(x)
	x = callee(x)
	x = callee(x)
	x = callee(x)
	x = callee(x)
	x = callee(x)
	x = callee(x)
	x = callee(x)
	x = callee(x)
	return int32(x)
}

//go:wasmexport p_loop10
func pLoop10() int32 {
	x := 0
	for i := 0; i < len(key)/2; i++ {
		x += int(key[i])
	}
	return int32(x)
}
