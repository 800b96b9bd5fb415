// Package layout has no code: its tests check the module's shape and its
// build (which package may import which, that names spelled in several
// packages agree, that `make bwrap` never fails a build by itself, that
// the documented hook build lines work, that no built artefact is
// tracked).
// RATIONALE.md, "Layout", gives the rules and why.
package layout
