package main

import (
	"bytes"
	"errors"
	"strconv"
	"unicode/utf8"
)

// A small JSON reader and writer. encoding/json works in a wasip1 module,
// but costs about 200 µs per request under wazero (Go's wasm code runs
// many times slower than native, and reflection and allocation are the
// slow parts), four times a reactor's budget. This reader parses a value into
// a tree, or, with skip, checks and steps over it without allocating:
// the hook reads the few fields it needs and skips the rest.

// value is one JSON value.
type value struct {
	kind byte     // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	str  string   // string, number text, "true"/"false"
	arr  []value  // array elements; object members as alternating key, value
	keys []string // object keys, in order (arr[i] is the value of keys[i])
}

// get returns the member key of an object, or a null value.
func (v value) get(key string) value {
	for i, k := range v.keys {
		if k == key {
			return v.arr[i]
		}
	}
	return value{kind: 'z'}
}

// strings returns an array of strings, or ok false for anything else.
func (v value) strings() ([]string, bool) {
	if v.kind != 'a' {
		return nil, false
	}
	out := make([]string, len(v.arr))
	for i, e := range v.arr {
		if e.kind != 's' {
			return nil, false
		}
		out[i] = e.str
	}
	return out, true
}

type parser struct {
	data []byte
	pos  int
	bad  bool // sticky failure of begin, more, key and skipValue
}

var errSyntax = errors.New("invalid JSON")

// parseJSON parses data as exactly one JSON value.
func parseJSON(data []byte) (value, error) {
	p := parser{data: data}
	v, err := p.value(0)
	if err != nil {
		return value{}, err
	}
	p.space()
	if p.pos != len(p.data) {
		return value{}, errSyntax
	}
	return v, nil
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (value, error) {
	if depth > 64 {
		return value{}, errors.New("JSON nested too deeply")
	}
	p.space()
	if p.pos >= len(p.data) {
		return value{}, errSyntax
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		p.pos++
		v := value{kind: 'o'}
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			p.pos++
			return v, nil
		}
		for {
			p.space()
			k, err := p.string()
			if err != nil {
				return value{}, err
			}
			p.space()
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return value{}, errSyntax
			}
			p.pos++
			e, err := p.value(depth + 1)
			if err != nil {
				return value{}, err
			}
			v.keys, v.arr = append(v.keys, k), append(v.arr, e)
			if done, err := p.next('}'); err != nil || done {
				return v, err
			}
		}
	case c == '[':
		p.pos++
		v := value{kind: 'a'}
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			p.pos++
			return v, nil
		}
		for {
			e, err := p.value(depth + 1)
			if err != nil {
				return value{}, err
			}
			v.arr = append(v.arr, e)
			if done, err := p.next(']'); err != nil || done {
				return v, err
			}
		}
	case c == '"':
		s, err := p.string()
		return value{kind: 's', str: s}, err
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if len(p.data)-p.pos >= len(lit) && string(p.data[p.pos:p.pos+len(lit)]) == lit {
				p.pos += len(lit)
				if lit == "null" {
					return value{kind: 'z'}, nil
				}
				return value{kind: 'b', str: lit}, nil
			}
		}
		return value{}, errSyntax
	default:
		start := p.pos
		for p.pos < len(p.data) && (p.data[p.pos] >= '0' && p.data[p.pos] <= '9' || p.data[p.pos] == '-' || p.data[p.pos] == '+' || p.data[p.pos] == '.' || p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
			p.pos++
		}
		if _, err := strconv.ParseFloat(string(p.data[start:p.pos]), 64); err != nil || start == p.pos {
			return value{}, errSyntax
		}
		return value{kind: 'n', str: string(p.data[start:p.pos])}, nil
	}
}

// skip checks and steps over one value without allocating.
func (p *parser) skip(depth int) error {
	if depth > 64 {
		return errors.New("JSON nested too deeply")
	}
	p.space()
	if p.pos >= len(p.data) {
		return errSyntax
	}
	switch p.data[p.pos] {
	case '{', '[':
		closing := byte('}')
		if p.data[p.pos] == '[' {
			closing = ']'
		}
		isObj := closing == '}'
		p.pos++
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == closing {
			p.pos++
			return nil
		}
		for {
			if isObj {
				p.space()
				if err := p.skipString(); err != nil {
					return err
				}
				p.space()
				if p.pos >= len(p.data) || p.data[p.pos] != ':' {
					return errSyntax
				}
				p.pos++
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			if done, err := p.next(closing); err != nil || done {
				return err
			}
		}
	case '"':
		return p.skipString()
	default:
		start := p.pos
		for p.pos < len(p.data) && (p.data[p.pos] >= '0' && p.data[p.pos] <= '9' || p.data[p.pos] >= 'a' && p.data[p.pos] <= 'z' || p.data[p.pos] == '-' || p.data[p.pos] == '+' || p.data[p.pos] == '.' || p.data[p.pos] == 'E') {
			p.pos++
		}
		// Numbers are checked loosely here (strconv is slow in wasm): a
		// digit or '-' first. value() checks them fully.
		switch lit := p.data[start:p.pos]; {
		case string(lit) == "true" || string(lit) == "false" || string(lit) == "null":
			return nil
		case len(lit) > 0 && (lit[0] == '-' || lit[0] >= '0' && lit[0] <= '9'):
			return nil
		default:
			return errSyntax
		}
	}
}

// skipString steps over a string, checking its escapes.
func (p *parser) skipString() error {
	_, err := p.bytes()
	return err
}

// iter is the state of one object or array iteration.
type iter struct {
	closing byte
	first   bool
}

// begin consumes the opening byte ('{' or '[') of an object or array.
func (p *parser) begin(open byte) iter {
	p.space()
	if p.pos >= len(p.data) || p.data[p.pos] != open {
		p.fail()
		return iter{}
	}
	p.pos++
	return iter{closing: open + 2, first: true} // '{'+2 == '}', '['+2 == ']'
}

// more reports whether another member or element follows, consuming the
// comma before it or the closing byte after the last one.
func (p *parser) more(it *iter) bool {
	if p.bad {
		return false
	}
	p.space()
	if p.pos >= len(p.data) {
		p.fail()
		return false
	}
	c := p.data[p.pos]
	if c == it.closing {
		p.pos++
		return false
	}
	if !it.first {
		if c != ',' {
			p.fail()
			return false
		}
		p.pos++
		p.space()
	}
	it.first = false
	return true
}

// key reads a member's key and the colon after it.
func (p *parser) key() []byte {
	k, err := p.bytes()
	if err != nil {
		p.fail()
		return nil
	}
	p.space()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		p.fail()
		return nil
	}
	p.pos++
	return k
}

func (p *parser) fail() { p.bad = true }

// skipValue is skip with a sticky failure.
func (p *parser) skipValue() {
	if !p.bad && p.skip(0) != nil {
		p.bad = true
	}
}

// next consumes "," (done false) or the closing byte (done true).
func (p *parser) next(closing byte) (bool, error) {
	p.space()
	if p.pos >= len(p.data) {
		return false, errSyntax
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		return false, nil
	case closing:
		p.pos++
		return true, nil
	}
	return false, errSyntax
}

func (p *parser) string() (string, error) {
	b, err := p.bytes()
	return string(b), err
}

// bytes reads a string: a view into the input when it has no escapes (no
// allocation), else a decoded copy. The fast path finds the closing quote
// with bytes.IndexByte, which Go's wasm port runs a word at a time: loops
// are what cost most in wasm. It does not reject control characters in
// strings (the host's encoder never writes them).
func (p *parser) bytes() ([]byte, error) {
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return nil, errSyntax
	}
	p.pos++
	start := p.pos
	rest := p.data[start:]
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		return nil, errSyntax
	}
	if bytes.IndexByte(rest[:q], '\\') >= 0 {
		return p.slowString(start)
	}
	p.pos += q + 1
	return rest[:q:q], nil
}

// slowString decodes a string with escapes, from start (after the quote).
func (p *parser) slowString(start int) ([]byte, error) {
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return buf, nil
		case c < 0x20:
			return nil, errSyntax
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		if p.pos+1 >= len(p.data) {
			return nil, errSyntax
		}
		e := p.data[p.pos+1]
		p.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, errSyntax
			}
			if r >= 0xd800 && r < 0xdc00 && p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				p.pos += 2
				r2, ok := p.hex4()
				if !ok {
					return nil, errSyntax
				}
				r = (r-0xd800)<<10 | (r2 - 0xdc00) + 0x10000
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return nil, errSyntax
		}
	}
	return nil, errSyntax
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 32)
	p.pos += 4
	return rune(n), err == nil
}

// appendString appends s as a JSON string.
func appendString[S string | []byte](b []byte, s S) []byte {
	b = append(b, '"')
	b = appendEscaped(b, s)
	return append(b, '"')
}

// appendEscaped appends s escaped for the inside of a JSON string.
func appendEscaped[S string | []byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}
