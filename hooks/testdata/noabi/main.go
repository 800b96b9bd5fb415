// Command noabi is a test module built with -buildmode=c-shared that exports
// nothing paddock knows: neither _start nor paddock_alloc/paddock_decide.
package main

//go:wasmexport something_else
func somethingElse() int32 { return 42 }

func main() {}
