// Package inert makes text that peers chose safe to show to a person.
//
// An offer's model name, a region label, a receipt's note, a peer's agent
// string: whatever a peer signs or sends reaches a terminal, a log or a
// page. Shown as it came, such text could clear a screen (ESC [2J), set a
// terminal's title (OSC 0), write the clipboard (OSC 52), ring a bell, or
// turn a line around with a bidirectional override. Text escapes every
// rune that is not printable, so what a person sees is exactly the
// characters that arrived, and none of them acts.
//
// Human output applies it; JSON output keeps the data exact (JSON escapes
// control characters itself). inert imports only the standard library, so
// every package of idlegrid may use it.
package inert

import (
	"reflect"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Text returns s with every rune a terminal or a text renderer could act
// on escaped as Go does in a quoted string: C0 and C1 control characters
// (ESC, BEL, CR, LF, TAB among them), DEL, bidirectional controls and
// overrides, other format characters (zero-width joiners), line and
// paragraph separators, unassigned and private-use runes, and bytes that
// are not UTF-8. Printable text, ASCII space included, is kept as it is,
// and s itself is returned when nothing needs escaping.
func Text(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\x`...)
			b = append(b, hex[s[i]>>4], hex[s[i]&0xf])
		case safe(r):
			b = append(b, s[i:i+size]...)
		default:
			b = appendEscaped(b, r)
		}
		i += size
	}
	return string(b)
}

const hex = "0123456789abcdef"

// safe reports whether r is shown as itself: printable (letters, marks,
// numbers, punctuation, symbols, ASCII space), which excludes every
// control, format (bidi) and separator rune.
func safe(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x20 && r < 0x7f
	}
	return unicode.IsPrint(r) && r != utf8.RuneError
}

func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !safe(r) {
			return i
		}
		i += size
	}
	return -1
}

func appendEscaped(b []byte, r rune) []byte {
	switch r {
	case '\a':
		return append(b, `\a`...)
	case '\b':
		return append(b, `\b`...)
	case '\f':
		return append(b, `\f`...)
	case '\n':
		return append(b, `\n`...)
	case '\r':
		return append(b, `\r`...)
	case '\t':
		return append(b, `\t`...)
	case '\v':
		return append(b, `\v`...)
	}
	switch {
	case r < ' ' || r == 0x7f:
		return append(b, '\\', 'x', hex[byte(r)>>4], hex[byte(r)&0xf])
	case r < 0x10000:
		b = append(b, `\u`...)
		return appendHex(b, r, 4)
	}
	b = append(b, `\U`...)
	return appendHex(b, r, 8)
}

func appendHex(b []byte, r rune, digits int) []byte {
	s := strconv.FormatInt(int64(r), 16)
	for i := len(s); i < digits; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// maxDepth bounds the walk of Strings; the views it is given are a few
// levels deep.
const maxDepth = 32

// Strings applies Text, in place, to every string v reaches through
// exported struct fields, pointers, slices, arrays, maps (keys and
// values) and interfaces: the whole of a view a command is about to show
// as text. v is a pointer, a slice or a map; anything else, unexported
// fields and values deeper than a few dozen levels are left alone.
func Strings(v any) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		walk(rv, 0)
	}
}

func walk(v reflect.Value, depth int) {
	if depth > maxDepth {
		return
	}
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); firstUnsafe(s) >= 0 {
				v.SetString(Text(s))
			}
		}
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Interface {
			// An interface's value cannot be set in place: mend a copy
			// and put it back.
			if !v.CanSet() {
				return
			}
			c := reflect.New(v.Elem().Type()).Elem()
			c.Set(v.Elem())
			walk(c, depth+1)
			v.Set(c)
			return
		}
		walk(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walk(v.Field(i), depth+1)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walk(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		keys := v.MapKeys()
		for _, k := range keys {
			nk := reflect.New(k.Type()).Elem()
			nk.Set(k)
			walk(nk, depth+1)
			nv := reflect.New(v.Type().Elem()).Elem()
			nv.Set(v.MapIndex(k))
			walk(nv, depth+1)
			if !nk.Equal(k) {
				v.SetMapIndex(k, reflect.Value{})
			}
			v.SetMapIndex(nk, nv)
		}
	}
}
