// Command minimal-reactor is the smallest paddock hook with the reactor ABI:
// it allows every job without parsing the request. It exists for benchmarks
// and as a starting point; the exports live in abi_wasip1.go.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o minimal-reactor.wasm ./examples/hooks/minimal-reactor
package main

// allow is the decision, returned for every request.
var allow = []byte(`{"decision":"allow"}`)

// decide returns the decision for one request.
func decide(req []byte) []byte { return allow }

// main is not called in a reactor (-buildmode=c-shared); the Go toolchain
// still requires it.
func main() {}
