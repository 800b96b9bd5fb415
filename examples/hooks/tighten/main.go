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
//	[[hook]]
//	name = "tighten"
//	path = "bin/hooks/tighten.wasm"
//	settings = { dry_run = ["rsync"], git_write = ["add", "commit", "status"] }
//
// git_write defaults to [defaultGitWrite]. Only argv[0] is looked at (no
// wrappers, no shell strings): this is an example of adjusting, the
// denylist example shows seeing through wrappers. It checks its settings
// when paddock loads it (paddock_validate_settings): unknown keys, values
// that are not lists of strings, empty names and dry_run names with a "/"
// refuse them; should bad settings reach a decision anyway, it denies the
// job. The exports live in abi_wasip1.go; the JSON reader in
// json.go (encoding/json is too slow for a reactor's budget in Go's wasm).
//
// The hot path is written to allocate almost nothing and to loop little,
// because allocation and loops (wazero instruments every loop so that a
// timeout can interrupt it) are what cost in Go compiled to wasm: a
// decision took about 220 µs with encoding/json, about 50 µs as written
// (median, end to end, on 2 shared cores; see hooks/doc.go). It does not
// import fmt (nor os): fmt pulls in reflect and os, and the module is
// 2.0 MB without them instead of 2.7 MB, which a worker pays for on every
// start (wazero decodes, validates and loads the cached machine code of
// the whole module: ~155 -> ~115 ms of CPU).
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o tighten.wasm ./examples/hooks/tighten
package main

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// defaultGitWrite are the git subcommands that keep the job's mode when
// settings.git_write is not set.
var defaultGitWrite = []string{"add", "commit", "status", "init", "checkout", "switch", "restore", "reset",
	"rm", "mv", "stash", "merge", "rebase", "pull", "fetch", "clone", "branch", "tag", "cherry-pick", "revert", "am", "apply"}

type settings struct {
	dryRun   []string
	gitWrite []string
}

func parseSettings(v value) (settings, error) {
	s := settings{gitWrite: defaultGitWrite}
	if v.kind == 'z' || v.kind == 0 {
		return s, nil
	}
	if v.kind != 'o' {
		return s, errors.New("not an object")
	}
	for i, k := range v.keys {
		if k != "dry_run" && k != "git_write" {
			return s, errors.New("unknown key " + strconv.Quote(k))
		}
		list, ok := v.arr[i].strings()
		if !ok {
			return s, errors.New(k + ": not a list of strings")
		}
		for _, name := range list {
			if name == "" || k == "dry_run" && strings.Contains(name, "/") {
				return s, errors.New(k + ": " + strconv.Quote(name) + " is not a name (dry_run lists program base names, git_write subcommands)")
			}
		}
		if k == "dry_run" {
			s.dryRun = list
		} else {
			s.gitWrite = list
		}
	}
	return s, nil
}

// Per-call scratch, reused: a reactor instance is never called from two
// goroutines at once, and the host copies the decision before the next
// call. Allocation is the slow part of Go in wasm, so the hot path makes
// almost none: argv words are views into the request.
var (
	argv        [][]byte
	buf         []byte
	rawSettings []byte   // the settings the cache below was parsed from
	cached      settings // parsed settings (the same for every call of a hook)
	cachedErr   error
)

// decide returns the decision JSON for one request. The result is valid
// until the next call.
func decide(data []byte) []byte {
	argv = argv[:0]
	var mode, settingsRaw []byte
	p := parser{data: data}
	for top := p.begin('{'); p.more(&top); {
		switch string(p.key()) {
		case "hook":
			for it := p.begin('{'); p.more(&it); {
				if string(p.key()) != "settings" {
					p.skipValue()
					continue
				}
				p.space()
				start := p.pos
				p.skipValue()
				settingsRaw = p.data[start:p.pos]
			}
		case "job":
			for it := p.begin('{'); p.more(&it); {
				switch string(p.key()) {
				case "argv":
					for el := p.begin('['); p.more(&el); {
						b, err := p.bytes()
						if err != nil {
							p.fail()
						}
						argv = append(argv, b)
					}
				case "mode":
					var err error
					if mode, err = p.bytes(); err != nil {
						p.fail()
					}
				default:
					p.skipValue()
				}
			}
		default:
			p.skipValue()
		}
	}
	if p.space(); p.bad || p.pos != len(p.data) {
		return deny("tighten: bad request")
	}
	if rawSettings == nil || string(settingsRaw) != string(rawSettings) {
		rawSettings = append([]byte{}, settingsRaw...)
		v, err := value{kind: 'z'}, error(nil)
		if len(settingsRaw) > 0 {
			v, err = parseJSON(settingsRaw)
		}
		if err == nil {
			cached, cachedErr = parseSettings(v)
		} else {
			cached, cachedErr = settings{}, err
		}
	}
	if cachedErr != nil {
		return deny("tighten: bad settings: " + cachedErr.Error())
	}
	if len(argv) == 0 {
		return allow
	}
	prog := argv[0][bytes.LastIndexByte(argv[0], '/')+1:]
	narrow, sub := false, []byte(nil)
	if string(prog) == "git" && string(mode) != "read_only" {
		sub = gitSubcommand(argv[1:])
		narrow = !contains(cached.gitWrite, sub)
	}
	dryRun := contains(cached.dryRun, prog) && !slices.ContainsFunc(argv[1:], func(a []byte) bool { return string(a) == "--dry-run" })
	if !narrow && !dryRun {
		return allow
	}

	buf = append(buf[:0], `{"decision":"adjust","reason":"`...)
	if narrow {
		if sub == nil {
			sub = []byte("(no subcommand)")
		}
		buf = append(buf, "git "...)
		buf = appendEscaped(buf, sub)
		buf = append(buf, " is not in git_write: read_only"...)
	}
	if dryRun {
		if narrow {
			buf = append(buf, "; "...)
		}
		buf = appendEscaped(buf, prog)
		buf = append(buf, " is in dry_run: --dry-run added"...)
	}
	buf = append(buf, `","job":{`...)
	if narrow {
		buf = append(buf, `"mode":"read_only"`...)
	}
	if dryRun {
		if narrow {
			buf = append(buf, ',')
		}
		buf = append(buf, `"argv":[`...)
		buf = appendString(buf, argv[0])
		buf = append(buf, `,"--dry-run"`...)
		for _, a := range argv[1:] {
			buf = append(buf, ',')
			buf = appendString(buf, a)
		}
		buf = append(buf, ']')
	}
	return append(buf, "}}"...)
}

var allow = []byte(`{"decision":"allow"}`)

// validateSettings answers the settings check paddock makes at load:
// {"valid":true}, or {"valid":false,"message":"..."}. Not on the hot path:
// it uses the tree parser.
func validateSettings(data []byte) []byte {
	req, err := parseJSON(data)
	if err == nil {
		_, err = parseSettings(req.get("hook").get("settings"))
	}
	if err == nil {
		return []byte(`{"valid":true}`)
	}
	buf = append(buf[:0], `{"valid":false,"message":`...)
	buf = appendString(buf, []byte("tighten: settings: "+err.Error()))
	return append(buf, '}')
}

func deny(reason string) []byte {
	buf = append(buf[:0], `{"decision":"deny","reason":`...)
	buf = appendString(buf, reason)
	return append(buf, '}')
}

// contains reports whether list holds b (without allocating).
func contains(list []string, b []byte) bool {
	for _, s := range list {
		if s == string(b) {
			return true
		}
	}
	return false
}

// gitSubcommand returns the first operand after git's global options, or
// nil when there is none.
func gitSubcommand(a [][]byte) []byte {
	for i := 0; i < len(a); i++ {
		switch t := string(a[i]); {
		case t == "-C" || t == "-c" || t == "--git-dir" || t == "--work-tree" || t == "--namespace" || t == "--config-env":
			i++
		case strings.HasPrefix(t, "-"):
		default:
			return a[i]
		}
	}
	return nil
}

// main is not called in a reactor (-buildmode=c-shared); the Go toolchain
// still requires it.
func main() {}
