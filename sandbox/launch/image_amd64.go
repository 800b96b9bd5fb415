package launch

import (
	"bytes"
	"debug/elf"
	"errors"
	"unsafe"
)

// imageText is the launcher's code (image_amd64.s). It is never called:
// its bytes are copied into the image.
func imageText()

// imageTextStart returns the address of imageText's first byte.
func imageTextStart() *byte

// imageMachine is the ELF machine the code is for.
const imageMachine = elf.EM_X86_64

// imageCode returns the bytes of imageText up to its end marker. It
// reads one byte at a time, never past the marker (which is inside the
// function), so nothing beyond the function is touched.
func imageCode() ([]byte, error) {
	start := imageTextStart()
	marker := []byte(codeEndMarker)
	var code []byte
	for i := 0; i < maxCodeSize+len(marker); i++ {
		code = append(code, *(*byte)(unsafe.Add(unsafe.Pointer(start), i)))
		if bytes.HasSuffix(code, marker) {
			return code[:len(code)-len(marker)], nil
		}
	}
	return nil, errors.New("launch: the launcher's code has no end marker")
}
