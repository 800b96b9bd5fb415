package runner

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"paddock/sandbox"
)

// restoreLinks checks, once a job's processes have all ended, the
// symlinks inside its writable roots that led to protected paths
// ([sandbox.Policy.ProtectedLinks]): a link cannot be pinned by a mount,
// so a job may have renamed it and put a directory of its own in its
// place (a .git with its own hooks, which git on the host would run).
// Each link found changed is put back as it was, and what the job left at
// its path is moved aside to PATH.paddock-replaced-JOBID (a number is
// added when that exists). It returns what it found and did, as one
// sentence per link for the attempt's reason, or "" when every link is
// unchanged.
//
// The worker may be root and the tree is the job's: every step works in
// the link's directory opened without following a symlink
// ([sandbox.OpenNoSymlinks]), never by path, so a job that turned a
// directory on the way into a symlink to elsewhere (/etc) makes the
// restore refuse, not rename or create there.
func restoreLinks(links []sandbox.ProtectedLink, jobID string) string {
	var out []string
	for _, l := range links {
		if l.Unchanged() {
			continue
		}
		msg := fmt.Sprintf("the job replaced the symlink %s (it leads to a protected path)", l.Path)
		did, err := restoreLink(l, jobID)
		if err != nil {
			out = append(out, fmt.Sprintf("%s; %v: check it before running git there", msg, err))
			continue
		}
		out = append(out, msg+did)
	}
	return strings.Join(out, "; ")
}

// restoreLink puts l back in its directory, moving aside what is there,
// and says what it did.
func restoreLink(l sandbox.ProtectedLink, jobID string) (string, error) {
	dir, err := sandbox.OpenNoSymlinks(filepath.Dir(l.Path))
	if err != nil {
		return "", fmt.Errorf("its directory is no longer the one it was (%w), so nothing was changed", err)
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	base := filepath.Base(l.Path)
	did := ""
	var st unix.Stat_t
	if unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		aside, err := sandbox.MoveAside(dfd, base, "paddock-replaced", jobID)
		if err != nil {
			return "", fmt.Errorf("moving what is there aside failed: %w", err)
		}
		did = "; what the job left there is now " + filepath.Join(filepath.Dir(l.Path), aside)
	}
	if err := unix.Symlinkat(l.Target, dfd, base); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("putting the link back failed: something was created there again")
		}
		return "", fmt.Errorf("putting the link back failed: %w", err)
	}
	return did + "; paddock put the link back (-> " + l.Target + ")", nil
}
