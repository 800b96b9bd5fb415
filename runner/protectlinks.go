package runner

import (
	"fmt"
	"os"
	"strconv"
	"strings"

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
func restoreLinks(links []sandbox.ProtectedLink, jobID string) string {
	var out []string
	for _, l := range links {
		if l.Unchanged() {
			continue
		}
		msg := fmt.Sprintf("the job replaced the symlink %s (it leads to a protected path)", l.Path)
		if _, err := os.Lstat(l.Path); err == nil {
			aside := l.Path + ".paddock-replaced-" + jobID
			for i := 2; ; i++ {
				if _, err := os.Lstat(aside); err != nil {
					break
				}
				aside = l.Path + ".paddock-replaced-" + jobID + "." + strconv.Itoa(i)
			}
			if err := os.Rename(l.Path, aside); err != nil {
				out = append(out, fmt.Sprintf("%s; moving what is there aside failed: %v: check it before running git there", msg, err))
				continue
			}
			msg += "; what the job left there is now " + aside
		}
		if err := os.Symlink(l.Target, l.Path); err != nil {
			out = append(out, fmt.Sprintf("%s; putting the link back failed: %v: check it before running git there", msg, err))
			continue
		}
		out = append(out, msg+"; paddock put the link back (-> "+l.Target+")")
	}
	return strings.Join(out, "; ")
}
