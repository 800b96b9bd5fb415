package sandbox_test

import (
	"fmt"
	"strings"

	"paddock/sandbox"
)

// ExampleConfineWith shows the argv of a read-only job at the partial grade
// with the network isolated. Confine does the same with the memoized probe.
func ExampleConfineWith() {
	p, err := sandbox.NewPolicy(sandbox.PolicyParams{Mode: sandbox.ModeReadOnly, Workspace: "/usr/share", Network: false})
	if err != nil {
		panic(err)
	}
	d := sandbox.Discovery{Executable: "/usr/bin/bwrap", Grade: sandbox.GradePartial, NetworkIsolation: true, DisableUserns: true}
	argv, err := sandbox.ConfineWith([]string{"ls", "-l"}, p, d)
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.Join(argv, " "))
	// Output:
	// /usr/bin/bwrap --unshare-user --disable-userns --cap-drop ALL --unshare-pid --unshare-ipc --unshare-net --die-with-parent --new-session --json-status-fd 3 --ro-bind / / --dev-bind /dev/null /dev/null --dev-bind /dev/zero /dev/zero --dev-bind /dev/full /dev/full --dev-bind /dev/random /dev/random --dev-bind /dev/urandom /dev/urandom --tmpfs /proc --remount-ro /proc --tmpfs /tmp --ro-bind /usr/share /usr/share --chdir /usr/share -- ls -l
}
