package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"paddock/hooks"
	"paddock/internal/suggest"
	"paddock/internal/tomlfile"
	"paddock/jobspec"
	"paddock/sandbox"
)

// Defaults of a [Policy]: what a queue with no policy set enforces, and
// what an unset key of a policy file means.
const (
	// DefaultMaxMode is the widest mode a job may run in: confined, with
	// write access to its workspace and writable roots only.
	DefaultMaxMode = sandbox.ModeWorkspaceWrite
	// DefaultSetMarker, as an entry of hide or protect, stands for that
	// key's default list, so that a policy can extend it.
	DefaultSetMarker = "@default"
)

// DefaultHide are the paths hidden from every job when a policy sets no
// hide list, relative to $HOME: where the usual tools keep credentials
// (git's credential store in either of its places, git-credential-store(1);
// the GitHub CLI's hosts.yml; npm's, PyPI's, Cargo's, PostgreSQL's
// (libpq's .pgpass), MySQL's, Azure's, Vault's, rclone's, Terraform's and
// podman's tokens and passwords), and the shell and REPL histories, which
// hold what was typed, passwords among it.
var DefaultHide = []string{"~/.ssh", "~/.gnupg", "~/.aws", "~/.config/gcloud", "~/.kube",
	"~/.docker/config.json", "~/.netrc", "~/.git-credentials", "~/.config/git/credentials",
	"~/.config/gh", "~/.npmrc", "~/.pypirc", "~/.cargo/credentials", "~/.cargo/credentials.toml",
	"~/.pgpass", "~/.my.cnf", "~/.azure", "~/.vault-token", "~/.config/rclone",
	"~/.terraform.d/credentials.tfrc.json", "~/.config/containers/auth.json",
	"~/.bash_history", "~/.zsh_history", "~/.python_history", "~/.lesshst", "~/.local/share/fish/fish_history",
	"~/.psql_history", "~/.mysql_history", "~/.sqlite_history", "~/.node_repl_history", "~/.rediscli_history"}

// DefaultProtect are the sub-paths kept read-only inside every writable
// root when a policy sets no protect list, relative to that root: what
// git, a shell, ssh or the user's session would run later on the
// operator's behalf, or who may log in (.ssh/authorized_keys). Debian's
// /etc/skel/.bashrc sources .bash_aliases; ssh runs a config's
// ProxyCommand and LocalCommand (ssh_config(5)), and sshd reads
// .ssh/authorized_keys2 as well by default and .ssh/environment where
// PermitUserEnvironment is set (sshd_config(5)); systemd --user starts
// the units of .config/systemd/ and .local/share/systemd/, with the
// environment of .config/environment.d/ (environment.d(5): LD_PRELOAD
// there runs in every user service), and a desktop session those of
// .config/autostart/, .xprofile and .xsessionrc at login; pam_env reads
// .pam_environment where user_readenv is set. Debian's .profile puts
// .local/bin on $PATH, and Python runs the .pth files of the user's
// site-packages (.local/lib/pythonX.Y/site-packages, site(7)) at every
// start. Editors, tmux and gdb run their start-up files (.vimrc and
// .vim/plugin, init.vim or init.lua, .emacs and init.el, .tmux.conf,
// .gdbinit) as code; npm runs scripts through a .npmrc's script-shell,
// and Cargo every build through a config's build.rustc-wrapper.
// Git reads a repository's config and hooks from the directory its
// "commondir" file names (gitrepository-layout(5)), in any repository, and
// each submodule and linked worktree has its own: those are protected
// too, or a job would write a commondir leading to a config of its own.
// The ".git/modules/*/" entries reach a submodule whose name has no "/"
// even where ".git/config" is left out of a list; with ".git/config" in
// it, the sandbox protects as well every submodule's git directory at any
// depth, the submodules' ".git" files, and the hooks directory, included
// files and fsmonitor script the repository's configuration names (see
// docs/policy.md, "Protected paths"). The "*/" entries do the same for
// the repositories one level below a writable root (a workspace that
// holds several checkouts); a directory there without ".git" has none of
// them protected.
var DefaultProtect = []string{".git/hooks/", ".git/config", ".git/commondir", ".git/config.worktree",
	".git/modules/*/hooks/", ".git/modules/*/config", ".git/modules/*/commondir",
	".git/worktrees/*/commondir", ".git/worktrees/*/config.worktree", ".gitmodules",
	"*/.git/hooks/", "*/.git/config", "*/.git/commondir", "*/.git/config.worktree", "*/.gitmodules",
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases", ".bash_completion", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
	".config/fish/", ".envrc", ".gitconfig", ".config/git/", ".ssh/rc", ".ssh/config", ".ssh/authorized_keys",
	".ssh/authorized_keys2", ".ssh/environment", ".pam_environment", ".xprofile", ".xsessionrc",
	".config/systemd/", ".config/environment.d/", ".local/share/systemd/", ".config/autostart/",
	".local/bin/", ".local/lib/",
	".vimrc", ".vim/", ".config/nvim/", ".emacs", ".emacs.el", ".emacs.d/", ".config/emacs/",
	".tmux.conf", ".config/tmux/", ".gdbinit", ".npmrc", ".cargo/config", ".cargo/config.toml"}

// policyKeys are a policy file's top-level keys, for did-you-mean hints.
var policyKeys = []string{"max_mode", "allow_network", "workspace_roots", "unix_sockets", "hide", "protect", "hook"}

// Policy is the operator's policy for a queue: ceilings on what a job may
// ask for, the paths hidden from and protected against every job, and the
// hook chain every process running the queue's jobs must load. The queue
// stores its TOML text (queue.Store.PolicySet); [ParsePolicy] reads it.
// The zero value is not usable; [DefaultPolicy] is what a queue with no
// policy enforces. A Policy is immutable once parsed and safe for
// concurrent use.
type Policy struct {
	// MaxMode is the widest mode a job may run in, after its hooks have
	// decided. Defaults to [DefaultMaxMode]; "danger_full_access" lets jobs
	// run unconfined.
	MaxMode string `toml:"max_mode"`
	// AllowNetwork lets a job that asks for it (network = true) share the
	// host network. Confined jobs have no network unless they ask and the
	// policy allows it. Defaults to false.
	AllowNetwork bool `toml:"allow_network"`
	// WorkspaceRoots are the directories a job's workspace and writable
	// paths must lie under (symlinks resolved). Defaults to none: anywhere
	// the fence does not protect.
	WorkspaceRoots []string `toml:"workspace_roots"`
	// UnixSockets lets a job that asks for them (unix_sockets = true)
	// create Unix-domain sockets. Defaults to false.
	UnixSockets bool `toml:"unix_sockets"`
	// Hide are paths and globs hidden from every job; "~/" is the worker's
	// $HOME and [DefaultSetMarker] the default list. Defaults to
	// [DefaultHide]; an empty list hides nothing beyond paddock's own files.
	Hide *[]string `toml:"hide"`
	// Protect are sub-paths kept read-only inside every writable root.
	// Defaults to [DefaultProtect]; an empty list protects none.
	Protect *[]string `toml:"protect"`
	// Hooks is the hook chain, in order; each must give sha256.
	Hooks []HookConfig `toml:"hook"`

	// Path is the file the policy was read from; "" for the defaults.
	Path string `toml:"-"`
	// SHA256 is the hex digest of its text; "" for the defaults (a queue
	// with no policy set).
	SHA256 string `toml:"-"`

	hookLines []map[string]int
	lines     tomlfile.Lines
}

// ErrPolicy marks every error ParsePolicy returns for a bad policy file.
var ErrPolicy = errors.New("runner: bad policy")

// DefaultPolicy is the policy of a queue with no policy set.
func DefaultPolicy() Policy {
	return Policy{MaxMode: string(DefaultMaxMode)}
}

// ParsePolicy reads a policy document: data is its TOML text, path the
// file it came from (relative hook paths and workspace roots resolve
// against its directory). Unknown keys, wrong types and bad values are
// errors naming path, line and key; they wrap [ErrPolicy]. It reads no
// module: [Policy.CheckHooks] does.
func ParsePolicy(path string, data []byte) (Policy, error) {
	var p Policy
	data = tomlfile.TrimBOM(data)
	kl := tomlfile.Locate(data, true)
	if where := misTyped(data, kl); where != "" {
		return p, fmt.Errorf("%w: %s:%s", ErrPolicy, path, where)
	}
	md, err := tomlfile.Decode(data, &p, configTypeWords)
	if err != nil {
		var te *tomlfile.Error
		if errors.As(err, &te) && te.Line > 0 {
			return p, fmt.Errorf("%w: %s:%d: %s", ErrPolicy, path, te.Line, strings.TrimPrefix(te.Error(), fmt.Sprintf("line %d: ", te.Line)))
		}
		return p, fmt.Errorf("%w: %s: %v", ErrPolicy, path, err)
	}
	var problems []string
	seen := map[string]int{}
	for _, k := range outermost(md.Undecoded()) {
		if len(k) > 2 && k[0] == "hook" && k[1] == "settings" {
			continue
		}
		cands, last := policyKeys, k[len(k)-1]
		if len(k) > 1 && k[0] == "hook" {
			cands = hookKeys
		}
		line := undecodedLine(kl, k, seen[k.String()])
		seen[k.String()]++
		problems = append(problems, fmt.Sprintf("%s:%d: unknown key %q%s", path, line, k.String(), suggest.DidYouMean(last, cands)))
	}
	sum := sha256.Sum256(data)
	p.Path, p.SHA256, p.lines = path, hex.EncodeToString(sum[:]), kl
	dir := filepath.Dir(path)
	for i := range p.Hooks {
		p.hookLines = append(p.hookLines, hookLinesOf(kl, i))
		if p.Hooks[i].Path != "" && !filepath.IsAbs(p.Hooks[i].Path) {
			p.Hooks[i].Path = filepath.Join(dir, p.Hooks[i].Path)
		}
	}
	for i, r := range p.WorkspaceRoots {
		if !filepath.IsAbs(r) && !strings.HasPrefix(r, "~") {
			p.WorkspaceRoots[i] = filepath.Join(dir, r)
		}
	}
	at := func(key string) string {
		if l := kl[key]; l > 0 {
			return fmt.Sprintf("%s:%d: ", path, l)
		}
		return path + ": "
	}
	if p.MaxMode == "" {
		p.MaxMode = string(DefaultMaxMode)
	} else if _, err := sandbox.ParseMode(p.MaxMode); err != nil {
		problems = append(problems, at("max_mode")+"max_mode: "+err.Error()+modeHint(p.MaxMode))
	}
	for _, r := range p.WorkspaceRoots {
		if strings.HasPrefix(r, "~") {
			// Not expanded: which home would it be, on which host?
			problems = append(problems, fmt.Sprintf("%sworkspace_roots: %q: give an absolute path (~ is not expanded here: the workers' homes may differ)", at("workspace_roots"), r))
			continue
		}
		if _, err := sandbox.Canonical(r); err != nil {
			problems = append(problems, fmt.Sprintf("%sworkspace_roots: %q: %v", at("workspace_roots"), r, err))
		}
	}
	for _, key := range []string{"hide", "protect"} {
		list := p.Hide
		if key == "protect" {
			list = p.Protect
		}
		if list == nil {
			continue
		}
		for _, e := range *list {
			switch {
			case strings.HasPrefix(e, "@") && e != DefaultSetMarker:
				// A mistyped marker would drop the default list silently.
				problems = append(problems, fmt.Sprintf("%s%s: unknown entry %q%s (only %q stands for the default list)",
					at(key), key, e, suggest.DidYouMean(e, []string{DefaultSetMarker}), DefaultSetMarker))
			case strings.HasPrefix(e, "~") && !strings.HasPrefix(e, "~/") && e != "~":
				problems = append(problems, fmt.Sprintf("%s%s: %q: only ~/ (the worker's home) is expanded, not ~user", at(key), key, e))
			case key == "protect" && (filepath.Clean(e) == "/" || e != "" && filepath.Clean(e) == "." || e == "~" || e == "~/" || filepath.Clean(e) == ".." || strings.HasPrefix(filepath.Clean(e), "../")):
				problems = append(problems, fmt.Sprintf("%s%s: %q would protect a writable root itself or what lies above it (the home directory holds the default state directory and its workspaces): every job writing there would be refused", at(key), key, e))
			case key == "hide" && (filepath.Clean(e) == "/" || e == "~" || e == "~/"):
				problems = append(problems, fmt.Sprintf("%s%s: %q would hide what every job runs from (the root, or the home directory that holds the default state directory)", at(key), key, e))
			case key == "hide" && e != "" && e != DefaultSetMarker && !filepath.IsAbs(e) && !strings.HasPrefix(e, "~/"):
				// Accepted, it would look hidden in policy show and hide
				// nothing.
				problems = append(problems, fmt.Sprintf("%s%s: %q is relative: hide takes absolute paths and globs, or ~/ for the worker's home (an entry below every workspace is not supported)", at(key), key, e))
			default:
				if _, err := filepath.Match(e, ""); err != nil || e == "" || strings.ContainsRune(e, 0) {
					problems = append(problems, fmt.Sprintf("%s%s: bad path or glob %q", at(key), key, e))
				}
			}
		}
	}
	// The [[hook]] tables are a config's: checked by the config's rules,
	// and each must pin its module's bytes.
	c := Config{Hooks: p.Hooks, Path: path, hookLines: p.hookLines}.WithDefaults()
	for _, pr := range c.validate() {
		if pr.hook >= 0 {
			problems = append(problems, c.hookAt(pr.hook, pr.key)+": "+pr.msg)
		}
	}
	for i, h := range c.Hooks {
		if h.SHA256 == "" {
			problems = append(problems, fmt.Sprintf("%s: hook %q: sha256: required in a policy (`sha256sum %s` gives it)", c.hookAt(i, ""), h.Name, h.Path))
		}
	}
	p.Hooks = c.Hooks
	if len(problems) > 0 {
		return p, fmt.Errorf("%w:\n  %s", ErrPolicy, strings.Join(orderByLine(path, problems), "\n  "))
	}
	return p, nil
}

// orderByLine sorts problems, each "PATH:LINE: ..." or "PATH: ...", by
// their line, stably, those without one first: the order a reader goes
// through the file in.
func orderByLine(path string, problems []string) []string {
	line := func(p string) int {
		rest, ok := strings.CutPrefix(p, path+":")
		if !ok {
			return 0
		}
		n, _, _ := strings.Cut(rest, ":")
		l, err := strconv.Atoi(n)
		if err != nil {
			return 0
		}
		return l
	}
	slices.SortStableFunc(problems, func(a, b string) int { return line(a) - line(b) })
	return problems
}

// IsDefault reports whether p is the built-in default (no policy set).
func (p Policy) IsDefault() bool { return p.SHA256 == "" }

// Label names p in messages: its file and digest, or "the default policy".
func (p Policy) Label() string {
	if p.IsDefault() {
		return "the default policy (none set)"
	}
	return fmt.Sprintf("the queue's policy (sha256 %s, set from %s)", short(p.SHA256), p.Path)
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// HideList is the effective hide list: Hide with [DefaultSetMarker]
// expanded, or [DefaultHide] when unset.
func (p Policy) HideList() []string { return expand(p.Hide, DefaultHide) }

// ProtectList is the effective protect list, like [Policy.HideList].
func (p Policy) ProtectList() []string { return expand(p.Protect, DefaultProtect) }

func expand(l *[]string, def []string) []string {
	if l == nil {
		return slices.Clone(def)
	}
	var out []string
	for _, e := range *l {
		if e == DefaultSetMarker {
			out = append(out, def...)
			continue
		}
		out = append(out, e)
	}
	return out
}

// Warnings are what a policy sets that is valid but likely not meant,
// one sentence each, naming the file and line: a workspace root that is,
// holds or lies in one of [sandbox.SystemTrees] (an operator may mean
// it, `workspace_roots = ["/"]` rarely does), and a non-empty hide or
// protect list without [DefaultSetMarker], which drops the default list
// (`protect = [".env"]` protects .env and no longer .git/hooks). An empty
// list (`protect = []`) is the documented way to drop the defaults and is
// not warned of. Nil when there is nothing to say.
func (p Policy) Warnings() []string {
	var out []string
	for _, r := range p.WorkspaceRoots {
		var opened []string
		for _, t := range sandbox.SystemTrees {
			if underAny(t, []string{r}) || underAny(r, []string{t}) {
				opened = append(opened, t)
			}
		}
		if len(opened) == 0 {
			continue
		}
		where := p.Path
		if l := p.lines["workspace_roots"]; l > 0 {
			where = fmt.Sprintf("%s:%d", p.Path, l)
		}
		out = append(out, fmt.Sprintf("%s: workspace_roots: %q lets jobs write in %s, which the host runs or configures itself from: a root worker's job could have the host run what it leaves there",
			where, r, strings.Join(opened, ", ")))
	}
	for _, key := range []string{"hide", "protect"} {
		list, def, verb := p.Hide, DefaultHide, "hidden"
		if key == "protect" {
			list, def, verb = p.Protect, DefaultProtect, "protected"
		}
		if list == nil || len(*list) == 0 || slices.Contains(*list, DefaultSetMarker) {
			continue
		}
		where := p.Path
		if l := p.lines[key]; l > 0 {
			where = fmt.Sprintf("%s:%d", p.Path, l)
		}
		out = append(out, fmt.Sprintf("%s: %s: the list does not include %q, so the %d default entries (%s, …) are not %s; add %q to the list to keep them",
			where, key, DefaultSetMarker, len(def), strings.Join(def[:3], ", "), verb, DefaultSetMarker))
	}
	return out
}

// PlaceChainError is [Config.PlaceChainError] for the policy's chain.
func (p Policy) PlaceChainError(err error) error {
	return Config{Hooks: p.Hooks, Path: p.Path, hookLines: p.hookLines}.PlaceChainError(err)
}

// HookConfigs is the policy's chain in the hooks package's form.
func (p Policy) HookConfigs() []hooks.Config { return Config{Hooks: p.Hooks}.HookConfigs() }

// CheckHooks checks every [[hook]] as a worker would load it, short of
// compiling: the module file exists and its bytes match sha256. Errors
// name the policy file and the hook's line; they wrap [ErrPolicy].
func (p Policy) CheckHooks() error {
	if problems := (Config{Hooks: p.Hooks, Path: p.Path, hookLines: p.hookLines}).hookProblems(); len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s", ErrPolicy, strings.Join(problems, "\n  "))
	}
	return nil
}

// Ceiling names a ceiling of the policy that refused a job.
type Ceiling string

// The ceilings, as [RefusedError.Ceiling] names them.
const (
	CeilingMaxMode        Ceiling = "max_mode"
	CeilingNetwork        Ceiling = "allow_network"
	CeilingWorkspaceRoots Ceiling = "workspace_roots"
	CeilingUnixSockets    Ceiling = "unix_sockets"
)

// RefusedError is a job the policy refuses: what it asked (Key) against
// which ceiling. Check it with errors.As; errors.Is(err, ErrRefusedByPolicy)
// holds.
type RefusedError struct {
	File    string  // the job file, as the user named it; "" when unknown
	Line    int     // line of the key (or of the job); 0 when unknown
	Job     string  // the job's name; "" for an unnamed job
	Key     string  // the job key at fault: "mode", "network", "unix_sockets", "workspace", "writable"
	Ceiling Ceiling // the ceiling that refused it
	Msg     string  // what was asked and what the policy allows
}

// ErrRefusedByPolicy is what every [RefusedError] is.
var ErrRefusedByPolicy = errors.New("refused by policy")

func (e *RefusedError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Job != "" {
		fmt.Fprintf(&b, "job %q: ", e.Job)
	}
	fmt.Fprintf(&b, "%s: refused by policy (%s): %s", e.Key, e.Ceiling, e.Msg)
	return b.String()
}

// Is makes errors.Is(err, ErrRefusedByPolicy) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefusedByPolicy }

// Ask is what a job asks for, as the policy judges it: the mode, the
// network, the workspace and writable paths. Empty Mode is the config's
// default mode.
type Ask struct {
	Mode        sandbox.Mode
	Network     bool
	UnixSockets bool
	Workspace   string   // "" for the default workspace (in the state directory: always allowed)
	Writable    []string // extra writable roots
}

// Judge returns the first ceiling a refuses, as a *RefusedError whose
// File, Line and Job the caller fills; nil when the policy allows it.
func (p Policy) Judge(a Ask) *RefusedError {
	maxMode := sandbox.Mode(p.MaxMode)
	if maxMode == "" {
		maxMode = DefaultMaxMode
	}
	modes := sandbox.Modes()
	if slices.Index(modes, a.Mode) > slices.Index(modes, maxMode) {
		return &RefusedError{Key: "mode", Ceiling: CeilingMaxMode,
			Msg: fmt.Sprintf("the job's mode is %q (its own mode key, or the config's default_mode when it sets none); the policy allows at most %q: set mode = %q", a.Mode, maxMode, maxMode)}
	}
	if a.Network && a.Mode.Confined() && !p.AllowNetwork {
		return &RefusedError{Key: "network", Ceiling: CeilingNetwork,
			Msg: "the job asks for the network; the policy has allow_network = false (drop network = true, or the operator may allow it)"}
	}
	if a.UnixSockets && a.Mode.Confined() && !p.UnixSockets {
		return &RefusedError{Key: "unix_sockets", Ceiling: CeilingUnixSockets,
			Msg: "the job asks for Unix sockets; the policy has unix_sockets = false (drop unix_sockets = true, or the operator may allow them)"}
	}
	if len(p.WorkspaceRoots) == 0 && a.Mode == sandbox.ModeWorkspaceWrite {
		check := func(key, path string) *RefusedError {
			if path == "" {
				return nil
			}
			if d := systemDirOf(path); d != "" {
				return &RefusedError{Key: key, Ceiling: CeilingWorkspaceRoots, Msg: systemDirRefusal(path, d)}
			}
			return nil
		}
		if e := check("workspace", a.Workspace); e != nil {
			return e
		}
		for _, w := range a.Writable {
			if e := check("writable", w); e != nil {
				return e
			}
		}
	}
	if len(p.WorkspaceRoots) > 0 {
		check := func(key, path string) *RefusedError {
			if path == "" || underAny(path, p.WorkspaceRoots) {
				return nil
			}
			named := fmt.Sprintf("%q", path)
			if c := canonicalOrClean(path); c != filepath.Clean(path) {
				// Judged where its links lead, which the job may have
				// chosen.
				named += fmt.Sprintf(" (which leads to %q)", c)
			}
			return &RefusedError{Key: key, Ceiling: CeilingWorkspaceRoots,
				Msg: fmt.Sprintf("%s is not under any of the policy's workspace_roots (%s): choose a directory under one, or the operator may add it there", named, strings.Join(p.WorkspaceRoots, ", "))}
		}
		if e := check("workspace", a.Workspace); e != nil {
			return e
		}
		for _, w := range a.Writable {
			if e := check("writable", w); e != nil {
				return e
			}
		}
	}
	return nil
}

// systemDirOf returns the entry of [sandbox.SystemTrees] that path
// (symlinks resolved where it exists) is or lies under, or "".
func systemDirOf(path string) string {
	for _, d := range sandbox.SystemTrees {
		if underAny(path, []string{d}) {
			return d
		}
	}
	return ""
}

// systemDirRefusal is the message refusing path, inside system
// directory dir.
func systemDirRefusal(path, dir string) string {
	return fmt.Sprintf("%q is in %s, a system directory: with no workspace_roots in the policy, a job may not write there (the host would run what it leaves); the operator may allow it by listing it in workspace_roots", path, dir)
}

// underAny reports whether path (symlinks resolved where it exists) is
// one of roots or under one (each resolved likewise).
func underAny(path string, roots []string) bool {
	c := canonicalOrClean(path)
	for _, r := range roots {
		r = canonicalOrClean(r)
		if c == r || strings.HasPrefix(c, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}

func canonicalOrClean(p string) string {
	if c, err := sandbox.Canonical(p); err == nil {
		return c
	}
	a, _ := filepath.Abs(p)
	return filepath.Clean(a)
}

// JudgeSpecs judges the specs of one job file (its text in source, its
// name for messages in file) against p and returns every refusal, one per
// line, each a *RefusedError naming file, line, job, key and ceiling
// (joined with errors.Join: errors.Is(err, ErrRefusedByPolicy) holds);
// nil when all pass. defaultMode is the mode of a job that names none.
func (p Policy) JudgeSpecs(file string, source []byte, specs []jobspec.Spec, defaultMode string) error {
	var problems []error
	var at func(int, string) int
	for _, sp := range specs {
		if sp.Schedule != "" && len(sp.Command) == 0 {
			continue
		}
		e := p.Judge(AskOf(sp, defaultMode))
		if e == nil {
			continue
		}
		if at == nil {
			at = jobspec.KeyLines(source)
		}
		e.File, e.Line, e.Job = file, at(sp.Line, e.Key), sp.Name
		problems = append(problems, e)
	}
	return errors.Join(problems...)
}

// AskOf is what a job spec asks for, with defaultMode for a job naming no
// mode. A job that says nothing of the network asks for none.
func AskOf(sp jobspec.Spec, defaultMode string) Ask {
	mode := sp.Mode
	if mode == "" {
		mode = defaultMode
	}
	return Ask{Mode: sandbox.Mode(mode), Network: sp.Network != nil && *sp.Network, UnixSockets: sp.UnixSockets,
		Workspace: sp.Workspace, Writable: sp.Writable}
}

// SameChain reports, as an error saying which hook differs and how to fix
// it, whether the config's [[hook]] tables name the policy's chain: the
// same hooks in the same order, each pinned to the same sha256. A config
// with no [[hook]] tables agrees with any policy. nil when they agree.
func (p Policy) SameChain(c Config) error {
	if len(c.Hooks) == 0 {
		return nil
	}
	fix := fmt.Sprintf("remove the [[hook]] tables from %s (the queue's policy names the chain) or make them match `paddock policy show`", c.Path)
	if len(c.Hooks) != len(p.Hooks) {
		return fmt.Errorf("%w: %s names %s, %s names %d: %s", ErrPolicyMismatch, c.Path, hooksCount(len(c.Hooks)), p.Label(), len(p.Hooks), fix)
	}
	for i := range c.Hooks {
		ch, ph := c.Hooks[i], p.Hooks[i]
		if ch.Name != ph.Name || !strings.EqualFold(ch.SHA256, ph.SHA256) {
			return fmt.Errorf("%w: hook %d is %q (sha256 %s) in %s but %q (sha256 %s) in %s: %s",
				ErrPolicyMismatch, i+1, ch.Name, orNone(ch.SHA256), c.hookAt(i, "sha256"), ph.Name, ph.SHA256, p.Label(), fix)
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "not given"
	}
	return short(s)
}

// ErrPolicyMismatch: this process's view of the policy (its config's hook
// chain, a module's bytes) differs from the queue's; it must not run jobs.
var ErrPolicyMismatch = errors.New("runner: this process does not match the queue's policy")

// ExpandHome replaces a leading "~/" of path with home.
func ExpandHome(path, home string) string {
	if rest, ok := strings.CutPrefix(path, "~/"); ok && home != "" {
		return filepath.Join(home, rest)
	}
	return path
}

// homeDir is $HOME, or "" when unset.
func homeDir() string { h, _ := os.UserHomeDir(); return h }

// hooksCount is "1 hook" or "N hooks".
func hooksCount(n int) string {
	if n == 1 {
		return "1 hook"
	}
	return fmt.Sprintf("%d hooks", n)
}

// modeHint is the did-you-mean of a mistyped mode m, or "".
func modeHint(m string) string {
	var names []string
	for _, n := range sandbox.Modes() {
		names = append(names, string(n))
	}
	return suggest.DidYouMean(m, names)
}
