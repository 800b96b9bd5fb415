package e2etest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"paddock/sandbox"
)

// The second layer of the fence (seccomp, --unshare-ipc, Landlock): a
// job that talks instead of writing (a host service behind a Unix
// socket, a host FIFO, SysV IPC, the kernel keyrings) reaches nothing on
// the host, while the programs jobs run (python's socketpair, git, go
// test, make) keep working. Each test runs at both grades; make test runs
// them again as nobody.

// requirePython returns python3, which the jobs below are written in.
func requirePython(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "the layer tests' jobs need python3")
	return python
}

// requireLandlock skips a test that needs the Landlock layer when the
// host has none, or fails it under PADDOCK_REQUIRE_BWRAP=1 (CI's kernel
// has it).
func requireLandlock(t *testing.T) {
	t.Helper()
	if rep := RequireBwrap(t); rep.LandlockABI == 0 {
		Unavailable(t, "no Landlock layer on this host: %v", rep.Notes)
	}
}

// hostService listens on a path socket and an abstract one; a client
// that sends "write" makes it create a file, as a host daemon would do
// for its clients (docker.sock is root on the host).
type hostService struct {
	path, abstract string
	dir            string
	accepted       atomic.Int32
}

func startHostService(t *testing.T, tok string) *hostService {
	t.Helper()
	s := &hostService{dir: hostDirUnder(t, "/var/tmp"), abstract: "@paddock-e2e-" + tok}
	s.path = filepath.Join(s.dir, "service.sock")
	for _, addr := range []string{s.path, s.abstract} {
		l, err := net.Listen("unix", addr)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		if addr == s.path {
			require.NoError(t, os.Chmod(s.path, 0o777))
		}
		kind := map[bool]string{true: "path", false: "abstract"}[addr == s.path]
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				s.accepted.Add(1)
				line, _ := bufio.NewReader(c).ReadString('\n')
				if strings.TrimSpace(line) == "write" {
					_ = os.WriteFile(s.marker(kind), []byte("written for a client\n"), 0o644)
				}
				c.Close()
			}
		}()
	}
	return s
}

// marker is the file the service writes for a client of the socket kind.
func (s *hostService) marker(kind string) string { return filepath.Join(s.dir, "written-"+kind) }

// clientScript connects to the path socket $1 and the abstract one $2 and
// asks each to write; it prints CONNECTED-<kind> or "<kind> refused:
// <errno>".
const clientScript = `
import socket, sys
for kind, addr in (("path", sys.argv[1]), ("abstract", "\0" + sys.argv[2])):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(addr)
        s.sendall(b"write\n")
        s.close()
        print("CONNECTED-" + kind)
    except OSError as e:
        print(kind, "refused:", e.errno)
`

// TestE2ELayersHostUnixSockets: a job asks a host service, through its
// path socket and its abstract one, to write a file: read_only, with the
// network shared (the abstract socket lives in the network namespace) and
// isolated. The service never hears from it (socket(AF_UNIX) is refused
// with EPERM), and nothing is written. The same script run unconfined
// (danger_full_access) does get the file written: the check can fail.
// A job with unix_sockets = true can connect (it asked for it).
func TestE2ELayersHostUnixSockets(t *testing.T) {
	t.Parallel()
	python := requirePython(t)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		b.SetPolicy("max_mode = \"danger_full_access\"\nallow_network = true\nunix_sockets = true\n") // the jobs below ask for each
		s := startHostService(t, randomToken(t))
		run := func(keys string) string {
			job := b.WriteJob("client.toml", keys+fmt.Sprintf("\ncommand = %s\n", tomlArray(python, "-c", clientScript, s.path, strings.TrimPrefix(s.abstract, "@"))))
			out, errOut, code := b.Run("run", job)
			require.Equal(t, 0, code, out+errOut)
			return out
		}
		for _, network := range []bool{true, false} {
			out := run(fmt.Sprintf("mode = \"read_only\"\nnetwork = %v", network))
			require.NotContains(t, out, "CONNECTED", "network = %v", network)
			require.Contains(t, out, "path refused: 1\n", "socket(AF_UNIX) fails with EPERM")
			require.Contains(t, out, "abstract refused: 1\n")
		}
		time.Sleep(100 * time.Millisecond)
		require.Zero(t, s.accepted.Load(), "the host service heard from a confined job")
		require.NoFileExists(t, s.marker("path"))
		require.NoFileExists(t, s.marker("abstract"))

		// The same client, unconfined, gets both files written.
		out := run(`mode = "danger_full_access"`)
		require.Contains(t, out, "CONNECTED-path")
		require.Contains(t, out, "CONNECTED-abstract")
		require.Eventually(t, func() bool { return fileExists(s.marker("path")) && fileExists(s.marker("abstract")) }, 5*time.Second, 10*time.Millisecond)
		require.NoError(t, os.Remove(s.marker("path")))
		require.NoError(t, os.Remove(s.marker("abstract")))

		// unix_sockets = true: the job may connect, and does.
		out = run("mode = \"read_only\"\nunix_sockets = true")
		require.Contains(t, out, "CONNECTED-path")
		require.Eventually(t, func() bool { return fileExists(s.marker("path")) }, 5*time.Second, 10*time.Millisecond)
	})
}

// TestE2ELayersUnixSocketsKey: unix_sockets = true lets a job serve and
// use a Unix socket of its own; without it the same job fails with EPERM
// at socket(2). socketpair(2) works either way.
func TestE2ELayersUnixSocketsKey(t *testing.T) {
	t.Parallel()
	python := requirePython(t)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		b.SetPolicy("max_mode = \"danger_full_access\"\nallow_network = true\nunix_sockets = true\n") // the jobs below ask for each
		script := `
import os, socket
a, b = socket.socketpair()
a.sendall(b"pair"); print("socketpair", b.recv(4).decode())
try:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
except OSError as e:
    print("socket refused:", e.errno); raise SystemExit(0)
srv.bind("/tmp/own.sock"); srv.listen(1)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect("/tmp/own.sock")
conn, _ = srv.accept(); c.sendall(b"own"); print("own socket", conn.recv(3).decode())
`
		for _, allowed := range []bool{false, true} {
			job := b.WriteJob("own.toml", fmt.Sprintf("mode = \"workspace_write\"\nunix_sockets = %v\ncommand = %s\n", allowed, tomlArray(python, "-c", script)))
			out, errOut, code := b.Run("run", job)
			require.Equal(t, 0, code, out+errOut)
			require.Contains(t, out, "socketpair pair\n")
			if allowed {
				require.Contains(t, out, "own socket own\n")
			} else {
				require.Contains(t, out, "socket refused: 1\n")
			}
		}
	})
}

// fifoReader reads a host FIFO without blocking until stop, and returns
// what it read.
func fifoReader(t *testing.T, path string) (stop func() string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		got  []byte
		done = make(chan struct{})
		quit = make(chan struct{})
	)
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, _ := unix.Read(fd, buf)
			if n > 0 {
				mu.Lock()
				got = append(got, buf[:n]...)
				mu.Unlock()
			}
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() string {
		close(quit)
		<-done
		unix.Close(fd)
		mu.Lock()
		defer mu.Unlock()
		return string(got)
	}
}

// TestE2ELayersHostFIFO: a FIFO on the host's read-only root, with a host
// reader waiting on it: a read_only job opens it for writing, which a
// read-only mount allows. Landlock refuses the open (the FIFO is outside
// the job's writable set); the reader gets nothing. Unconfined, the same
// job's line reaches it.
func TestE2ELayersHostFIFO(t *testing.T) {
	t.Parallel()
	requireLandlock(t)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		b.SetPolicy("max_mode = \"danger_full_access\"\n") // the unconfined run below
		fifo := filepath.Join(hostDirUnder(t, "/var/tmp"), "fifo")
		require.NoError(t, unix.Mkfifo(fifo, 0o666))
		require.NoError(t, os.Chmod(fifo, 0o666))
		for _, mode := range []string{"read_only", "danger_full_access"} {
			stop := fifoReader(t, fifo)
			job := b.WriteJob("fifo.toml", fmt.Sprintf("mode = %q\ncommand = %s\n", mode,
				tomlArray("/bin/sh", "-c", `if ( echo "payload from the job" > "$1" ) 2>/dev/null; then echo WROTE; else echo refused; fi`, "sh", fifo)))
			out, errOut, code := b.Run("run", job)
			require.Equal(t, 0, code, out+errOut)
			time.Sleep(50 * time.Millisecond)
			got := stop()
			if mode == "read_only" {
				require.Equal(t, "refused\n", out)
				require.Empty(t, got, "the host reader got a confined job's line")
			} else {
				require.Equal(t, "WROTE\n", out)
				require.Equal(t, "payload from the job\n", got)
			}
		}
	})
}

// ipcScript creates a SysV shared memory segment, message queue and
// semaphore set with key $1 and a POSIX message queue named $2, and
// prints their ids (-1 when refused) and what ipcs shows from inside.
const ipcScript = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
key, name = int(sys.argv[1]), sys.argv[2].encode()
print("shm", libc.shmget(key, 4096, 0o1600), "msg", libc.msgget(key, 0o1600), "sem", libc.semget(key, 1, 0o1600))
mq = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None)
print("mq", mq, "errno", 0 if mq >= 0 else ctypes.get_errno())
`

// TestE2ELayersIPCPrivate: SysV IPC objects and a POSIX message queue a
// job creates stay in its own IPC namespace (--unshare-ipc): the job
// creates them, and once it is gone the host's ipcs shows none of them
// (without the namespace they outlive the job on the host). Where the
// Landlock layer holds, mq_open(3) is refused (EACCES: Landlock takes
// it for creating a file outside the writable set).
func TestE2ELayersIPCPrivate(t *testing.T) {
	t.Parallel()
	python := requirePython(t)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		tok := randomToken(t)
		k, err := strconv.ParseUint(tok[:7], 16, 32) // 28 random bits
		require.NoError(t, err)
		key := int32(k | 1)
		mq := "/paddock-e2e-" + tok
		t.Cleanup(func() {
			// Should the fence fail, the host keeps no litter.
			for _, f := range []string{"-M", "-Q", "-S"} {
				_ = exec.Command("ipcrm", f, strconv.Itoa(int(key))).Run()
			}
		})
		job := b.WriteJob("ipc.toml", fmt.Sprintf("mode = \"read_only\"\ncommand = %s\n", tomlArray(python, "-c", ipcScript, strconv.Itoa(int(key)), mq)))
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, out+errOut)
		f := strings.Fields(out)
		require.Len(t, f, 10, out)
		for i := 1; i < 6; i += 2 {
			id, err := strconv.Atoi(f[i])
			require.NoError(t, err, out)
			require.GreaterOrEqual(t, id, 0, "the job could not create its %s: %s", f[i-1], out)
		}
		if RequireBwrap(t).LandlockABI > 0 {
			require.Equal(t, []string{"mq", "-1", "errno", "13"}, f[6:], out)
		} else {
			require.Equal(t, "0", f[9], out)
		}
		hex := fmt.Sprintf("0x%08x", key)
		ipcs, err := exec.Command("ipcs", "-m", "-q", "-s").CombinedOutput()
		require.NoError(t, err, string(ipcs))
		require.NotContains(t, string(ipcs), hex, "a job's SysV IPC object is in the host's namespace")
		for _, kind := range []string{"shm", "msg", "sem"} {
			data, err := os.ReadFile("/proc/sysvipc/" + kind)
			require.NoError(t, err)
			for _, line := range strings.Split(string(data), "\n")[1:] {
				if fields := strings.Fields(line); len(fields) > 0 {
					require.NotEqual(t, strconv.Itoa(int(key)), fields[0], "/proc/sysvipc/%s", kind)
				}
			}
		}
		if fi, err := os.Stat("/dev/mqueue"); err == nil && fi.IsDir() {
			require.NoFileExists(t, "/dev/mqueue"+mq)
		}
	})
}

// keyScript adds a key named $1 to the session, user and user-session
// keyrings with add_key(2) and prints each result and errno.
const keyScript = `
import ctypes, platform, sys
nr = {"x86_64": 248, "aarch64": 217}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for ring in (-3, -4, -5):
    r = libc.syscall(ctypes.c_long(nr), b"user", sys.argv[1].encode(), b"leak", ctypes.c_long(4), ctypes.c_long(ring))
    print("ADDED" if r > 0 else "refused", ring, ctypes.get_errno())
`

// TestE2ELayersKeyrings: a job adds a key to the session, user and
// user-session keyrings (shared with the host: a channel out of the job
// and between jobs). Every add_key fails with EPERM, and the host's
// /proc/keys and keyrings hold no such key.
func TestE2ELayersKeyrings(t *testing.T) {
	t.Parallel()
	python := requirePython(t)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		Unavailable(t, "the job's add_key number is known for amd64 and arm64, not %s", runtime.GOARCH)
	}
	bothGrades(t, func(t *testing.T, b *Bundle) {
		desc := "paddock-leak-" + randomToken(t)
		t.Cleanup(func() {
			for _, ring := range []int{unix.KEY_SPEC_SESSION_KEYRING, unix.KEY_SPEC_USER_KEYRING, unix.KEY_SPEC_USER_SESSION_KEYRING} {
				if id, err := unix.KeyctlSearch(ring, "user", desc, 0); err == nil {
					_, _ = unix.KeyctlInt(unix.KEYCTL_REVOKE, id, 0, 0, 0)
				}
			}
		})
		job := b.WriteJob("keys.toml", fmt.Sprintf("mode = \"read_only\"\ncommand = %s\n", tomlArray(python, "-c", keyScript, desc)))
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, out+errOut)
		require.Equal(t, "refused -3 1\nrefused -4 1\nrefused -5 1\n", out)
		if keys, err := os.ReadFile("/proc/keys"); err == nil {
			require.NotContains(t, string(keys), desc)
		}
		for _, ring := range []int{unix.KEY_SPEC_SESSION_KEYRING, unix.KEY_SPEC_USER_KEYRING, unix.KEY_SPEC_USER_SESSION_KEYRING} {
			_, err := unix.KeyctlSearch(ring, "user", desc, 0)
			require.True(t, errors.Is(err, unix.ENOKEY), "keyring %d: %v", ring, err)
		}
	})
}

// familyScript makes a socket of each address family and prints
// "<name> <errno>" (0: made). A vsock socket it makes tries the
// hypervisor (CID 2), as an escaping job would.
const familyScript = `
import socket
for name, family, kind in (("vsock", 40, socket.SOCK_STREAM), ("alg", 38, socket.SOCK_SEQPACKET),
                           ("packet", 17, socket.SOCK_RAW), ("inet", 2, socket.SOCK_STREAM),
                           ("inet6", 10, socket.SOCK_DGRAM), ("netlink", 16, socket.SOCK_RAW)):
    try:
        s = socket.socket(family, kind, 0)
    except OSError as e:
        print(name, e.errno)
        continue
    if name == "vsock":
        s.settimeout(1)
        try:
            s.connect((2, 9999))
        except OSError:
            pass
    s.close()
    print(name, 0)
`

// TestE2ELayersSocketFamilies: a job makes a socket of a family the
// network namespace does not isolate (AF_VSOCK reaches the hypervisor
// and a host's virtual machines) or that only widens the kernel's attack
// surface (AF_ALG, AF_PACKET): each fails with EAFNOSUPPORT, with the
// network isolated and shared alike, while AF_INET, AF_INET6 and
// AF_NETLINK work. The same script run unconfined makes its vsock socket
// where the kernel has vsock: the check can fail.
func TestE2ELayersSocketFamilies(t *testing.T) {
	t.Parallel()
	python := requirePython(t)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		b.SetPolicy("max_mode = \"danger_full_access\"\nallow_network = true\n")
		run := func(keys string) map[string]int {
			job := b.WriteJob("families.toml", keys+fmt.Sprintf("\ncommand = %s\n", tomlArray(python, "-c", familyScript)))
			out, errOut, code := b.Run("run", job)
			require.Equal(t, 0, code, out+errOut)
			got := map[string]int{}
			for line := range strings.Lines(out) {
				name, e, ok := strings.Cut(strings.TrimSpace(line), " ")
				if !ok {
					continue
				}
				n, err := strconv.Atoi(e)
				require.NoError(t, err, out)
				got[name] = n
			}
			require.Len(t, got, 6, out)
			return got
		}
		plain := run(`mode = "danger_full_access"`)
		if plain["vsock"] == int(unix.EAFNOSUPPORT) {
			t.Logf("no vsock in this kernel: socket(AF_VSOCK) fails unconfined too")
		} else {
			require.Zero(t, plain["vsock"], "an unconfined job makes a vsock socket")
		}
		for _, network := range []bool{false, true} {
			got := run(fmt.Sprintf("mode = \"read_only\"\nnetwork = %v", network))
			for _, name := range []string{"vsock", "alg", "packet"} {
				require.Equal(t, int(unix.EAFNOSUPPORT), got[name], "network = %v: socket(%s)", network, name)
			}
			require.Zero(t, got["inet"], "network = %v", network)
			require.Zero(t, got["netlink"], "network = %v", network)
			require.Equal(t, plain["inet6"], got["inet6"], "network = %v: socket(AF_INET6) as unconfined", network)
		}
	})
}

var (
	goCacheOnce sync.Once
	goCacheDir  string
	goCacheErr  error
)

// warmGoCache returns a Go build cache under /var/tmp, warmed once per
// test binary by a go test on the host, so that a job's go test compiles
// its own package and not the standard library (half a minute here).
func warmGoCache(t *testing.T, goBin string) string {
	t.Helper()
	goCacheOnce.Do(func() {
		dir, err := os.MkdirTemp("/var/tmp", "paddock-e2e-gocache-")
		if err != nil {
			goCacheErr = err
			return
		}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
		mod := filepath.Join(dir, "warm")
		if err := writeGoModule(mod, "Warm"); err != nil {
			goCacheErr = err
			return
		}
		cmd := exec.Command(goBin, "test", "./...")
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOCACHE="+filepath.Join(dir, "cache"), "GOPATH="+filepath.Join(dir, "gopath"), "GOTOOLCHAIN=local", "GOFLAGS=-modcacherw", "GOTELEMETRY=off",
			"GOROOT="+filepath.Dir(filepath.Dir(goBin)))
		if out, err := cmd.CombinedOutput(); err != nil {
			goCacheErr = fmt.Errorf("warming the Go cache: %v: %s", err, out)
			return
		}
		goCacheDir = dir
	})
	require.NoError(t, goCacheErr)
	return goCacheDir
}

// writeGoModule writes a module with one passing test named Test<name>
// into dir.
func writeGoModule(dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module m\n\ngo 1.21\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "m_test.go"), []byte("package m\n\nimport \"testing\"\n\nfunc Test"+name+"(t *testing.T) { t.Log(\"ran\") }\n"), 0o644)
}

// TestE2ELayersToolsWork: what jobs run keeps working under the whole
// fence: git (init, commit, log), go test (compiles, links and runs a test
// binary: threads, fork and exec, pipes), make, python's socketpair,
// and at the full grade a POSIX shared memory object and writes to
// /dev/stdout and /dev/stderr.
func TestE2ELayersToolsWork(t *testing.T) {
	t.Parallel()
	python := requirePython(t)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin, err = exec.LookPath("go")
		require.NoError(t, err, "go test as a job needs go")
	}
	for _, tool := range []string{"git", "make"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "a job runs %s", tool)
	}
	cache := warmGoCache(t, goBin)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		script := `set -e
export HOME=/tmp GOCACHE="$2/cache" GOPATH=/tmp/gopath GOTOOLCHAIN=local GOFLAGS=-modcacherw GOTELEMETRY=off GOROOT="$4"
git init -q repo && cd repo && echo hi > a && git add a && git -c user.name=p -c user.email=p@example.com commit -qm one && echo "commits $(git log --oneline | wc -l)" && cd ..
mkdir -p mod && printf 'module m\n\ngo 1.21\n' > mod/go.mod
printf 'package m\n\nimport "testing"\n\nfunc TestJob(t *testing.T) {}\n' > mod/m_test.go
(cd mod && "$1" test -count=1 ./...)
printf 'all:\n\t@echo made\n' > Makefile && make
"$3" -c 'import socket; a, b = socket.socketpair(); a.send(b"x"); print("socketpair", b.recv(1).decode())'
"$3" -c 'from multiprocessing import shared_memory as s; m = s.SharedMemory(create=True, size=8); m.close(); m.unlink(); print("shm ok")' 2>/dev/null || echo "shm unavailable"
echo out > /dev/stdout && echo err > /dev/stderr
echo ALL-OK`
		job := b.WriteJob("tools.toml", fmt.Sprintf("mode = \"workspace_write\"\nwritable = [%q]\ncommand = %s\n",
			filepath.Join(cache, "cache"), tomlArray("/bin/sh", "-c", script, "sh", goBin, cache, python, filepath.Dir(filepath.Dir(goBin)))))
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, out+errOut)
		require.Contains(t, out, "commits 1\n")
		require.Contains(t, out, "ok  \tm\t", "go test ran the job's test")
		require.Contains(t, out, "made\n")
		require.Contains(t, out, "socketpair x\n")
		require.Contains(t, out, "ALL-OK\n")
		if b.grade() == "full" {
			require.Contains(t, out, "out\n")
			require.Contains(t, errOut, "err\n")
			require.Contains(t, out, "shm ok\n")
		}
		// The partial grade has no /proc (/dev/stdout leads there) and no
		// private /dev/shm (the host's is read-only).
	})
}

// grade is the grade the bundle's paddock runs at.
func (b *Bundle) grade() string {
	for _, kv := range b.Env {
		if g, ok := strings.CutPrefix(kv, "PADDOCK_FORCE_GRADE="); ok && g != "" {
			return g
		}
	}
	return string(RequireBwrap(b.T).Grade)
}

// TestE2ELayersReported: paddock probe lists the layers that hold here
// (text and JSON), and the argv a job runs with carries them:
// --unshare-ipc, --seccomp and, with Landlock, the launcher.
func TestE2ELayersReported(t *testing.T) {
	t.Parallel()
	rep := RequireBwrap(t)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		out, errOut, code := b.Run("--json", "probe")
		require.Equal(t, 0, code, errOut)
		var p struct {
			Layers      []string `json:"layers"`
			Seccomp     bool     `json:"seccomp"`
			LandlockABI int      `json:"landlock_abi"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &p), out)
		want := []string{"bwrap", "seccomp"}
		if rep.LandlockABI > 0 {
			want = append(want, "landlock ABI "+strconv.Itoa(rep.LandlockABI))
		}
		require.Equal(t, want, p.Layers)
		require.True(t, p.Seccomp)
		require.Equal(t, rep.LandlockABI, p.LandlockABI)
		out, _, code = b.Run("probe")
		require.Equal(t, 0, code)
		require.Contains(t, out, "layers:            "+strings.Join(want, ", ")+"\n")

		job := b.WriteJob("true.toml", "name = \"t\"\nmode = \"read_only\"\ncommand = [\"true\"]\n")
		_, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, errOut)
		argv := b.Show("t").Attempts[0].ConfinedArgv
		require.Contains(t, argv, "--unshare-ipc")
		require.Contains(t, argv, "--seccomp")
		if rep.LandlockABI > 0 {
			i := slices.Index(argv, "__sandbox-launch")
			require.Positive(t, i, "%q", argv)
			require.Equal(t, sandbox.LauncherProgram(sandbox.Grade(b.grade())), argv[i-1])
			handled, err := strconv.ParseUint(argv[i+1], 16, 64)
			require.NoError(t, err)
			require.NotZero(t, handled, "a Landlock ruleset: %q", argv)
		}
	})
}

// TestE2ELayersUnixDatagramPair: a job cannot reach a host service's
// datagram path socket through a pair of its own: each socket of a
// socketpair(AF_UNIX, SOCK_DGRAM) could sendto(2) or connect(2) to any
// path socket, as a socket(AF_UNIX) could, so the pair is refused (EPERM)
// unless the job has unix_sockets; with it (the policy allowing it), the
// host service hears the job, so the check can fail. Both grades.
func TestE2ELayersUnixDatagramPair(t *testing.T) {
	t.Parallel()
	python := requirePython(t)
	bothGrades(t, func(t *testing.T, b *Bundle) {
		path := filepath.Join(hostDirUnder(t, "/var/tmp"), "dg.sock")
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		require.NoError(t, os.Chmod(path, 0o777))
		heard := make(chan string, 8)
		go func() {
			buf := make([]byte, 64)
			for {
				n, _, err := conn.ReadFrom(buf)
				if err != nil {
					return
				}
				heard <- string(buf[:n])
			}
		}()
		// SOCK_RAW too: the kernel makes it a datagram pair.
		script := fmt.Sprintf(`import socket
for t in (socket.SOCK_DGRAM, socket.SOCK_RAW):
    try:
        a, b = socket.socketpair(socket.AF_UNIX, t)
        a.sendto(b"sendto", %q)
        b.connect(%q)
        b.send(b"connect")
        print("SENT")
    except OSError as e:
        print("errno", e.errno)
`, path, path)
		b.SetPolicy("unix_sockets = true\nallow_network = true\n")
		run := func(keys string) string {
			job := b.WriteJob("dgram.toml", keys+fmt.Sprintf("\ncommand = %s\n", tomlArray(python, "-c", script)))
			out, errOut, code := b.Run("run", job)
			require.Equal(t, 0, code, out+errOut)
			return out
		}
		for _, network := range []bool{false, true} {
			out := run(fmt.Sprintf("mode = \"read_only\"\nnetwork = %v", network))
			require.Equal(t, strings.Repeat(fmt.Sprintf("errno %d\n", unix.EPERM), 2), out, "network = %v", network)
		}
		select {
		case m := <-heard:
			require.Fail(t, "the host service heard a confined job", m)
		default:
		}
		out := run("mode = \"read_only\"\nunix_sockets = true")
		require.Equal(t, "SENT\nSENT\n", out)
		for _, want := range []string{"sendto", "connect", "sendto", "connect"} {
			select {
			case m := <-heard:
				require.Equal(t, want, m)
			case <-time.After(10 * time.Second):
				require.Fail(t, "the host service did not hear a job with unix_sockets", want)
			}
		}
	})
}
