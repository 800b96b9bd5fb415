// Command minimal is the smallest useful paddock hook (command ABI): it
// reads the request and allows every job. It exists for benchmarks and as a
// starting point.
//
//	GOOS=wasip1 GOARCH=wasm go build -o minimal.wasm ./examples/hooks/minimal
package main

import (
	"io"
	"os"
)

func main() {
	_, _ = io.Copy(io.Discard, os.Stdin)
	_, _ = os.Stdout.WriteString(`{"decision":"allow"}`)
}
