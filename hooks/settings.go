package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// validateSettingsExport is the reactor export that checks a hook's
// settings once, at load: paddock_validate_settings(ptr i32, len i32) ->
// i64, called like paddock_decide with the settings request, returning
// the settings answer.
const validateSettingsExport = "paddock_validate_settings"

// MaxSettingsMessageBytes caps the message of a settings refusal kept in
// the error: the first 1 KiB.
const MaxSettingsMessageBytes = 1 << 10

// settingsRequest is the request of a settings check (wire version 1):
// {"version":1,"validate_settings":true,"hook":{"name":...,"settings":{...}}}.
// It has no job and no sandbox.
type settingsRequest struct {
	Version          int             `json:"version"`
	ValidateSettings bool            `json:"validate_settings"`
	Hook             wireRequestHook `json:"hook"`
}

// settingsAnswer is the answer to it: {"valid":true} or
// {"valid":false,"message":"..."}.
type settingsAnswer struct {
	Valid   bool
	Message string
}

// parseSettingsAnswer parses data as exactly one settings answer: a JSON
// object with a boolean "valid" and, optionally, a string "message";
// nothing else. isAnswer is false when data is not a JSON object with a
// "valid" field at all (a command module that does not check its settings
// answers with a decision); an error says how an answer breaks the rules.
func parseSettingsAnswer(data []byte) (a settingsAnswer, isAnswer bool, err error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil || top == nil {
		return a, false, nil
	}
	raw, ok := top["valid"]
	if !ok {
		return a, false, nil
	}
	bad := func(format string, args ...any) (settingsAnswer, bool, error) {
		return settingsAnswer{}, true, fmt.Errorf("invalid settings answer: %s", fmt.Sprintf(format, args...))
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return bad("trailing data after the answer")
	}
	if err := json.Unmarshal(raw, &a.Valid); err != nil {
		return bad(`"valid" is not a boolean`)
	}
	for k, v := range top {
		switch k {
		case "valid":
		case "message":
			if err := json.Unmarshal(v, &a.Message); err != nil {
				return bad(`"message" is not a string`)
			}
		default:
			return bad("unknown field %q", k)
		}
	}
	if len(a.Message) > MaxSettingsMessageBytes {
		cut := MaxSettingsMessageBytes
		for cut > 0 && !utf8.RuneStart(a.Message[cut]) {
			cut--
		}
		a.Message = a.Message[:cut] + "..."
	}
	return a, true, nil
}

// checkSettings asks h's module, once, whether its settings are valid.
//
// A reactor that exports paddock_validate_settings is called on a new
// instance (kept in the pool afterwards, so the first decision does not
// make one); any failure of that call refuses the load. A command module
// gets the settings request on stdin: a settings answer is obeyed, and any
// other outcome (a decision, a failure) means the module does not check
// its settings, which is allowed: it loads as before. A module of neither
// ABI, or a reactor without the export, is not asked.
//
// The error is a *[SettingsError].
func (h *hook) checkSettings(ctx context.Context) error {
	if h.abi == ABINone || (h.abi == ABIReactor && !h.validates) {
		return nil
	}
	req, err := json.Marshal(settingsRequest{
		Version: WireVersion, ValidateSettings: true,
		Hook: wireRequestHook{Name: h.cfg.Name, Settings: h.settings},
	})
	refused := func(format string, args ...any) error {
		return &SettingsError{Hook: h.cfg.Name, Msg: fmt.Sprintf(format, args...)}
	}
	if err != nil {
		return refused("encoding the request: %v", err)
	}
	var out []byte
	if h.abi == ABICommand {
		if out, _, err = h.callCommand(ctx, req); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("hooks: interrupted: %w", ctx.Err())
			}
			if errors.Is(err, ErrTimeout) || errors.Is(err, ErrMemory) {
				// A module that ran out of time or memory has not said
				// whether it checks: fail closed, not as "does not check".
				return refused("the settings check did not finish: %v", err)
			}
			return nil // exited or trapped: does not check its settings
		}
		a, isAnswer, err := parseSettingsAnswer(out)
		if !isAnswer {
			return nil // a decision, or anything but an answer
		}
		if err != nil {
			return refused("%v", err)
		}
		h.validates = true
		if !a.Valid {
			return refused("%s", orNoMessage(a.Message))
		}
		return nil
	}

	callCtx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	in, err := h.newInstance(callCtx, cancel)
	if err == nil && !in.lim.hit.Load() {
		out, err = in.run(callCtx, in.validate, req)
	}
	if err != nil || in.stdout.over || in.lim.hit.Load() {
		if in.mod != nil {
			_ = in.mod.Close(context.WithoutCancel(ctx))
		}
		return refused("%s failed: %v", validateSettingsExport, h.classify(ctx, callCtx, err, in.stdout, in.lim, stackDeepest(in.mod)))
	}
	a, isAnswer, err := parseSettingsAnswer(out)
	if !isAnswer && err == nil {
		err = errors.New(`not a settings answer ({"valid":true} or {"valid":false,"message":"..."})`)
	}
	if err != nil {
		_ = in.mod.Close(context.WithoutCancel(ctx))
		return refused("%s returned %q: %v", validateSettingsExport, truncate(out, 200), err)
	}
	if !a.Valid {
		_ = in.mod.Close(context.WithoutCancel(ctx))
		return refused("%s", orNoMessage(a.Message))
	}
	h.release(ctx, in)
	return nil
}

func orNoMessage(s string) string {
	if strings.TrimSpace(s) == "" {
		return "settings refused (no message)"
	}
	return s
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
