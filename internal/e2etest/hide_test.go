package e2etest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestE2EHiddenSecrets: with no policy set, the default hide list makes a
// private key under ~/.ssh (a fake one made here, $HOME pointed at a
// fresh directory) and ~/.netrc unreadable by a confined job, at both
// grades; the job sees ~/.ssh empty, and cannot remove or rename the
// covered file. A policy that empties the list shows them again, so the
// test's own reads are real.
func TestE2EHiddenSecrets(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		// Not under /tmp: the sandbox's /tmp is a fresh tmpfs, which
		// would hide it whatever the policy says.
		home, err := os.MkdirTemp("/var/tmp", "paddock-hide-home-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(home) })
		require.NoError(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
		key := filepath.Join(home, ".ssh", "id_ed25519")
		netrc := filepath.Join(home, ".netrc")
		require.NoError(t, os.WriteFile(key, []byte("SECRET-KEY-MATERIAL\n"), 0o600))
		require.NoError(t, os.WriteFile(netrc, []byte("machine x login SECRET-NETRC\n"), 0o600))
		// Credential stores and histories of other tools on the list.
		others := []string{".config/git/credentials", ".config/gh/hosts.yml", ".npmrc", ".pgpass",
			".cargo/credentials.toml", ".config/rclone/rclone.conf", ".psql_history"}
		var catOthers strings.Builder
		for _, o := range others {
			p := filepath.Join(home, o)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
			require.NoError(t, os.WriteFile(p, []byte("SECRET-OTHER "+o+"\n"), 0o600))
			fmt.Fprintf(&catOthers, "cat %s 2>&1\n", p)
		}
		b.Env = append(b.Env, "HOME="+home)
		ws := t.TempDir()
		job := b.WriteJob("peek.toml", fmt.Sprintf(`mode = "workspace_write"
workspace = %q
command = '''
%scat %s 2>&1
cat %s 2>&1
echo "ls=[$(ls -A %s)]"
rm %s 2>/dev/null && echo REMOVED-netrc
mv %s %s/stolen 2>/dev/null && echo MOVED-netrc
true
'''
`, ws, catOthers.String(), key, netrc, filepath.Dir(key), netrc, netrc, ws))
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "SECRET", "a hidden secret was read")
		require.Contains(t, out, "ls=[]", "~/.ssh is an empty directory in the sandbox")
		require.NotContains(t, out, "REMOVED")
		require.NotContains(t, out, "MOVED")
		require.FileExists(t, netrc)

		// The same job under a policy that hides nothing reads them:
		// the check above can fail.
		pol := filepath.Join(b.Dir, "open.toml")
		require.NoError(t, os.WriteFile(pol, []byte("hide = []\n"), 0o600))
		_, errOut, code = b.Run("policy", "set", pol)
		require.Equal(t, 0, code, errOut)
		out, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "SECRET-KEY-MATERIAL")
		require.Contains(t, out, "SECRET-NETRC")
		for _, o := range others {
			require.Contains(t, out, "SECRET-OTHER "+o)
		}
	})
}

// TestE2ESecretsCreatedLaterAreHidden: a secret that appears after the
// worker started (aws configure, git credential store, a new ~/.kube) is
// hidden from the jobs that start after it, as one that was there before.
func TestE2ESecretsCreatedLaterAreHidden(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		home, err := os.MkdirTemp("/var/tmp", "paddock-hide-home-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(home) })
		require.NoError(t, os.Chmod(home, 0o755))
		b.Env = append(b.Env, "HOME="+home)
		b.StartWorker("--concurrency", "1")
		// A first job, so the worker has started and read its fence.
		first := b.Submit(b.WriteJob("first.toml", "name = \"first\"\nmode = \"read_only\"\ncommand = \"true\"\n"))[0]
		b.WaitState(first, time.Minute, "succeeded")
		require.NoError(t, os.MkdirAll(filepath.Join(home, ".kube"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(home, ".kube", "config"), []byte("KUBE-SECRET\n"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(home, ".git-credentials"), []byte("GIT-SECRET\n"), 0o600))
		time.Sleep(1100 * time.Millisecond) // the fence reads its paths at most once a second
		job := b.WriteJob("late.toml", fmt.Sprintf("name = \"late\"\nmode = \"read_only\"\ncommand = \"cat %s/.kube/config %s/.git-credentials 2>&1; true\"\n", home, home))
		id := b.Submit(job)[0]
		j := b.WaitState(id, time.Minute, "succeeded", "failed")
		require.Equal(t, "succeeded", j.State, j.Reason)
		out, _, _ := b.Run("logs", id)
		require.NotContains(t, out, "SECRET", "a secret created after the worker started was read")
		require.Contains(t, out, "ermission denied", "the hidden file is there but unreadable: %s", out)
	})
}

// TestE2EHiddenSecretsInsideWorkspace: a hidden directory inside a job's
// workspace cannot be carried away by renaming a directory on its way
// (the first attempt renames it and leaves a link to a decoy at the old
// name, the second would read the secret at its new name), and a
// directory the protect list keeps around it (.config, for
// .config/git/config) does not show it again. Both grades, and as nobody
// in make test-unprivileged.
func TestE2EHiddenSecretsInsideWorkspace(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		ws, err := os.MkdirTemp("/var/tmp", "paddock-hide-ws-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(ws) })
		require.NoError(t, os.Chmod(ws, 0o777)) // the unprivileged run's jobs write it
		for p, text := range map[string]string{
			"conf/secrets/db.env":  "DBPASS=SECRET-DB\n",
			".config/gcloud/creds": "SECRET-GCLOUD\n",
			".config/git/config":   "[user]\n",
		} {
			require.NoError(t, os.MkdirAll(filepath.Join(ws, filepath.Dir(p)), 0o777))
			require.NoError(t, os.WriteFile(filepath.Join(ws, p), []byte(text), 0o644))
		}
		b.SetPolicy(fmt.Sprintf("hide = [\"@default\", %q, %q]\n", filepath.Join(ws, "conf/secrets"), filepath.Join(ws, ".config/gcloud")))
		job := b.WriteJob("carry.toml", fmt.Sprintf(`name = "carry"
mode = "workspace_write"
workspace = %q
retries = 1
backoff = "1ms"
command = '''
cat .config/gcloud/creds 2>&1
if [ -d confx ]; then cat confx/secrets/db.env 2>&1; exit 0; fi
cat conf/secrets/db.env 2>&1
mv conf confx 2>&1 && echo MOVED
mkdir -p decoy/secrets && ln -s decoy conf 2>&1 && echo LINKED
exit 1
'''
`, ws))
		b.StartWorker("--concurrency", "1")
		id := b.Submit(job)[0]
		j := b.WaitState(id, time.Minute, "succeeded", "failed", "denied")
		for _, n := range []string{"1", "2"} {
			out, _, _ := b.Run("logs", id, "--attempt", n)
			require.NotContains(t, out, "SECRET", "attempt %s read a hidden secret:\n%s", n, out)
			require.NotContains(t, out, "MOVED", "attempt %s renamed a directory around a hidden one", n)
		}
		require.Equal(t, "failed", j.State, "no attempt found the secret at a new name: %s", j.Reason)
		fi, err := os.Lstat(filepath.Join(ws, "conf"))
		require.NoError(t, err)
		require.True(t, fi.IsDir(), "conf is still the directory holding the secret")
		require.NoFileExists(t, filepath.Join(ws, "confx/secrets/db.env"))
	})
}

// TestE2EHiddenSecretsAgainstJobsTricks: what one job leaves cannot
// uncover a hidden path for the next, nor stop the others. A directory
// on the way to a hidden one made unreadable (chmod 000, which stops an
// unprivileged worker's look) refuses the next job writing there rather
// than leaving the path unhidden; links a job makes that match a hide
// glob and lead to / or /usr/bin hide neither; hundreds of matches
// made to flood the argv hide their directory instead, and jobs
// elsewhere run as before. Both grades, root and nobody.
func TestE2EHiddenSecretsAgainstJobsTricks(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		ws := hostDirUnder(t, "/var/tmp")
		other := hostDirUnder(t, "/var/tmp")
		require.NoError(t, os.Chmod(ws, 0o777))
		require.NoError(t, os.MkdirAll(filepath.Join(ws, "proj", "secret"), 0o777))
		require.NoError(t, os.Chmod(filepath.Join(ws, "proj"), 0o777))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "proj", "secret", "key"), []byte("SECRET-KEY\n"), 0o644))
		require.NoError(t, os.MkdirAll(filepath.Join(ws, "c1", "conf"), 0o777))
		require.NoError(t, os.Chmod(filepath.Join(ws, "c1", "conf"), 0o777))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "c1", "conf", "prod.key"), []byte("SECRET-GLOB\n"), 0o644))
		t.Cleanup(func() {
			_ = os.Chmod(filepath.Join(ws, "proj"), 0o755)
			_ = os.Chmod(filepath.Join(ws, "c1", "conf"), 0o755)
		})
		b.SetPolicy(fmt.Sprintf("hide = [\"@default\", %q, %q, %q]\n", filepath.Join(ws, "proj", "secret"), filepath.Join(ws, "*.secret"), filepath.Join(ws, "*", "conf", "*.key")))
		job := func(name, dir, mode, cmd string) string {
			return b.WriteJob(name+".toml", fmt.Sprintf("name = %q\nmode = %q\nworkspace = %q\ncommand = '''\n%s\n'''\n", name, mode, dir, cmd))
		}

		out, errOut, code := b.Run("run", job("lock", ws, "workspace_write", "cat proj/secret/key 2>&1; chmod 000 proj"))
		require.Equal(t, 0, code, out+errOut)
		require.NotContains(t, out, "SECRET")
		time.Sleep(1100 * time.Millisecond) // the fence reads its paths at most once a second
		out, errOut, _ = b.Run("run", job("unlock", ws, "workspace_write", "chmod 755 proj; cat proj/secret/key 2>&1"))
		require.NotContains(t, out, "SECRET", "the next job read what the first uncovered")
		if os.Geteuid() != 0 {
			require.Contains(t, errOut, "paddock cannot look at", "an unprivileged worker refuses the job")
		}
		require.NoError(t, os.Chmod(filepath.Join(ws, "proj"), 0o777))

		// Search rights without read on the directory of a glob's match:
		// a job elsewhere, knowing the name, cannot open it.
		out, errOut, code = b.Run("run", job("unlist", ws, "workspace_write", "cat c1/conf/prod.key 2>&1; chmod 0111 c1/conf"))
		require.Equal(t, 0, code, out+errOut)
		require.NotContains(t, out, "SECRET")
		time.Sleep(1100 * time.Millisecond)
		out, _, _ = b.Run("run", job("by-name", other, "read_only", "cat "+filepath.Join(ws, "c1", "conf", "prod.key")+" 2>&1"))
		require.NotContains(t, out, "SECRET", "a job elsewhere read a glob's match its directory no longer lists")
		require.NoError(t, os.Chmod(filepath.Join(ws, "c1", "conf"), 0o777))

		out, errOut, code = b.Run("run", job("links", ws, "workspace_write", "ln -s / root.secret && ln -s /usr/bin bin.secret && ln -s "+other+" other.secret && echo LINKED"))
		require.Equal(t, 0, code, out+errOut)
		require.Contains(t, out, "LINKED")
		time.Sleep(1100 * time.Millisecond)
		out, errOut, code = b.Run("run", job("elsewhere", other, "read_only", "test -x /usr/bin/env && echo RAN"))
		require.Equal(t, 0, code, "a link to /, /usr/bin or its workspace matching a hide glob stopped another job: %s", out+errOut)
		require.Contains(t, out, "RAN")

		out, errOut, code = b.Run("run", job("flood", ws, "workspace_write", "rm -f root.secret bin.secret other.secret; for i in $(seq 1 300); do mkdir d$i.secret; done; echo MADE"))
		require.Equal(t, 0, code, out+errOut)
		time.Sleep(1100 * time.Millisecond)
		out, errOut, code = b.Run("run", job("after-flood", other, "read_only", "echo RAN"))
		require.Equal(t, 0, code, "300 matches of a hide glob stopped another job: %s", out+errOut)
		require.Contains(t, out, "RAN")
		_, errOut, code = b.Run("run", job("in-flood", ws, "workspace_write", "echo RAN"))
		require.Equal(t, 125, code, "their directory is hidden in their place: %s", errOut)
		require.Contains(t, errOut, "is hidden from every job")
	})
}

// TestE2EHiddenSecretsBehindLinks: a default hide entry that is itself a
// link (stow, yadm or chezmoi make ~/.ssh a link to dotfiles/ssh, a
// relative one, and ~/.pgpass one to a file) is hidden where it leads,
// and so is a literal policy entry naming a link, at both grades.
func TestE2EHiddenSecretsBehindLinks(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		home, err := os.MkdirTemp("/var/tmp", "paddock-hide-links-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(home) })
		require.NoError(t, os.Chmod(home, 0o755))
		dot := filepath.Join(home, "dotfiles")
		for _, d := range []string{"ssh", "aws", "mine"} {
			require.NoError(t, os.MkdirAll(filepath.Join(dot, d), 0o700))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dot, "ssh", "id_ed25519"), []byte("SECRET-SSH\n"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dot, "aws", "credentials"), []byte("SECRET-AWS\n"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dot, "pgpass"), []byte("SECRET-PGPASS\n"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dot, "mine", "token"), []byte("SECRET-MINE\n"), 0o600))
		require.NoError(t, os.Symlink("dotfiles/ssh", filepath.Join(home, ".ssh")))
		require.NoError(t, os.Symlink(filepath.Join(dot, "aws"), filepath.Join(home, ".aws")))
		require.NoError(t, os.Symlink("dotfiles/pgpass", filepath.Join(home, ".pgpass")))
		require.NoError(t, os.Symlink("dotfiles/mine", filepath.Join(home, "mine-link")))
		b.Env = append(b.Env, "HOME="+home)
		b.SetPolicy(fmt.Sprintf("hide = [\"@default\", %q]\n", filepath.Join(home, "mine-link")))
		job := b.WriteJob("peek.toml", fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = \"cat %s %s %s %s 2>&1; true\"\n",
			t.TempDir(), filepath.Join(home, ".ssh", "id_ed25519"), filepath.Join(home, ".aws", "credentials"),
			filepath.Join(home, ".pgpass"), filepath.Join(home, "mine-link", "token")))
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "SECRET", "a secret behind a link was read")

		// With the list emptied the same job reads them all: the check
		// above can fail.
		b.SetPolicy("hide = []\n")
		out, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, errOut)
		for _, s := range []string{"SECRET-SSH", "SECRET-AWS", "SECRET-PGPASS", "SECRET-MINE"} {
			require.Contains(t, out, s)
		}
	})
}

// TestE2EHiddenLinksKeepTheirPlace: a literal hide entry inside a job's
// writable root is protected too. A job that points an operator's link
// (.env -> ../secrets/env) elsewhere is stopped and the link put back,
// so the next job still cannot read the secret it led to; a job that
// makes a missing literal entry a link to another job's workspace is
// stopped and the link moved aside, so that workspace is not hidden from
// its own jobs. Both grades.
func TestE2EHiddenLinksKeepTheirPlace(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		top := hostDirUnder(t, "/var/tmp")
		ws, secrets, other := filepath.Join(top, "ws"), filepath.Join(top, "secrets"), filepath.Join(top, "other")
		for _, d := range []string{ws, secrets, other} {
			require.NoError(t, os.Mkdir(d, 0o777))
			require.NoError(t, os.Chmod(d, 0o777))
		}
		require.NoError(t, os.WriteFile(filepath.Join(secrets, "env"), []byte("SECRET-ENV\n"), 0o644))
		require.NoError(t, os.Symlink("../secrets/env", filepath.Join(ws, ".env")))
		b.SetPolicy(fmt.Sprintf("hide = [\"@default\", %q, %q]\n", filepath.Join(ws, ".env"), filepath.Join(ws, "creds")))

		swap := b.WriteJob("swap.toml", fmt.Sprintf("name = \"swap\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = \"rm -f .env && ln -s /nonexistent .env; ln -s %s creds; sleep 300; echo outlived\"\n", ws, other))
		out, errOut, code := b.Run("run", swap)
		require.NotEqual(t, 0, code, out+errOut)
		require.NotContains(t, out, "outlived")
		target, err := os.Readlink(filepath.Join(ws, ".env"))
		require.NoError(t, err)
		require.Equal(t, "../secrets/env", target, "the operator's link is put back")
		_, err = os.Lstat(filepath.Join(ws, "creds"))
		require.ErrorIs(t, err, os.ErrNotExist, "the job's link is moved aside")

		read := b.WriteJob("read.toml", fmt.Sprintf("name = \"read\"\nmode = \"read_only\"\nworkspace = %q\ncommand = \"cat %s 2>&1; true\"\n", other, filepath.Join(secrets, "env")))
		out, errOut, code = b.Run("run", read)
		require.Equal(t, 0, code, out+errOut, "the other workspace is not hidden")
		require.NotContains(t, out, "SECRET-ENV")
	})
}
