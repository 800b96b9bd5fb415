package main

import "unsafe"

// in holds the request: paddock calls paddock_alloc, writes the request at
// the returned address, then calls paddock_decide. Package variables keep
// both buffers alive between the calls.
var in, out []byte

//go:wasmexport paddock_alloc
func paddockAlloc(size int32) int32 {
	if cap(in) < int(size) || cap(in) == 0 {
		in = make([]byte, max(size, 1))
	}
	in = in[:size]
	return int32(uintptr(unsafe.Pointer(unsafe.SliceData(in[:cap(in)]))))
}

//go:wasmexport paddock_decide
func paddockDecide(ptr, size int32) int64 {
	out = decide(in[:size])
	return int64(uintptr(unsafe.Pointer(unsafe.SliceData(out))))<<32 | int64(len(out))
}

//go:wasmexport paddock_validate_settings
func paddockValidateSettings(ptr, size int32) int64 {
	out = validateSettings(in[:size])
	return int64(uintptr(unsafe.Pointer(unsafe.SliceData(out))))<<32 | int64(len(out))
}
