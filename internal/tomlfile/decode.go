// Package tomlfile decodes paddock's TOML files (job files, the config)
// through github.com/BurntSushi/toml and locates their keys, so that
// every error can name the file's line and key: [Decode] turns the
// decoder's errors into an [*Error] with a line, a key and words of TOML
// types; [Locate] places a key's line where the decoder keeps none.
// [CheckDepth], run by [Decode] first, refuses text nested too deep for
// the decoder ([MaxDepth]).
package tomlfile

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// utf8BOM is the UTF-8 byte-order mark. It is not TOML, but editors
// write one; [Decode] drops it (lines do not move).
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// TrimBOM returns data without a leading UTF-8 byte-order mark.
func TrimBOM(data []byte) []byte { return bytes.TrimPrefix(data, utf8BOM) }

// Error is a decoding error placed in the file.
type Error struct {
	Line int    // 1-based; 0 when unknown
	Key  string // dotted key ("hook.timeout"); "" when unknown
	// Msg says what is wrong, in TOML's words ("expected an integer, got
	// a TOML string"), without the line or the key.
	Msg string
	// Syntax: the text is not TOML (the decoder's parser refused it).
	Syntax bool
	Err    error // the decoder's error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Decode decodes data (a leading byte-order mark dropped) into v, as
// toml.Decode does. Errors are *Error: text that is not TOML, with its
// line and the key on that line (Syntax); a value of the wrong type, with
// the key's line and "expected X, got a TOML Y" (X from want, which maps
// the destination's type as the decoder names it, e.g. "integer", to the
// words of the caller's reference; the decoder's own words otherwise); a
// value a TextUnmarshaler refused, with the key's line and its error.
//
// Text nesting deeper than [MaxDepth] is refused before the decoder
// sees it ([CheckDepth]'s *Error, Syntax).
//
// A v other than *map[string]any is decoded twice, first into a map: the
// decoder's parse errors and its errors on values look alike, so the
// first pass tells them apart.
func Decode(data []byte, v any, want map[string]string) (toml.MetaData, error) {
	data = TrimBOM(data)
	if err := CheckDepth(data); err != nil {
		return toml.MetaData{}, err
	}
	text := string(data)
	raw, isMap := v.(*map[string]any)
	// Into an any, the decoder hands over the map it parsed; into a map
	// it would copy it.
	var parsed any
	md, err := toml.Decode(text, &parsed)
	if err != nil {
		e := &Error{Msg: "invalid TOML: " + strings.TrimPrefix(err.Error(), "toml: "), Syntax: true, Err: err}
		var pe toml.ParseError
		if errors.As(err, &pe) {
			e.Line, e.Key, e.Msg = pe.Position.Line, pe.LastKey, "invalid TOML: "+pe.Message
			if k := KeyOnLine(data, pe.Position.Line); k != "" {
				e.Key = k
			}
		}
		return md, e
	}
	if isMap {
		*raw, _ = parsed.(map[string]any)
		return md, nil
	}
	md, err = toml.Decode(text, v)
	if err == nil {
		return md, nil
	}
	var pe toml.ParseError
	if errors.As(err, &pe) { // a TextUnmarshaler's error, on its key
		return md, &Error{Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message, Err: err}
	}
	if m := typeMismatch.FindStringSubmatch(err.Error()); m != nil {
		dst := m[4]
		if w, ok := want[dst]; ok {
			dst = w
		}
		return md, &Error{Line: atoi(m[1]), Key: m[2], Msg: "expected " + dst + ", got a TOML " + goTypeName(m[3]), Err: err}
	}
	e := &Error{Msg: strings.TrimPrefix(err.Error(), "toml: "), Err: err}
	if m := lineKey.FindStringSubmatch(err.Error()); m != nil {
		e.Line, e.Key, e.Msg = atoi(m[1]), m[2], m[3]
	}
	return md, e
}

// The decoder's words for a value of the wrong type, and for any error on
// a key (github.com/BurntSushi/toml, MetaData.e and badtype).
var (
	typeMismatch = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "(.*)"\): incompatible types: TOML value has type (.+); destination has type (.+)$`)
	lineKey      = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "(.*)"\): (.*)$`)
)

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// goTypeName names, in TOML's words, the Go type the decoder reports for
// a value decoded into an any ("int64" is an integer).
func goTypeName(t string) string {
	switch {
	case t == "string":
		return "string"
	case t == "int64":
		return "integer"
	case t == "float64":
		return "float"
	case t == "bool":
		return "boolean"
	case strings.HasPrefix(t, "[]map[string]"):
		return "array of tables"
	case strings.HasPrefix(t, "[]"):
		return "array"
	case strings.HasPrefix(t, "map["):
		return "table"
	case t == "time.Time":
		return "date/time"
	}
	return t
}

// TypeName names the TOML type of a value decoded into an any ("string",
// "integer", "float", "boolean", "array", "table", "date/time"), for
// error messages.
func TypeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	case time.Time:
		return "date/time"
	default:
		return fmt.Sprintf("%T", v)
	}
}
