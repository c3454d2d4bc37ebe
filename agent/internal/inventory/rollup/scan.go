package rollup

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Rows' attributes are canonical JSON objects; a rollup reads a few of their values per row.
// Decoding each row into maps would cost most of a build at 100k rows, so these functions
// find the raw bytes of the values instead, and only what becomes a group is decoded.

var errSyntax = errors.New("attributes are not a JSON object")

// fields sets out[i] to the raw value of keys[i] in the JSON object obj, nil when missing.
// Attribute names are plain identifiers, so a key is unescaped only when it holds an escape.
func fields(obj []byte, keys []string, out [][]byte) error {
	clear(out)
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errSyntax
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return errSyntax
		}
		end, ok := skipString(obj, i)
		if !ok {
			return errSyntax
		}
		key := obj[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if json.Unmarshal(obj[i:end], &k) != nil {
				return errSyntax
			}
			key = []byte(k)
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return errSyntax
		}
		start := skipSpace(obj, i+1)
		end, ok = skipValue(obj, start)
		if !ok {
			return errSyntax
		}
		for k, name := range keys {
			if string(key) == name {
				out[k] = obj[start:end]
			}
		}
		i = skipSpace(obj, end)
		if i >= len(obj) {
			return errSyntax
		}
		switch obj[i] {
		case '}':
			return nil
		case ',':
			i = skipSpace(obj, i+1)
		default:
			return errSyntax
		}
	}
}

// elements appends the raw elements of a JSON array to out.
func elements(arr []byte, out [][]byte) ([][]byte, error) {
	i := skipSpace(arr, 1)
	if i < len(arr) && arr[i] == ']' {
		return out, nil
	}
	for {
		end, ok := skipValue(arr, i)
		if !ok {
			return out, errSyntax
		}
		out = append(out, arr[i:end])
		i = skipSpace(arr, end)
		if i >= len(arr) {
			return out, errSyntax
		}
		switch arr[i] {
		case ']':
			return out, nil
		case ',':
			i = skipSpace(arr, i+1)
		default:
			return out, errSyntax
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	default: // a number, true, false or null
		start := i
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' && b[i] != '\t' && b[i] != '\r' {
			i++
		}
		return i, i > start
	}
}
