// Package layout has no code: its tests check the module's shape (which
// package may import which, and that names spelled in several packages
// agree). RATIONALE.md, "Layout", gives the rules and why.
package layout
