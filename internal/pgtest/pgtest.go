// Package pgtest starts throw-away PostgreSQL servers for tests: a fresh
// cluster (initdb) in a temporary directory, run as an unprivileged user
// (the server refuses to run as root), listening on a Unix socket only (no
// TCP port: nothing leaves this machine), and removed when the test or the
// test binary ends.
//
// The server binaries are found on PATH or under
// /usr/lib/postgresql/<version>/bin (Debian's postgresql package; `make
// test` installs it when missing). When they are missing a test skips,
// or fails under PADDOCK_REQUIRE_BWRAP=1 (CI), where nothing may be
// skipped ([e2etest.Unavailable]).
//
// Everything here is for tests: failures end the calling test.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"paddock/internal/e2etest"
)

// EnvURL names the environment variable through which a test binary
// hands its shared server's URL to the child processes it starts
// ([Shared] sets it; [FromEnv] reads it).
const EnvURL = "PADDOCK_PGTEST_URL"

// User is the database superuser of every cluster this package makes.
const User = "paddock"

// Server is one running throw-away cluster. Its methods are safe for
// concurrent use.
type Server struct {
	Dir     string // the temporary directory holding data/ and sock/
	SockDir string // the directory of the server's Unix socket (all a client needs)
	bin     string
	cred    *syscall.Credential // nil when not root
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// BinDir returns the directory holding initdb and postgres, or an error
// saying where it looked.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// The newest version first (numeric order: 9 before 15 otherwise).
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("pgtest: no PostgreSQL server: initdb and postgres are neither on PATH nor in /usr/lib/postgresql/*/bin (apt-get install postgresql, or `make test`, which installs it)")
}

// Start starts a cluster of its own for tb, stopped and removed when tb
// ends. It skips tb when PostgreSQL is not installed (fails under
// PADDOCK_REQUIRE_BWRAP=1).
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := start()
	if err != nil {
		if errors.Is(err, errNoServer) {
			e2etest.Unavailable(tb, "%v", err)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(s.Remove)
	return s
}

var errNoServer = errors.New("pgtest: PostgreSQL is not installed")

var shared struct {
	once sync.Once
	s    *Server
	err  error
}

// Shared returns the test binary's shared server, starting it on first
// use and setting [EnvURL] so that child processes reach it. The test
// binary must call [Main] (which removes it) from TestMain.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.once.Do(func() {
		shared.s, shared.err = start()
		if shared.err == nil {
			os.Setenv(EnvURL, shared.s.URL("postgres"))
		}
	})
	if shared.err != nil {
		if errors.Is(shared.err, errNoServer) {
			e2etest.Unavailable(tb, "%v", shared.err)
		}
		tb.Fatal(shared.err)
	}
	return shared.s
}

// Main runs the tests of m and then removes the shared server, if one was
// started. Call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared.s != nil {
		shared.s.Remove()
	}
	return code
}

// FromEnv returns the URL of the parent test binary's shared server (see
// [Shared]), "" when there is none.
func FromEnv() string { return os.Getenv(EnvURL) }

func start() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoServer, err)
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{Dir: dir, SockDir: filepath.Join(dir, "sock"), bin: bin, logPath: filepath.Join(dir, "server.log")}
	if err := s.init(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// init makes the directories, owned by the unprivileged user when root,
// and runs initdb.
func (s *Server) init() error {
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			return err
		}
		s.cred = cred
	}
	if err := os.Mkdir(s.SockDir, 0o755); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	for _, p := range []string{s.Dir, s.SockDir} {
		if s.cred != nil {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return fmt.Errorf("pgtest: %w", err)
			}
		}
	}
	// The directory must be reachable by the server's user.
	if err := os.Chmod(s.Dir, 0o755); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cmd := s.command("initdb", "-D", filepath.Join(s.Dir, "data"), "-U", User, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %w: %s", err, out)
	}
	return nil
}

// unprivileged returns the credentials of the user "postgres", else
// "nobody".
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("pgtest: running as root and neither user postgres nor nobody exists: the server refuses to run as root")
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C", "HOME=" + s.Dir, "TZ=UTC"}
	cmd.Dir = s.Dir
	// Pdeathsig: a test binary killed mid-run takes its server with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Start starts the server (again, after [Server.Stop]) and waits until it
// accepts connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgtest: server already running")
	}
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer log.Close()
	// No TCP (listen_addresses empty); durability off (a throw-away
	// cluster: a restart is a clean shutdown, never a power cut).
	cmd := s.command("postgres", "-D", filepath.Join(s.Dir, "data"), "-k", s.SockDir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	s.exited = exited
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			s.cmd = nil
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("pgtest: postgres exited at start: %s", b)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: postgres did not accept connections within 60s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down ("fast" shutdown: open connections are
// closed, as when a database restarts) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// Remove stops the server and deletes its directory.
func (s *Server) Remove() {
	s.Stop()
	os.RemoveAll(s.Dir)
}

// URL returns a postgres:// URL reaching database db over the Unix socket.
func (s *Server) URL(db string) string {
	return "postgres://" + User + "@/" + url.PathEscape(db) + "?host=" + url.QueryEscape(s.SockDir) + "&sslmode=disable"
}

// NewDatabase creates a database of its own for key (the same key names
// the same database, so that another process can reach it) and returns
// its URL. Safe for concurrent use.
func (s *Server) NewDatabase(tb testing.TB, key string) string {
	tb.Helper()
	u, err := s.Database(key)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// Database creates, when missing, the database named after key and
// returns its URL.
func (s *Server) Database(key string) (string, error) {
	return database(s.URL("postgres"), key)
}

// DatabaseFromEnv is [Server.Database] on the server of [FromEnv], for
// child processes.
func DatabaseFromEnv(key string) (string, error) {
	u := FromEnv()
	if u == "" {
		return "", errors.New("pgtest: no server: " + EnvURL + " is not set")
	}
	return database(u, key)
}

func database(adminURL, key string) (string, error) {
	sum := sha256.Sum256([]byte(key))
	name := "t_" + hex.EncodeToString(sum[:8])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	defer c.Close(context.Background())
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	if !exists {
		// CREATE DATABASE copies template1 under a lock that concurrent
		// creations wait for; a racing twin's creation is fine.
		if _, err := c.Exec(ctx, `CREATE DATABASE `+name); err != nil && !strings.Contains(err.Error(), "already exists") {
			return "", fmt.Errorf("pgtest: create database: %w", err)
		}
	}
	return strings.Replace(adminURL, "/postgres?", "/"+name+"?", 1), nil
}
