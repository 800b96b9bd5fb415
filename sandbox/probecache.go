package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"paddock/sandbox/launch"
)

// ProbeCacheFile is the name of the probe cache file; the CLI keeps it at
// <state>/cache/probe.json.
const ProbeCacheFile = "probe.json"

// ProbeCacheMaxAgeDefault is how long a cached probe report is trusted when
// [ProbeCachedParams].MaxAge is zero: 24 hours.
const ProbeCacheMaxAgeDefault = 24 * time.Hour

// probeCacheFormat versions the cache file. Bump it whenever [ProbeWith]
// changes what it checks or what its report means: an old file is then
// ignored and the host probed again.
const probeCacheFormat = 3

// ProbeCachedParams configure [ProbeCached].
type ProbeCachedParams struct {
	// Path is the cache file. Required. Its directory is created (0700)
	// when the report is written.
	Path string
	// MaxAge is how old a cached report may be. Defaults to
	// [ProbeCacheMaxAgeDefault].
	MaxAge time.Duration
	// Refresh ignores the cache and the memoized report: probe, then
	// rewrite the cache (what `paddock probe` does).
	Refresh bool
	// Executable is the bwrap: an absolute path, or a name looked up in
	// PATH. Defaults to "bwrap".
	Executable string
}

// ProbeCached is [Probe] with a cache file, so that a restart on an
// unchanged host does not run bwrap again. It returns the memoized report
// when there is one (unless Refresh), else a cached report that is still
// valid, else it probes (MaxGrade from $PADDOCK_FORCE_GRADE, as [Probe]),
// and writes a usable report to the cache; a failed probe removes the
// cache file. A usable report is memoized, as by [Probe], and [Discovered]
// returns it. Safe for concurrent use, within a process and across
// processes sharing the file (it is replaced by rename).
//
// # The cache fails closed
//
// A cached report is used only when every one of these holds; any doubt
// means a fresh probe:
//
//   - the file is a regular file owned by the effective user, not
//     writable by group or others, and parses as the current format;
//   - it was written less than MaxAge ago, and not in the future;
//   - the host key it was written for equals the current one: the bwrap
//     found now (absolute path; device, inode, size, mode, mtime and
//     ctime of the file it names), the kernel release and boot id, the
//     real and effective uid, the user, mount, pid and network
//     namespaces, the user-namespace sysctls, and the grade cap from
//     $PADDOCK_FORCE_GRADE;
//   - the report is usable and consistent with that key: the same
//     executable, a grade the cap allows, the setuid bit and root as they
//     are now, the version `bwrap --version` gives now (run for the key,
//     never taken from the file), --disable-userns exactly when that
//     version and the setuid bit call for it, the kernel paths it
//     covers exactly those [FindKernelPaths] finds now, and a Landlock
//     ABI level that is 0 or the one [launch.LandlockABI] finds now
//     (the layers list is rebuilt, never read).
//
// A cached report is never more than what a fresh probe found with the
// same key. What the key cannot see (an AppArmor or seccomp policy loaded
// since, a library bwrap uses replaced in place) is bounded by MaxAge, and
// can only make bwrap refuse to build a sandbox, which fails the job
// closed; the worker removes the cache file when that happens
// ([InvalidateProbeCache]).
//
// The error wraps [ErrUnusable] when the grade is unusable; the report is
// filled in either case. When ctx ends during the probe, the error wraps
// ctx.Err() instead (not ErrUnusable) and the cache file is left alone.
func ProbeCached(ctx context.Context, p ProbeCachedParams) (ProbeReport, error) {
	if !p.Refresh {
		if r := probed.Load(); r != nil {
			return *r, nil
		}
	}
	probeMu.Lock()
	defer probeMu.Unlock()
	if !p.Refresh {
		if r := probed.Load(); r != nil {
			return *r, nil
		}
	}
	r, err := probeThroughCache(ctx, p)
	if err == nil {
		probed.Store(&r)
	}
	return r, err
}

// InvalidateProbeCache removes the probe cache file at path, so that the
// next [ProbeCached] probes again. A missing file is not an error. It does
// not forget the memoized report of this process.
func InvalidateProbeCache(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}

// forcedMaxGrade reads $PADDOCK_FORCE_GRADE: the grade cap, or a report
// and error for a value that is neither partial nor full.
func forcedMaxGrade() (Grade, *ProbeReport, error) {
	switch g := os.Getenv(ForceGradeEnv); g {
	case "", string(GradeFull):
		return "", nil, nil
	case string(GradePartial):
		return GradePartial, nil, nil
	default:
		rep := ProbeReport{Grade: GradeUnusable, Root: os.Geteuid() == 0,
			Error: fmt.Sprintf("%s=%q: want %q or %q", ForceGradeEnv, g, GradePartial, GradeFull), Hint: "unset " + ForceGradeEnv + " or set it to partial"}
		return "", &rep, fmt.Errorf("%w: %s", ErrUnusable, rep.Error)
	}
}

// probeCacheEntry is the cache file's content.
type probeCacheEntry struct {
	Format   int             `json:"format"`
	Key      json.RawMessage `json:"key"`
	ProbedAt time.Time       `json:"probed_at"`
	Report   ProbeReport     `json:"report"`
}

// probeKey is what a probe's result depends on, as far as it can be read
// cheaply. Two probes with equal keys are expected to find the same.
type probeKey struct {
	Executable string            `json:"executable"`
	Dev        uint64            `json:"dev"`
	Ino        uint64            `json:"ino"`
	Size       int64             `json:"size"`
	Mode       uint32            `json:"mode"`
	MtimeNS    int64             `json:"mtime_ns"`
	CtimeNS    int64             `json:"ctime_ns"`
	Kernel     string            `json:"kernel"`
	BootID     string            `json:"boot_id"`
	UID        int               `json:"uid"`
	EUID       int               `json:"euid"`
	Namespaces map[string]string `json:"namespaces"`
	Sysctls    map[string]string `json:"sysctls"`
	MaxGrade   Grade             `json:"max_grade"`
	// Version is what `bwrap --version` says now: the cached report's own
	// version field is never trusted (it decides --disable-userns).
	Version string `json:"version"`
}

// keySysctls are the sysctls that decide whether unprivileged user, mount,
// pid and network namespaces can be made. A missing one reads as "".
var keySysctls = []string{
	"/proc/sys/kernel/unprivileged_userns_clone",
	"/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
	"/proc/sys/kernel/unprivileged_userns_apparmor_policy",
	"/proc/sys/user/max_user_namespaces",
	"/proc/sys/user/max_mnt_namespaces",
	"/proc/sys/user/max_pid_namespaces",
	"/proc/sys/user/max_net_namespaces",
}

// hostProbeKey builds the key for the bwrap named exe and the grade cap.
// An error means the key cannot be trusted (the cache is then not used).
func hostProbeKey(exe string, maxGrade Grade) (probeKey, error) {
	k := probeKey{Executable: exe, UID: os.Getuid(), EUID: os.Geteuid(), MaxGrade: maxGrade,
		Namespaces: map[string]string{}, Sysctls: map[string]string{}}
	fi, err := os.Stat(exe)
	if err != nil {
		return k, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return k, errors.New("no stat_t")
	}
	k.Dev, k.Ino, k.Size, k.Mode = uint64(st.Dev), st.Ino, st.Size, st.Mode
	k.MtimeNS = st.Mtim.Sec*1e9 + st.Mtim.Nsec
	k.CtimeNS = st.Ctim.Sec*1e9 + st.Ctim.Nsec
	vctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vout, err := exec.CommandContext(vctx, exe, "--version").Output()
	if err != nil {
		return k, err
	}
	k.Version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(vout)), "bubblewrap"))
	for _, f := range []struct {
		dst  *string
		path string
	}{{&k.Kernel, "/proc/sys/kernel/osrelease"}, {&k.BootID, "/proc/sys/kernel/random/boot_id"}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return k, err
		}
		*f.dst = strings.TrimSpace(string(b))
	}
	for _, ns := range []string{"user", "mnt", "pid", "net"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return k, err
		}
		k.Namespaces[ns] = l
	}
	for _, path := range keySysctls {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return k, err
		}
		k.Sysctls[filepath.Base(path)] = strings.TrimSpace(string(b))
	}
	return k, nil
}

// probeThroughCache is ProbeCached without the memo: the cache when it
// holds, else a probe that rewrites (or, on failure, removes) the cache.
func probeThroughCache(ctx context.Context, p ProbeCachedParams) (ProbeReport, error) {
	maxGrade, rep, err := forcedMaxGrade()
	if err != nil {
		return *rep, err
	}
	if p.Path == "" {
		r, err := ProbeWith(ctx, ProbeParams{Executable: p.Executable, MaxGrade: maxGrade})
		if ctx.Err() != nil {
			return r, fmt.Errorf("sandbox: probe interrupted: %w", ctx.Err())
		}
		return r, err
	}
	if p.MaxAge <= 0 {
		p.MaxAge = ProbeCacheMaxAgeDefault
	}
	if p.Executable == "" {
		p.Executable = "bwrap"
	}
	// The key is read before the probe, so a bwrap replaced while it is
	// probed leaves a key that no longer matches: the next start probes.
	var key []byte
	if exe, err := exec.LookPath(p.Executable); err == nil {
		if exe, err = filepath.Abs(exe); err == nil {
			if k, err := hostProbeKey(exe, maxGrade); err == nil {
				key, _ = json.Marshal(k)
			}
		}
	}
	if key != nil && !p.Refresh {
		if r, ok := readProbeCache(p.Path, key, p.MaxAge, maxGrade); ok {
			return r, nil
		}
	}
	r, err := ProbeWith(ctx, ProbeParams{Executable: p.Executable, MaxGrade: maxGrade})
	if ctx.Err() != nil {
		// A probe cut short says nothing about the host (its bwrap was
		// killed): the cache is left as it was, and the grade is not
		// reported as unusable.
		return r, fmt.Errorf("sandbox: probe interrupted: %w", ctx.Err())
	}
	if err != nil || key == nil || r.Executable == "" {
		// Nothing usable to keep, or no key to keep it under.
		_ = InvalidateProbeCache(p.Path)
		return r, err
	}
	// A cache that cannot be written only costs the next start a probe.
	_ = writeProbeCache(p.Path, probeCacheEntry{Format: probeCacheFormat, Key: key, ProbedAt: time.Now().UTC(), Report: r})
	return r, nil
}

// readProbeCache returns the cached report at path when it is valid for
// key (see ProbeCached), and false for any doubt.
func readProbeCache(path string, key []byte, maxAge time.Duration, maxGrade Grade) (ProbeReport, bool) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 {
		return ProbeReport{}, false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return ProbeReport{}, false
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 1<<20 {
		return ProbeReport{}, false
	}
	var e probeCacheEntry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Format != probeCacheFormat {
		return ProbeReport{}, false
	}
	var k probeKey
	if err := json.Unmarshal(e.Key, &k); err != nil {
		return ProbeReport{}, false
	}
	// Compare canonical encodings: the stored bytes may be reformatted.
	if canon, err := json.Marshal(k); err != nil || !bytes.Equal(canon, key) {
		return ProbeReport{}, false
	}
	age := time.Since(e.ProbedAt)
	if e.ProbedAt.IsZero() || age < -time.Minute || age > maxAge {
		return ProbeReport{}, false
	}
	r := e.Report
	setuid := k.Mode&syscall.S_ISUID != 0
	switch {
	case r.Grade != GradeFull && r.Grade != GradePartial,
		maxGrade == GradePartial && r.Grade != GradePartial,
		r.Error != "",
		r.Executable != k.Executable,
		r.Setuid != setuid,
		r.Root != (k.EUID == 0),
		r.Version != k.Version,
		r.DisableUserns != (versionAtLeast(k.Version, 0, 8) && !setuid),
		!r.KernelPaths.known() || !reflect.DeepEqual(r.KernelPaths, FindKernelPaths()),
		r.LandlockABI != 0 && r.LandlockABI != launch.LandlockABI():
		return ProbeReport{}, false
	}
	r.Layers = r.Discovery().Layers()
	r.Cached = true
	r.Notes = append(r.Notes, fmt.Sprintf("from the probe cache %s, probed %s", path, e.ProbedAt.Format(time.RFC3339)))
	return r, true
}

// writeProbeCache replaces path with e, through a temporary file and a
// rename, so that readers see the old file or the new one.
func writeProbeCache(path string, e probeCacheEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
