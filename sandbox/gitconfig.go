package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// gitVar is one variable of a git configuration file.
type gitVar struct {
	// section is the section's name, lower-cased ("core", "includeif");
	// a deprecated "[section.sub]" header gives "section.sub", lower-cased
	// whole, as git reads it.
	section string
	// subsection is the quoted subsection as written (case-sensitive),
	// "" when there is none.
	subsection string
	// name is the variable's name, lower-cased ("hookspath").
	name string
	// value is the value with quotes and escapes undone; "" with noValue
	// for a name alone on its line (boolean true).
	value   string
	noValue bool
	// line is the 1-based line where the variable starts.
	line int
	// file is the file it was read from, set by its reader.
	file string
}

// key returns v's name as git-config(1) spells it, section and name
// lower-cased: "core.hookspath", "includeif.gitdir:/x/.path".
func (v gitVar) key() string {
	switch {
	case v.section == "":
		return v.name // before any section header: git takes it so
	case v.subsection == "":
		return v.section + "." + v.name
	}
	return v.section + "." + v.subsection + "." + v.name
}

// errGitConfig marks a git configuration file that git itself would
// refuse to read ("bad config line").
var errGitConfig = errors.New("bad git config")

// parseGitConfig reads a git configuration file's text as git does
// (git-config(1), "CONFIGURATION FILE", "Syntax"), and returns its
// variables in order. The rules, from git-config(1) and config.c:
//
//   - a UTF-8 byte order mark at the start is skipped; "\r\n" ends a line
//     like "\n";
//   - "#" and ";" start a comment that runs to the end of the line,
//     outside a value's double quotes;
//   - "[section]" or `[section "subsection"]` starts a section: a
//     section name is letters, digits, "-" and "." and is
//     case-insensitive; a subsection is case-sensitive, in double quotes,
//     where `\"` and `\\` stand for themselves and a backslash before
//     anything else is dropped; a variable may follow "]" on the same
//     line;
//   - "name = value" or "name" alone (true) sets a variable: a name
//     starts with a letter, holds letters, digits and "-", and is
//     case-insensitive; the value's leading and trailing whitespace is
//     dropped and each whitespace character between words kept as one
//     space, double quotes are removed (what is inside them is kept as
//     written), `\"`, `\\`, `\n`, `\t` and `\b` are escapes, and a
//     backslash at the end of a line continues the value on the next.
//
// # Errors
//
// What git would refuse, wrapping errGitConfig, with name and the line:
// an unknown escape, an unclosed quote or header, a line that starts with
// neither a letter, "[" nor a comment. (A variable before any section
// header git reads with no section; so does this.)
func parseGitConfig(name string, data []byte) ([]gitVar, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	p := gitConfigParser{data: data, line: 1}
	var out []gitVar
	section, subsection := "", ""
	bad := func(line int, what string) error {
		return fmt.Errorf("sandbox: %s line %d: %s: %w", name, line, what, errGitConfig)
	}
	for {
		c, ok := p.next()
		if !ok {
			return out, nil
		}
		switch {
		case c == '\n' || isGitSpace(c):
		case c == '#' || c == ';':
			for c != '\n' {
				if c, ok = p.next(); !ok {
					return out, nil
				}
			}
		case c == '[':
			var err string
			if section, subsection, err = p.header(); err != "" {
				return nil, bad(p.line, err)
			}
		case isGitAlpha(c):
			v := gitVar{section: section, subsection: subsection, line: p.line}
			name := []byte{lower(c)}
			for {
				c, ok = p.next()
				if !ok || !isGitKeyChar(c) {
					break
				}
				name = append(name, lower(c))
			}
			v.name = string(name)
			for ok && (c == ' ' || c == '\t') {
				c, ok = p.next()
			}
			switch {
			case !ok || c == '\n':
				v.noValue = true
			case c == '=':
				val, err := p.value()
				if err != "" {
					return nil, bad(v.line, err+" in the value of "+v.key())
				}
				v.value = val
			default:
				return nil, bad(v.line, fmt.Sprintf("%q after the variable name %s", c, v.key()))
			}
			out = append(out, v)
		default:
			return nil, bad(p.line, fmt.Sprintf("a line starting with %q", c))
		}
	}
}

// gitConfigParser walks a configuration file's bytes one at a time.
type gitConfigParser struct {
	data []byte
	pos  int
	line int // of the byte next returns next
}

// next returns the next byte ("\r\n" as '\n'), or false at the end.
func (p *gitConfigParser) next() (byte, bool) {
	if p.pos >= len(p.data) {
		return 0, false
	}
	c := p.data[p.pos]
	p.pos++
	if c == '\r' && p.pos < len(p.data) && p.data[p.pos] == '\n' {
		c = '\n'
		p.pos++
	}
	if c == '\n' {
		p.line++
	}
	return c, true
}

// header reads a section header after its "[", returning the section
// (lower-cased) and subsection, or what is wrong with it.
func (p *gitConfigParser) header() (section, subsection, bad string) {
	var name []byte
	for {
		c, ok := p.next()
		switch {
		case !ok || c == '\n':
			return "", "", "an unclosed section header"
		case c == ']':
			if len(name) == 0 {
				return "", "", "an empty section name"
			}
			return string(name), "", ""
		case isGitSpace(c):
			if len(name) == 0 {
				return "", "", "an empty section name"
			}
			sub, bad := p.subsection()
			return string(name), sub, bad
		case isGitKeyChar(c) || c == '.':
			name = append(name, lower(c))
		default:
			return "", "", fmt.Sprintf("%q in a section name", c)
		}
	}
}

// subsection reads `"subsection"]` after a section name and its space.
func (p *gitConfigParser) subsection() (string, string) {
	c, ok := p.next()
	for ok && isGitSpace(c) && c != '\n' {
		c, ok = p.next()
	}
	if !ok || c != '"' {
		return "", "a subsection not in double quotes"
	}
	var sub []byte
	for {
		c, ok = p.next()
		if !ok || c == '\n' {
			return "", "an unclosed subsection"
		}
		if c == '"' {
			break
		}
		if c == '\\' {
			if c, ok = p.next(); !ok || c == '\n' {
				return "", "an unclosed subsection"
			}
		}
		sub = append(sub, c)
	}
	if c, ok = p.next(); !ok || c != ']' {
		return "", "no \"]\" after the subsection"
	}
	if len(sub) == 0 {
		// git reads `[x ""]` as section x with an empty subsection,
		// which no key of interest here has.
		return "", ""
	}
	return string(sub), ""
}

// value reads a variable's value after its "=", to the end of its
// (last, when continued) line, or says what is wrong with it.
func (p *gitConfigParser) value() (string, string) {
	var out []byte
	quote, comment, space := false, false, 0
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			if quote {
				return "", "an unclosed double quote"
			}
			return string(out), ""
		}
		if comment {
			continue
		}
		if isGitSpace(c) && !quote {
			if len(out) > 0 {
				space++
			}
			continue
		}
		if !quote && (c == ';' || c == '#') {
			comment = true
			continue
		}
		for ; space > 0; space-- {
			out = append(out, ' ')
		}
		switch c {
		case '\\':
			c, ok = p.next()
			switch {
			case !ok && quote:
				return "", "an unclosed double quote"
			case !ok:
				return string(out), "" // git reads the end as a newline
			case c == '\n':
				continue
			case c == 't':
				c = '\t'
			case c == 'b':
				c = '\b'
			case c == 'n':
				c = '\n'
			case c == '\\' || c == '"':
			default:
				return "", "an unknown escape"
			}
			out = append(out, c)
		case '"':
			quote = !quote
		default:
			out = append(out, c)
		}
	}
}

// isGitSpace is C's isspace in git's own ctype (sane-ctype.h): space,
// \t, \n, \v, \f, \r.
func isGitSpace(c byte) bool { return strings.IndexByte(" \t\n\v\f\r", c) >= 0 }

func isGitAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// isGitKeyChar is config.c's iskeychar: a letter, a digit or "-".
func isGitKeyChar(c byte) bool { return isGitAlpha(c) || '0' <= c && c <= '9' || c == '-' }

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
