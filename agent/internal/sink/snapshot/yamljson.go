package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
)

// yamlAttributes writes a row's canonical attributes JSON as YAML (the same output as
// yamlValue on the decoded map) straight from the bytes, without building maps: rendering
// 100k rows spends most of its time there otherwise. Canonical JSON has sorted keys and no
// insignificant white space; anything else returns an error (and nothing is written), and
// the caller takes the general path.
func yamlAttributes(buf *bytes.Buffer, raw json.RawMessage) error {
	if len(raw) == 0 {
		buf.WriteString(" {}\n")
		return nil
	}
	mark := buf.Len()
	p := &jsonYAML{in: raw, out: buf}
	if err := p.block("    "); err != nil || p.pos != len(raw) {
		buf.Truncate(mark)
		return errNotCanonical
	}
	return nil
}

var errNotCanonical = errors.New("attributes are not canonical JSON")

type jsonYAML struct {
	in  []byte
	pos int
	out *bytes.Buffer
}

func (p *jsonYAML) peek() byte {
	if p.pos < len(p.in) {
		return p.in[p.pos]
	}
	return 0
}

// block writes the value at pos after a "key:" or "-": like yamlValue.
func (p *jsonYAML) block(indent string) error {
	switch p.peek() {
	case '{':
		if p.pos+1 < len(p.in) && p.in[p.pos+1] == '}' {
			p.pos += 2
			p.out.WriteString(" {}\n")
			return nil
		}
		p.pos++
		p.out.WriteByte('\n')
		for {
			if p.peek() != '"' {
				return errNotCanonical
			}
			p.out.WriteString(indent)
			if err := p.str(); err != nil {
				return err
			}
			if p.peek() != ':' {
				return errNotCanonical
			}
			p.pos++
			p.out.WriteByte(':')
			if err := p.block(indent + "  "); err != nil {
				return err
			}
			switch p.peek() {
			case ',':
				p.pos++
			case '}':
				p.pos++
				return nil
			default:
				return errNotCanonical
			}
		}
	case '[':
		if p.pos+1 < len(p.in) && p.in[p.pos+1] == ']' {
			p.pos += 2
			p.out.WriteString(" []\n")
			return nil
		}
		p.pos++
		p.out.WriteByte('\n')
		for {
			p.out.WriteString(indent)
			p.out.WriteByte('-')
			if c := p.peek(); c == '{' || c == '[' {
				// Complex items in flow style: the canonical JSON itself.
				start := p.pos
				if err := p.skip(); err != nil {
					return err
				}
				p.out.WriteByte(' ')
				p.out.Write(p.in[start:p.pos])
				p.out.WriteByte('\n')
			} else if err := p.block(indent + "  "); err != nil {
				return err
			}
			switch p.peek() {
			case ',':
				p.pos++
			case ']':
				p.pos++
				return nil
			default:
				return errNotCanonical
			}
		}
	case '"':
		p.out.WriteByte(' ')
		if err := p.str(); err != nil {
			return err
		}
		p.out.WriteByte('\n')
		return nil
	default:
		start := p.pos
		for p.pos < len(p.in) {
			c := p.in[p.pos]
			if c == ',' || c == '}' || c == ']' {
				break
			}
			p.pos++
		}
		lit := p.in[start:p.pos]
		switch {
		case len(lit) == 0:
			return errNotCanonical
		case string(lit) == "true" || string(lit) == "false" || string(lit) == "null":
		case lit[0] == '-' || lit[0] >= '0' && lit[0] <= '9':
			if !json.Valid(lit) {
				return errNotCanonical
			}
		default:
			return errNotCanonical
		}
		p.out.WriteByte(' ')
		p.out.Write(lit)
		p.out.WriteByte('\n')
		return nil
	}
}

// str writes the JSON string at pos as a YAML scalar: plain when safe, else the JSON string
// itself (a valid YAML double-quoted scalar).
func (p *jsonYAML) str() error {
	start := p.pos
	p.pos++
	escaped := false
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		if c == '\\' {
			escaped = true
			p.pos += 2
			continue
		}
		p.pos++
		if c == '"' {
			quoted := p.in[start:p.pos]
			if content := quoted[1 : len(quoted)-1]; !escaped && plainSafe(string(content)) {
				p.out.Write(content)
			} else {
				p.out.Write(quoted)
			}
			return nil
		}
	}
	return errNotCanonical
}

// skip moves past one JSON value.
func (p *jsonYAML) skip() error {
	depth := 0
	for p.pos < len(p.in) {
		switch c := p.in[p.pos]; c {
		case '"':
			p.pos++
			for p.pos < len(p.in) && p.in[p.pos] != '"' {
				if p.in[p.pos] == '\\' {
					p.pos++
				}
				p.pos++
			}
			p.pos++
		case '{', '[':
			depth++
			p.pos++
		case '}', ']':
			depth--
			p.pos++
			if depth == 0 {
				return nil
			}
		default:
			p.pos++
		}
	}
	return errNotCanonical
}
