package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/sandbox"
)

func TestParsePolicyErrorsNameLineAndKey(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ text, want string }{
		"unknown key":        {"allow_netwrk = true\n", `p.toml:1: unknown key "allow_netwrk" (did you mean "allow_network"?)`},
		"bad mode":           {"\n\nmax_mode = \"root\"\n", "p.toml:3: max_mode:"},
		"mode typo":          {"max_mode = \"readonly\"\n", `(did you mean "read_only"?)`},
		"~ root":             {"workspace_roots = [\"~/proj\"]\n", `p.toml:1: workspace_roots: "~/proj": give an absolute path`},
		"unknown table once": {"[[hook]]\nname = \"a\"\npath = \"/a.wasm\"\nsha256 = \"00\"\nsetings = { deny = [\"x\"] }\n", "p.toml:5: unknown key \"hook.setings\" (did you mean \"settings\"?)"},
		"in file order":      {"max_mode = \"x\"\nzz = 1\n", "p.toml:1: max_mode: sandbox: unknown mode \"x\" (valid: read_only, workspace_write, danger_full_access)\n  /etc/p.toml:2: unknown key \"zz\""},
		"wrong type":         {"allow_network = \"yes\"\n", "p.toml:1:"},
		"hook no sha256":     {"[[hook]]\nname = \"a\"\npath = \"/a.wasm\"\n", `p.toml:1: hook "a": sha256: required in a policy`},
		"hook no name":       {"[[hook]]\npath = \"/a.wasm\"\nsha256 = \"00\"\n", "p.toml:1: hook 1: name: required"},
		"hook unknown":       {"[[hook]]\nname = \"a\"\npath = \"/a.wasm\"\nsha256 = \"00\"\nmay_widn = true\n", `p.toml:5: unknown key "hook.may_widn"`},
		"bad hide glob":      {"hide = [\"/[\"]\n", "p.toml:1: hide: bad path or glob"},
		"relative hide":      {"\nhide = [\"/srv/x\", \".env\"]\n", `p.toml:2: hide: ".env" is relative`},
		"empty protect":      {"protect = [\"\"]\n", "p.toml:1: protect: bad path or glob"},
		"mistyped marker":    {"protect = [\"@defualt\"]\n", `p.toml:1: protect: unknown entry "@defualt" (did you mean "@default"?)`},
		"hide marker":        {"hide = [\"@defaults\"]\n", `p.toml:1: hide: unknown entry "@defaults"`},
		"protect /":          {"protect = [\"/\"]\n", `p.toml:1: protect: "/" would protect a writable root`},
		"protect ~/":         {"protect = [\"~/\"]\n", `p.toml:1: protect: "~/" would protect a writable root`},
		"hide /":             {"hide = [\"/\"]\n", `p.toml:1: hide: "/" would hide what every job runs from`},
		"protect ..":         {"protect = [\"../x\"]\n", `p.toml:1: protect: "../x" would protect`},
		"protect .":          {"protect = [\"./\"]\n", `p.toml:1: protect: "./" would protect a writable root`},
		"empty hide":         {"hide = [\"\"]\n", "p.toml:1: hide: bad path or glob"},
		"~user":              {"hide = [\"~root/.ssh\"]\n", `only ~/ (the worker's home) is expanded`},
		"root not exists":    {"workspace_roots = [\"/nonexistent/paddock\"]\n", "p.toml:1: workspace_roots:"},
	} {
		_, err := ParsePolicy("/etc/p.toml", []byte(tc.text))
		require.ErrorIs(t, err, ErrPolicy, name)
		require.ErrorContains(t, err, tc.want, name)
		require.NotContains(t, err.Error(), ":0:", name)
		require.NotContains(t, err.Error(), "setings.deny", name)
	}
}

func TestParsePolicyDefaultsAndLists(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy("/etc/paddock/p.toml", []byte("hide = [\"@default\", \"/srv/secret\"]\nprotect = []\n[[hook]]\nname = \"a\"\npath = \"hooks/a.wasm\"\nsha256 = \"ab\"\n"))
	require.NoError(t, err)
	require.Equal(t, string(DefaultMaxMode), p.MaxMode)
	require.False(t, p.AllowNetwork)
	require.Equal(t, append(append([]string{}, DefaultHide...), "/srv/secret"), p.HideList())
	require.Empty(t, p.ProtectList(), "an empty list empties the default")
	require.Equal(t, "/etc/paddock/hooks/a.wasm", p.Hooks[0].Path, "relative to the policy file")
	require.Equal(t, "deny", p.Hooks[0].OnError, "a config's hook defaults")
	require.Len(t, p.SHA256, 64)
	require.False(t, p.IsDefault())
	d := DefaultPolicy()
	require.True(t, d.IsDefault())
	require.Equal(t, DefaultHide, d.HideList())
	require.Equal(t, DefaultProtect, d.ProtectList())
}

func TestPolicyWarnsOfDroppedDefaults(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy("/etc/p.toml", []byte("max_mode = \"read_only\"\n\nprotect = [\"*.pem\"]\nhide = [\"/srv/secret\"]\n"))
	require.NoError(t, err)
	w := p.Warnings()
	require.Len(t, w, 2)
	require.Contains(t, w[0], `/etc/p.toml:4: hide: the list does not include "@default", so the `+strconv.Itoa(len(DefaultHide))+` default entries (~/.ssh, ~/.gnupg, ~/.aws, …) are not hidden`)
	require.Contains(t, w[1], `/etc/p.toml:3: protect: the list does not include "@default"`)
	require.Contains(t, w[1], "are not protected")
	for _, text := range []string{
		"protect = [\"@default\", \"*.pem\"]\n",
		"protect = []\nhide = []\n", // the documented way to drop them
		"max_mode = \"read_only\"\n",
	} {
		p, err := ParsePolicy("/etc/p.toml", []byte(text))
		require.NoError(t, err)
		require.Empty(t, p.Warnings(), text)
	}
	require.Empty(t, DefaultPolicy().Warnings())

	p, err = ParsePolicy("/etc/p.toml", []byte("workspace_roots = [\"/\", \"/var/tmp\"]\n"))
	require.NoError(t, err)
	w = p.Warnings()
	require.Len(t, w, 1, "/var/tmp opens no system tree")
	require.Contains(t, w[0], `/etc/p.toml:1: workspace_roots: "/" lets jobs write in /etc, /usr,`)
}

func TestPolicyJudge(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	in := filepath.Join(root, "ws")
	require.NoError(t, os.Mkdir(in, 0o755))
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(in, link))
	escape := filepath.Join(root, "esc")
	require.NoError(t, os.Symlink(t.TempDir(), escape))
	out := t.TempDir()
	full := Policy{MaxMode: "danger_full_access", AllowNetwork: true}
	roots := Policy{WorkspaceRoots: []string{root}}
	for name, tc := range map[string]struct {
		p       Policy
		a       Ask
		ceiling Ceiling // "" = allowed
	}{
		"default workspace_write":    {Policy{}, Ask{Mode: sandbox.ModeWorkspaceWrite}, ""},
		"default refuses full":       {Policy{}, Ask{Mode: sandbox.ModeDangerFullAccess, Network: true}, CeilingMaxMode},
		"read_only ceiling":          {Policy{MaxMode: "read_only"}, Ask{Mode: sandbox.ModeWorkspaceWrite}, CeilingMaxMode},
		"full allowed":               {full, Ask{Mode: sandbox.ModeDangerFullAccess, Network: true}, ""},
		"default refuses network":    {Policy{}, Ask{Mode: sandbox.ModeReadOnly, Network: true}, CeilingNetwork},
		"network allowed":            {Policy{AllowNetwork: true}, Ask{Mode: sandbox.ModeReadOnly, Network: true}, ""},
		"default refuses sockets":    {Policy{}, Ask{Mode: sandbox.ModeWorkspaceWrite, UnixSockets: true}, CeilingUnixSockets},
		"sockets allowed":            {Policy{UnixSockets: true}, Ask{Mode: sandbox.ModeWorkspaceWrite, UnixSockets: true}, ""},
		"workspace inside":           {roots, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: in}, ""},
		"workspace is the root":      {roots, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: root}, ""},
		"workspace outside":          {roots, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: out}, CeilingWorkspaceRoots},
		"workspace by link inside":   {roots, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: link}, ""},
		"workspace by link outside":  {roots, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: escape}, CeilingWorkspaceRoots},
		"prefix is not a parent":     {roots, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: root + "-sibling"}, CeilingWorkspaceRoots},
		"writable outside":           {roots, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: in, Writable: []string{in, out}}, CeilingWorkspaceRoots},
		"default workspace anywhere": {roots, Ask{Mode: sandbox.ModeWorkspaceWrite}, ""},
		"system dir writable":        {Policy{}, Ask{Mode: sandbox.ModeWorkspaceWrite, Writable: []string{"/etc/cron.d"}}, CeilingWorkspaceRoots},
		"system dir workspace":       {Policy{}, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: "/var/spool/cron"}, CeilingWorkspaceRoots},
		"system dir by link":         {Policy{}, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: "/lib64"}, CeilingWorkspaceRoots},
		"system dir read_only":       {Policy{}, Ask{Mode: sandbox.ModeReadOnly, Workspace: "/etc"}, ""},
		"system dir listed":          {Policy{WorkspaceRoots: []string{"/etc/cron.d"}}, Ask{Mode: sandbox.ModeWorkspaceWrite, Writable: []string{"/etc/cron.d"}}, ""},
		"beside a system dir":        {Policy{}, Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: "/var/tmp", Writable: []string{"/etcetera"}}, ""},
	} {
		r := tc.p.Judge(tc.a)
		if tc.ceiling == "" {
			require.Nil(t, r, name)
			continue
		}
		require.NotNil(t, r, name)
		require.Equal(t, tc.ceiling, r.Ceiling, name)
		require.True(t, errors.Is(r, ErrRefusedByPolicy), name)
	}
	r := Policy{}.Judge(Ask{Mode: sandbox.ModeWorkspaceWrite, Writable: []string{"/etc/cron.d"}})
	require.Equal(t, "writable", r.Key)
	require.Contains(t, r.Msg, `"/etc/cron.d" is in /etc, a system directory`)
	require.Contains(t, r.Msg, "listing it in workspace_roots")
	// A path refused for where its link leads says where that is.
	r = roots.Judge(Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: escape})
	target, err := filepath.EvalSymlinks(escape)
	require.NoError(t, err)
	require.Contains(t, r.Msg, fmt.Sprintf("%q (which leads to %q) is not under any of the policy's workspace_roots", escape, target))
	r = roots.Judge(Ask{Mode: sandbox.ModeWorkspaceWrite, Workspace: out})
	require.NotContains(t, r.Msg, "leads to")
}

// TestPinnedInside: a pinned root inside one of the directories, by
// device and inode (a path that reaches it through a link included), is
// found with the directory it is in; exempt roots and missing directories
// are skipped.
func TestPinnedInside(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	sys, free := filepath.Join(base, "sys"), filepath.Join(base, "free")
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "cron.d"), 0o755))
	require.NoError(t, os.MkdirAll(free, 0o755))
	require.NoError(t, os.Symlink(filepath.Join(sys, "cron.d"), filepath.Join(free, "alias")))
	pin := func(ws string, writable ...string) (sandbox.Policy, *sandbox.Pinned) {
		pol, err := sandbox.NewPolicy(sandbox.PolicyParams{Mode: sandbox.ModeWorkspaceWrite, Workspace: ws, Writable: writable, Network: true})
		require.NoError(t, err)
		pins, err := sandbox.PinRoots(pol)
		require.NoError(t, err)
		t.Cleanup(func() { pins.Close() })
		return pol, pins
	}
	dirs := []string{filepath.Join(base, "missing"), sys}
	pol, pins := pin(free, filepath.Join(free, "alias"))
	root, dir, err := PinnedInside(pol, pins, dirs, nil)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(sys, "cron.d"), root)
	require.Equal(t, sys, dir)
	pol, pins = pin(filepath.Join(sys, "cron.d"))
	root, _, err = PinnedInside(pol, pins, dirs, func(i int) bool { return i == 0 })
	require.NoError(t, err)
	require.Empty(t, root, "the exempt root")
	pol, pins = pin(free)
	root, _, err = PinnedInside(pol, pins, dirs, nil)
	require.NoError(t, err)
	require.Empty(t, root)
}

func TestPolicyJudgeSpecsPlacesEachRefusal(t *testing.T) {
	t.Parallel()
	src := "[[job]]\nname = \"a\"\ncommand = \"true\"\nmode = \"danger_full_access\"\n\n[[job]]\nname = \"b\"\ncommand = \"true\"\nnetwork = true\n\n[[job]]\nname = \"c\"\ncommand = \"true\"\n"
	specs, err := jobspec.Parse("jobs.toml", []byte(src), t.TempDir())
	require.NoError(t, err)
	err = Policy{}.JudgeSpecs("jobs.toml", []byte(src), specs, "workspace_write")
	require.ErrorIs(t, err, ErrRefusedByPolicy)
	require.ErrorContains(t, err, `jobs.toml:4: job "a": mode: refused by policy (max_mode)`)
	require.ErrorContains(t, err, `jobs.toml:9: job "b": network: refused by policy (allow_network)`)
	require.NotContains(t, err.Error(), `job "c"`)
}

func TestPolicySameChain(t *testing.T) {
	t.Parallel()
	p := Policy{Hooks: []HookConfig{{Name: "a", SHA256: "AB"}, {Name: "b", SHA256: "cd"}}}
	require.NoError(t, p.SameChain(Config{}), "a config without hooks takes the policy's")
	require.NoError(t, p.SameChain(Config{Hooks: []HookConfig{{Name: "a", SHA256: "ab"}, {Name: "b", SHA256: "CD"}}}))
	for name, c := range map[string]Config{
		"fewer":      {Path: "c.toml", Hooks: []HookConfig{{Name: "a", SHA256: "ab"}}},
		"order":      {Path: "c.toml", Hooks: []HookConfig{{Name: "b", SHA256: "cd"}, {Name: "a", SHA256: "ab"}}},
		"digest":     {Path: "c.toml", Hooks: []HookConfig{{Name: "a", SHA256: "ab"}, {Name: "b", SHA256: "ce"}}},
		"no digest":  {Path: "c.toml", Hooks: []HookConfig{{Name: "a"}, {Name: "b", SHA256: "cd"}}},
		"other name": {Path: "c.toml", Hooks: []HookConfig{{Name: "a", SHA256: "ab"}, {Name: "x", SHA256: "cd"}}},
	} {
		err := p.SameChain(c)
		require.ErrorIs(t, err, ErrPolicyMismatch, name)
		require.ErrorContains(t, err, "c.toml", name)
	}
}

// TestPolicyChainErrorsNamePolicy: once a config runs the policy's chain,
// what goes wrong with a hook names the policy's file and the hook's line
// there, never the config's file.
func TestPolicyChainErrorsNamePolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.toml")
	text := "max_mode = \"workspace_write\"\n\n[[hook]]\nname = \"gone\"\npath = \"gone.wasm\"\nsha256 = \"" + strings.Repeat("ab", 32) + "\"\n"
	p, err := ParsePolicy(path, []byte(text))
	require.NoError(t, err)
	cfg := Config{Path: filepath.Join(dir, "config.toml")}.WithPolicyChain(p)
	require.Equal(t, path, cfg.ChainSource())
	err = cfg.CheckHooks()
	require.ErrorContains(t, err, path+":5: ", "the line of the hook's path")
	require.NotContains(t, err.Error(), "config.toml")

	err = cfg.CheckHookNames("job.toml", []byte("command = \"true\"\nhooks = [\"other\"]\n"), []jobspec.Spec{{Line: 1, Hooks: []string{"other"}}})
	require.ErrorContains(t, err, "job.toml:2")
	require.ErrorContains(t, err, path)
}
