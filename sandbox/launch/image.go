package launch

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sync"
)

// The launcher image is a static ELF executable of a few kilobytes that
// does what [Main] does with raw system calls, without a language
// runtime: on a loaded 2-core machine it starts in a fraction of a
// millisecond where a Go program (paddock itself) takes several. Its code
// is paddock's own (image_amd64.s, assembled by the Go toolchain with the
// rest of the binary: nothing pre-built is shipped); [Image] copies it out
// of the running binary and wraps it in an ELF header. Architectures
// without that code use [Main].
//
// The file's layout (one read+execute PT_LOAD segment at imageBase, a
// non-executable stack):
//
//	0x000  ELF header (64 bytes), two program headers (56 bytes each)
//	0x100  the string table: imageStrings, one per 64-byte slot
//	0x600  the code
const (
	imageBase   = 0x400000
	stringsOff  = 0x100
	stringSlot  = 64
	codeOff     = 0x600
	maxCodeSize = 8192
	// codeEndMarker ends the code in image_amd64.s.
	codeEndMarker = "PADDOCK-LAUNCH-E"
)

// imageStrings are the code's constant strings, in the order of its
// S_* definitions (image_amd64.s): each at imageBase + stringsOff +
// 64*index, NUL-terminated.
var imageStrings = []string{
	`{"` + ReportKey + `":"`,                   // S_PREFIX
	"\"}\n",                                    // S_SUFFIX
	"paddock-launch: ",                         // S_STDERR (16 bytes: the code writes 16)
	"/bin/sh",                                  // S_SH
	": errno ",                                 // S_ERRNO
	"/bin:/usr/bin",                            // S_DEFPATH: glibc's default $PATH
	"bad arguments",                            // S_BADARGS
	"seccomp: no filter is in force",           // S_SECCOMP
	"landlock_create_ruleset",                  // S_RULESET
	"landlock: opening",                        // S_OPEN
	"landlock_add_rule",                        // S_ADDRULE
	"prctl(PR_SET_NO_NEW_PRIVS)",               // S_NNP
	"landlock_restrict_self",                   // S_RESTRICT
	"landlock: the signal scope does not hold", // S_SIGNAL
	"marking descriptors close-on-exec",        // S_CLOEXEC
	"execvp",                                   // S_EXECVP
	" ",                                        // S_SPACE
	"\n",                                       // S_NL
}

// Image returns the launcher image for this machine's architecture, or
// an error when there is none (any architecture but x86-64). The image
// reads the arguments of [Spec.Args] and behaves as [Main] does, its
// failure reports worded as [Main]'s with the system error as a number
// (": errno N", which [Describe] turns into words). The bytes are built
// once; the result is shared and must not be modified. Safe for
// concurrent use.
func Image() ([]byte, error) { return image() }

var image = sync.OnceValues(func() ([]byte, error) {
	code, err := imageCode()
	if err != nil {
		return nil, err
	}
	return buildImage(code, imageMachine)
})

// buildImage wraps code in the ELF file described above.
func buildImage(code []byte, machine elf.Machine) ([]byte, error) {
	if len(code) == 0 || len(code) > maxCodeSize {
		return nil, fmt.Errorf("launch: the launcher's code is %d bytes (want 1 to %d)", len(code), maxCodeSize)
	}
	size := codeOff + len(code)
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Entry: imageBase + codeOff, Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 2,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	progs := []elf.Prog64{
		{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Off: 0, Vaddr: imageBase, Paddr: imageBase,
			Filesz: uint64(size), Memsz: uint64(size), Align: 0x1000},
		{Type: uint32(elf.PT_GNU_STACK), Flags: uint32(elf.PF_R | elf.PF_W), Align: 16},
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, hdr)
	_ = binary.Write(&b, binary.LittleEndian, progs)
	out := make([]byte, size)
	copy(out, b.Bytes())
	for i, s := range imageStrings {
		if len(s) >= stringSlot || bytes.IndexByte([]byte(s), 0) >= 0 {
			return nil, fmt.Errorf("launch: image string %d does not fit its slot", i)
		}
		copy(out[stringsOff+i*stringSlot:], s)
	}
	if stringsOff+len(imageStrings)*stringSlot > codeOff {
		return nil, fmt.Errorf("launch: the image's strings overlap its code")
	}
	copy(out[codeOff:], code)
	return out, nil
}
