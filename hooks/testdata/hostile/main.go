// Command hostile is a test hook for paddock's hooks package. Its behaviour
// is picked per job by the label "do" (else settings.do, else "allow"), so
// one chain can be hostile on one job and normal on the next. Built twice:
// as a command (default) and as a reactor (-tags reactor -buildmode=c-shared).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"
)

type request struct {
	Hook struct {
		Name     string `json:"name"`
		Settings struct {
			Do     string   `json:"do"`
			Tag    string   `json:"tag"`
			Reason string   `json:"reason"`
			Argv   []string `json:"argv"`
			// Writable is the writable list the "setwritable" behaviour sets.
			Writable []string `json:"writable"`
		} `json:"settings"`
	} `json:"hook"`
	Job struct {
		Argv   []string          `json:"argv"`
		Mode   string            `json:"mode"`
		Labels map[string]string `json:"labels"`
	} `json:"job"`
	Sandbox struct {
		Argv []string `json:"argv"`
	} `json:"sandbox"`
}

var keep [][]byte

// decide returns the decision bytes for one request. Some behaviours never
// return (loop, membomb, stdout, trap, exit1 in command mode).
func decide(data []byte) []byte {
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		return []byte(`{"decision":"deny","reason":"hostile: bad request"}`)
	}
	do := req.Hook.Settings.Do
	if d := req.Job.Labels["do"]; d != "" {
		do = d
	}
	s := req.Hook.Settings
	switch do {
	case "", "allow":
		return []byte(`{"decision":"allow"}`)
	case "deny":
		return mustJSON(map[string]any{"decision": "deny", "reason": s.Reason})
	case "echo":
		return mustJSON(map[string]any{"decision": "deny", "reason": "argv=" + strings.Join(req.Job.Argv, " ") + " mode=" + req.Job.Mode})
	case "sandbox":
		return mustJSON(map[string]any{"decision": "deny", "reason": "sandbox=" + strings.Join(req.Sandbox.Argv, " ")})
	case "append":
		return mustJSON(map[string]any{"decision": "adjust", "reason": "append " + s.Tag, "job": map[string]any{"argv": append(req.Job.Argv, s.Tag)}})
	case "setargv":
		return mustJSON(map[string]any{"decision": "adjust", "reason": "set argv", "job": map[string]any{"argv": s.Argv}})
	case "setwritable":
		return mustJSON(map[string]any{"decision": "adjust", "reason": "narrow writable", "job": map[string]any{"writable": s.Writable}})
	case "readonly":
		return []byte(`{"decision":"adjust","reason":"tighten","job":{"mode":"read_only"}}`)
	case "widen":
		return []byte(`{"decision":"adjust","reason":"widen","job":{"mode":"danger_full_access"}}`)
	case "loop":
		for {
		}
	case "membomb":
		for {
			keep = append(keep, make([]byte, 4<<20))
		}
	case "trap":
		// An out-of-bounds load: a real WebAssembly trap, not a Go panic.
		p := (*byte)(unsafe.Pointer(uintptr(0xfffffff0)))
		return []byte{*p}
	case "panic":
		panic("hostile: panic")
	case "stdout":
		buf := make([]byte, 64<<10)
		for i := range buf {
			buf[i] = 'x'
		}
		for i := 0; i < 1600; i++ { // 100 MiB
			os.Stdout.Write(buf)
		}
		return []byte(`{"decision":"allow"}`)
	case "stderr":
		fmt.Fprintln(os.Stderr, "hostile: note on stderr")
		return []byte(`{"decision":"allow"}`)
	case "sleep":
		time.Sleep(time.Hour)
		return []byte(`{"decision":"allow"}`)
	case "badjson":
		return []byte(`{"decision": "allow"`)
	case "unknown":
		return []byte(`{"decision":"maybe","reason":"who knows"}`)
	case "unknownfield":
		return []byte(`{"decision":"allow","color":"blue"}`)
	case "two":
		return []byte(`{"decision":"allow"}{"decision":"allow"}`)
	case "noreason":
		return []byte(`{"decision":"deny"}`)
	case "emptyargv":
		return []byte(`{"decision":"adjust","reason":"empty","job":{"argv":[]}}`)
	case "relargv":
		return []byte(`{"decision":"adjust","reason":"relative","job":{"argv":["./bin/x"]}}`)
	case "exit1":
		exit1()
	case "badptr":
		return []byte("badptr")
	case "huge":
		// Built by doubling copies, not byte by byte: under the deadline
		// meter a 2 Mi-iteration loop can take longer than the timeout
		// on a loaded machine, and the case is about the size.
		return bytes.Repeat([]byte{' '}, 2<<20)
	}
	return []byte(`{"decision":"deny","reason":"hostile: unknown behaviour"}`)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
