// Command tighten is a paddock hook (reactor ABI) that adjusts jobs, never
// widening them:
//
//   - a git command whose subcommand is not in settings.git_write runs
//     read_only (git log, diff, show, push, ... need no workspace writes);
//   - a program named in settings.dry_run gets --dry-run inserted right
//     after argv[0] (not appended at the end, so it stays an option even
//     when the command ends with "--" and operands).
//
// Configured like this:
//
//	[[hooks]]
//	name = "tighten"
//	path = "bin/hooks/tighten.wasm"
//	settings = { dry_run = ["rsync"], git_write = ["add", "commit", "status"] }
//
// git_write defaults to [defaultGitWrite]. Only argv[0] is looked at (no
// wrappers, no shell strings): this is an example of adjusting, the
// denylist example shows seeing through wrappers. Unknown settings keys
// deny the job. The exports live in abi_wasip1.go.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o tighten.wasm ./examples/hooks/tighten
package main

import (
	"bytes"
	"encoding/json"
	"path"
	"slices"
	"strings"
)

// defaultGitWrite are the git subcommands that keep the job's mode when
// settings.git_write is not set.
var defaultGitWrite = []string{"add", "commit", "status", "init", "checkout", "switch", "restore", "reset",
	"rm", "mv", "stash", "merge", "rebase", "pull", "fetch", "clone", "branch", "tag", "cherry-pick", "revert", "am", "apply"}

type request struct {
	Hook struct {
		Settings json.RawMessage `json:"settings"`
	} `json:"hook"`
	Job struct {
		Argv []string `json:"argv"`
		Mode string   `json:"mode"`
	} `json:"job"`
}

type settings struct {
	DryRun   []string  `json:"dry_run"`
	GitWrite *[]string `json:"git_write"`
}

type adjustment struct {
	Argv []string `json:"argv,omitempty"`
	Mode string   `json:"mode,omitempty"`
}

type decision struct {
	Decision string      `json:"decision"`
	Reason   string      `json:"reason,omitempty"`
	Job      *adjustment `json:"job,omitempty"`
}

// Settings are the same for every call of one hook: parse them once.
var (
	lastRaw      []byte
	lastSettings settings
)

func parseSettings(raw []byte) (settings, error) {
	if lastRaw != nil && bytes.Equal(raw, lastRaw) {
		return lastSettings, nil
	}
	var s settings
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return settings{}, err
		}
	}
	if s.GitWrite == nil {
		s.GitWrite = &defaultGitWrite
	}
	lastRaw, lastSettings = bytes.Clone(raw), s
	return s, nil
}

// decide returns the decision JSON for one request.
func decide(data []byte) []byte {
	d := decideValue(data)
	out, err := json.Marshal(d)
	if err != nil {
		return []byte(`{"decision":"deny","reason":"tighten: cannot encode the decision"}`)
	}
	return out
}

func decideValue(data []byte) decision {
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		return decision{Decision: "deny", Reason: "tighten: bad request: " + err.Error()}
	}
	s, err := parseSettings(req.Hook.Settings)
	if err != nil {
		return decision{Decision: "deny", Reason: "tighten: bad settings: " + err.Error()}
	}
	argv := req.Job.Argv
	if len(argv) == 0 {
		return decision{Decision: "allow"}
	}
	prog := path.Base(argv[0])
	var adj adjustment
	var why []string
	if prog == "git" && req.Job.Mode != "read_only" {
		if sub := gitSubcommand(argv[1:]); !slices.Contains(*s.GitWrite, sub) {
			adj.Mode = "read_only"
			if sub == "" {
				sub = "(no subcommand)"
			}
			why = append(why, "git "+sub+" is not in git_write: read_only")
		}
	}
	if slices.Contains(s.DryRun, prog) && !slices.Contains(argv[1:], "--dry-run") {
		adj.Argv = append([]string{argv[0], "--dry-run"}, argv[1:]...)
		why = append(why, prog+" is in dry_run: --dry-run added")
	}
	if len(why) == 0 {
		return decision{Decision: "allow"}
	}
	return decision{Decision: "adjust", Reason: strings.Join(why, "; "), Job: &adj}
}

// gitSubcommand returns the first operand after git's global options.
func gitSubcommand(a []string) string {
	for i := 0; i < len(a); i++ {
		t := a[i]
		switch {
		case t == "-C" || t == "-c":
			i++
		case t == "--git-dir" || t == "--work-tree" || t == "--namespace" || t == "--config-env":
			i++
		case strings.HasPrefix(t, "-"):
		default:
			return t
		}
	}
	return ""
}

// main is not called in a reactor (-buildmode=c-shared); the Go toolchain
// still requires it.
func main() {}
