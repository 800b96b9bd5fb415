//go:build !amd64

package launch

import (
	"debug/elf"
	"errors"
)

// imageMachine is the ELF machine the code is for: none on this
// architecture.
const imageMachine = elf.EM_NONE

// imageCode reports that this architecture has no launcher image: the
// launcher is the Go one ([Main]).
func imageCode() ([]byte, error) {
	return nil, errors.New("launch: no launcher image for this architecture")
}
