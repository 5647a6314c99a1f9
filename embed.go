// Package sluice carries the guest SDK's sources inside the sluice binary, so
// that `sluice policy new` can write a policy that builds offline with only Go
// installed (no Sluice checkout, no module proxy). It is not an API.
//
// It sits at the module root because go:embed cannot reach parent
// directories: the embedded files are the sdk and hostabi packages and the
// JSON engine they use (internal/jsonx) themselves, so the copy can never
// drift from what the gateway is built with.
package sluice

import "embed"

// SDKSource holds sdk/*.go, hostabi/*.go and internal/jsonx/*.go (tests
// included; writers skip _test.go files) and hostabi/ABI.md, rooted at the
// module root. The copy keeps the module's layout, so sdk and hostabi may
// import internal/jsonx there too.
//
//go:embed sdk/*.go hostabi/*.go hostabi/ABI.md internal/jsonx/*.go
var SDKSource embed.FS

// ASSDKSource holds the AssemblyScript guest SDK (sdk/assemblyscript), which
// `sluice policy new --lang assemblyscript` writes next to a policy.
//
//go:embed sdk/assemblyscript/package.json sdk/assemblyscript/asconfig.json sdk/assemblyscript/README.md sdk/assemblyscript/assembly/*.ts
var ASSDKSource embed.FS
