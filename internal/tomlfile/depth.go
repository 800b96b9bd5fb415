package tomlfile

import (
	"fmt"
	"strings"
)

// MaxDepth is the deepest nesting [Decode] lets through to the decoder,
// in levels: each part of a table header's key ("[a.b]" is 2), each part
// of a key ("a.b = 1" adds 2 to its table's), each array and each inline
// table holding the value ("x = [[1]]" is 3 levels, "x = {y = 1}" is 3).
//
// The decoder (github.com/BurntSushi/toml) recurses once per array or
// inline table, and Go cannot recover from a stack overflow: a job file
// of five million "[" (5 MB, well under jobspec.MaxFileBytes) would
// kill a worker, and again at every start while the file waits in the
// inbox. It also spells out every prefix of a key path as a string, so
// its memory grows with the square of a key's depth: a million-part
// dotted key takes gigabytes. 256 levels is far more than any
// hand-written or generated configuration uses (job files need 4), and
// keeps the decoder's recursion under a megabyte of stack.
const MaxDepth = 256

// CheckDepth scans data (TOML text, any byte-order mark already dropped)
// for nesting deeper than [MaxDepth] levels and returns an *Error
// (Syntax) with the line where the limit is passed and the key assigned
// on that line, if any; nil when the nesting is within the limit. It
// reads strings (basic, literal, multi-line; escapes) and comments as
// the decoder does, so brackets inside them never count. It only counts:
// text that is not TOML is left to the decoder. It runs in one pass, in
// time linear in len(data) and memory bounded by MaxDepth, without
// recursion; it never panics. Safe for concurrent use.
func CheckDepth(data []byte) error {
	line, over := scanDepth(data, MaxDepth)
	if line == 0 {
		return nil
	}
	var msg string
	switch over {
	case overItems:
		msg = fmt.Sprintf("more than %d keys and values in one file", MaxItems)
	case overKeyLevels:
		msg = fmt.Sprintf("more than %d levels of keys in one file (each key counts the levels of its path)", MaxKeyLevels)
	default:
		msg = fmt.Sprintf("nesting deeper than %d levels (table and key parts, arrays, inline tables)", MaxDepth)
	}
	key := KeyOnLine(data, line)
	if len(key) > maxKeyShown { // a key of a million parts, say
		key = strings.ToValidUTF8(key[:maxKeyShown], "") + "..."
	}
	return &Error{Line: line, Key: key, Msg: msg, Syntax: true}
}

// MaxItems and MaxKeyLevels bound what the decoder builds from one text,
// which [CheckDepth] also refuses past them: the keys, values, arrays and
// inline tables it holds (each is at least one allocation of the
// decoder's, some tens of bytes: a 64 MiB text of "x=[1,1,1,...]" is 32
// million values, a gigabyte), and the levels of every key's path summed
// (the decoder spells out each key's path: memory grows with the sum,
// about 45 bytes a level; 100,000 keys under a 250-part header took 1.1
// GB). A 10,000-job file has about 100,000 items and 200,000 levels.
const (
	MaxItems     = 1_000_000
	MaxKeyLevels = 2_500_000
)

// Which limit a text passed ([scanDepth]).
const (
	overDepth = iota
	overItems
	overKeyLevels
)

// maxKeyShown bounds the bytes of a key [CheckDepth] puts in its error.
const maxKeyShown = 64

// What the scan expects next.
const (
	depthKey   = iota // a key, a header (at the top), or "}" closing an inline table
	depthValue        // a value, or "]" closing an array
	depthAfter        // after a value: ",", "]", "}", a comment or (at the top) a newline
)

// depthFrame is an open array ('[') or inline table ('{') and the depth
// of the value it is.
type depthFrame struct {
	kind  byte
	outer int
}

// scanDepth returns the 1-based line where data's nesting passes limit
// levels, or its items MaxItems, or its keys' levels MaxKeyLevels, and
// which of them (overDepth, overItems, overKeyLevels); line 0 when it
// never does. See [CheckDepth].
func scanDepth(data []byte, limit int) (int, int) {
	line := 1
	var (
		frames    = make([]depthFrame, 0, 16) // never deeper than limit
		table     = 0                         // levels of the current table header
		depth     = 0                         // levels of the value being read
		state     = depthKey
		items     = 0 // keys, headers, values, arrays and inline tables seen
		keyLevels = 0 // the levels of every key's path, summed
	)
	// item counts one item; false when there are too many.
	item := func() bool {
		items++
		return items <= MaxItems
	}
	// key counts a key whose path has levels levels; 0 when it passes
	// no limit, else which.
	key := func(levels int) int {
		keyLevels += levels
		switch {
		case !item():
			return overItems
		case keyLevels > MaxKeyLevels:
			return overKeyLevels
		}
		return -1
	}
	// The open frame's kind; 0 at the top level.
	top := func() byte {
		if len(frames) == 0 {
			return 0
		}
		return frames[len(frames)-1].kind
	}
	// open pushes an array or inline table; -1, or which limit it passes.
	open := func(kind byte) int {
		if depth+1 > limit {
			return overDepth
		}
		if !item() {
			return overItems
		}
		frames = append(frames, depthFrame{kind, depth})
		depth++
		return -1
	}
	closeFrame := func() {
		depth = frames[len(frames)-1].outer
		frames = frames[:len(frames)-1]
		state = depthAfter
	}
	i := 0
	for i < len(data) {
		c := data[i]
		switch {
		case c == '\n':
			line++
			i++
			if len(frames) == 0 { // a newline ends a top-level key/value
				state, depth = depthKey, table
			}
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '#':
			i = skipComment(data, i)
			continue
		}
		switch state {
		case depthKey:
			if c == '}' && top() == '{' {
				closeFrame()
				i++
				continue
			}
			if c == '[' && len(frames) == 0 { // a table header
				i++
				if i < len(data) && data[i] == '[' {
					i++
				}
				var parts int
				i, parts, line = skipKey(data, i, line, limit)
				if parts > limit {
					return line, overDepth
				}
				if o := key(parts); o >= 0 {
					return line, o
				}
				table, depth = parts, parts
				state = depthAfter // "]", a comment, the newline
				continue
			}
			var parts int
			i, parts, line = skipKey(data, i, line, limit-depth)
			if depth+parts > limit {
				return line, overDepth
			}
			if o := key(depth + parts); o >= 0 {
				return line, o
			}
			depth += parts
			if i < len(data) && data[i] == '=' {
				i++
			}
			state = depthValue
		case depthValue:
			switch c {
			case '[':
				if o := open('['); o >= 0 {
					return line, o
				}
				i++
			case '{':
				if o := open('{'); o >= 0 {
					return line, o
				}
				state = depthKey
				i++
			case ']', '}':
				if top() == c-2 { // '[' is ']'-2, '{' is '}'-2
					closeFrame()
				} else {
					state = depthAfter
				}
				i++
			case ',': // an empty value: not TOML; the decoder says so
				state = depthAfter
			case '"', '\'':
				if !item() {
					return line, overItems
				}
				i, line = skipString(data, i, line)
				state = depthAfter
			default:
				if !item() {
					return line, overItems
				}
				i = skipScalar(data, i)
				state = depthAfter
			}
		case depthAfter:
			switch c {
			case ',':
				i++
				switch top() {
				case '[':
					depth, state = frames[len(frames)-1].outer+1, depthValue
				case '{':
					depth, state = frames[len(frames)-1].outer+1, depthKey
				}
			case ']', '}':
				if top() == c-2 {
					closeFrame()
				}
				i++
			case '[', '{':
				// Not TOML after a value: counted anyway, never fewer
				// levels than the decoder could reach.
				if o := open(c); o >= 0 {
					return line, o
				}
				if c == '{' {
					state = depthKey
				} else {
					state = depthValue
				}
				i++
			case '"', '\'':
				i, line = skipString(data, i, line)
			default: // the rest of a date-time ("1979-05-27 07:32:00")
				i = skipScalar(data, i)
			}
		}
	}
	return 0, 0
}

// skipComment returns the index of the newline ending the comment at i
// (len(data) when none).
func skipComment(data []byte, i int) int {
	for i < len(data) && data[i] != '\n' {
		i++
	}
	return i
}

// skipScalar returns the index after a bare value (number, boolean,
// date-time) starting at i: at the next byte that ends one.
func skipScalar(data []byte, i int) int {
	i++
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n', ',', '[', ']', '{', '}', '#', '"', '\'', '=':
			return i
		}
		i++
	}
	return i
}

// skipString returns the index after the string starting at i (a quote)
// and the line it ends on; see [stringBody].
func skipString(data []byte, i, line int) (int, int) {
	q := data[i]
	multi := i+2 < len(data) && data[i+1] == q && data[i+2] == q
	if multi {
		i += 3
	} else {
		i++
	}
	end, line, _ := stringBody(data, i, line, q, multi)
	return end, line
}

// stringBody reads the body of a string opened by quote q (three of them
// when multi) from i, up to its end, and returns the index after its
// closing quotes, the line it ends on (line, plus the newlines read)
// and whether it closed. A basic string (q '"') takes backslash escapes;
// a literal one (in single quotes) none; a one-line string ends unclosed at a
// newline (not TOML: the decoder says so), which it leaves unread. A
// multi-line string ends at the last three quotes of a run of three to
// five ("""a""""" holds a""). The one reading of TOML strings (TOML
// 1.0.0, String) for the depth scan and [Locate].
func stringBody[T string | []byte](data T, i, line int, q byte, multi bool) (end, _ int, closed bool) {
	for i < len(data) {
		c := data[i]
		switch {
		case c == '\\' && q == '"':
			if i+1 < len(data) && data[i+1] == '\n' {
				line++
			}
			i += 2
			continue
		case c == '\n':
			if !multi {
				return i, line, false
			}
			line++
		case c == q:
			if !multi {
				return i + 1, line, true
			}
			run := 1
			for i+run < len(data) && data[i+run] == q && run < 5 {
				run++
			}
			if run >= 3 {
				return i + run, line, true
			}
			i += run
			continue
		}
		i++
	}
	return len(data), line, false
}

// skipKey returns the index after the dotted key starting at i (at its
// "=" or closing "]", or where the key breaks off), its number of parts
// and the line it ends on. It stops counting past max parts.
func skipKey(data []byte, i, line, max int) (_, parts, _ int) {
	inPart := false
	for i < len(data) {
		switch c := data[i]; c {
		case ' ', '\t', '\r':
			i++
		case '.':
			inPart = false
			i++
		case '"', '\'':
			parts++
			inPart = true
			i, line = skipString(data, i, line)
		case '=', ']', '\n', '#', '[', '{', '}', ',':
			return i, parts, line
		default:
			if !inPart {
				parts++
				inPart = true
			}
			i++
		}
		if parts > max {
			return i, parts, line
		}
	}
	return i, parts, line
}
