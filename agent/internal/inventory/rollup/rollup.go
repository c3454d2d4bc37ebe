package rollup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Spec is one rollup as the inventory configures it.
type Spec struct {
	// Name is the rollup's name: its rows' target.
	Name string
	// Targets are the rows' target names the rollup aggregates; nil means every row.
	Targets []string
	// GroupBy are attribute names or the built-ins .namespace, .kind, .group, .target.
	GroupBy []string
	// Sum are numeric attribute names.
	Sum []string
}

// FromAPI turns an inventory's rollups into specs, naming their targets as rows do: those of a
// KollectInventory (namespace set) as namespace/name in its namespace.
func FromAPI(in []kollectv1.Rollup, namespace string) []Spec {
	out := make([]Spec, 0, len(in))
	for _, r := range in {
		s := Spec{Name: r.Name, GroupBy: r.GroupBy, Sum: r.Sum}
		if r.Targets != nil {
			s.Targets = make([]string, len(r.Targets))
			for i, t := range r.Targets {
				if namespace != "" {
					t = namespace + "/" + t
				}
				s.Targets[i] = t
			}
		}
		out = append(out, s)
	}
	return out
}

// Equal reports whether a and b compute the same rows.
func (s Spec) Equal(o Spec) bool {
	return s.Name == o.Name && slices.Equal(s.Targets, o.Targets) && slices.Equal(s.GroupBy, o.GroupBy) && slices.Equal(s.Sum, o.Sum)
}

// Result is one rollup's rows and what it could not sum.
type Result struct {
	Rows []export.Row
	// Skipped counts sum values that were missing or not numbers, over every row and
	// summed attribute: they are left out of the sums, and the rollup's coverage says so.
	Skipped int64
}

// NoValue names a group whose value is missing (null) in rows' names.
const NoValue = "<none>"

// group accumulates one group's count and sums.
type group struct {
	key    string   // the raw values, each followed by a 0 byte (which JSON text never holds)
	values [][]byte // one raw JSON value per groupBy entry
	count  int64
	ints   []int64
	floats []float64
	float  []bool // the sum has seen a non-integer: it is reported as a float
}

var null = []byte("null")

// Compute groups rows for s. Rows of other targets are ignored; rows must be canonical (their
// attributes a JSON object). The result is sorted canonically and the same for the same rows
// whatever their order.
func Compute(s Spec, rows []export.Row) (Result, error) {
	var res Result
	targets := map[string]bool{}
	for _, t := range s.Targets {
		targets[t] = true
	}
	// The attributes read: the groupBy ones first, then the summed ones.
	var keys []string
	attrAt := make([]int, len(s.GroupBy))
	for j, g := range s.GroupBy {
		attrAt[j] = -1
		if !strings.HasPrefix(g, ".") {
			attrAt[j] = len(keys)
			keys = append(keys, g)
		}
	}
	sumAt := len(keys)
	keys = append(keys, s.Sum...)
	raw := make([][]byte, len(keys))
	choices := make([][][]byte, len(s.GroupBy))
	values := make([][]byte, len(s.GroupBy))
	sums := make([][]byte, len(s.Sum))
	quoted := map[string][]byte{} // built-in values as JSON strings
	groups := map[string]*group{}
	var key []byte
	for i := range rows {
		r := &rows[i]
		if s.Targets != nil && !targets[r.Target] {
			continue
		}
		if len(keys) > 0 {
			attrs := r.Attributes
			if len(attrs) == 0 {
				attrs = []byte("{}")
			}
			if err := fields(attrs, keys, raw); err != nil {
				return Result{}, fmt.Errorf("rollup %s: %s: %w", s.Name, r.Key(), err)
			}
		}
		for j, g := range s.GroupBy {
			c, err := groupValues(g, r, raw, attrAt[j], choices[j][:0], quoted)
			if err != nil {
				return Result{}, fmt.Errorf("rollup %s: %s of %s: %w", s.Name, g, r.Key(), err)
			}
			choices[j] = c
		}
		for j := range s.Sum {
			sums[j] = raw[sumAt+j]
			if !isNumber(sums[j]) {
				sums[j] = nil
				res.Skipped++
			}
		}
		// A list-valued groupBy puts the row in the group of each element (a cross product
		// when several are lists).
		product(choices, values, 0, func() {
			key = key[:0]
			for _, v := range values {
				key = append(append(key, v...), 0)
			}
			g := groups[string(key)]
			if g == nil {
				g = &group{key: string(key), values: make([][]byte, len(values)), ints: make([]int64, len(s.Sum)),
					floats: make([]float64, len(s.Sum)), float: make([]bool, len(s.Sum))}
				for k, v := range values {
					g.values[k] = slices.Clone(v)
				}
				groups[g.key] = g
			}
			g.count++
			for j, n := range sums {
				if n != nil {
					g.add(j, n)
				}
			}
		})
	}
	res.Rows = make([]export.Row, 0, len(groups))
	origin := &export.Origin{Target: s.Name, Group: kollectv1.RollupGroup, Version: kollectv1.RollupVersion, Kind: kollectv1.RollupKind}
	for _, g := range groups {
		row, err := g.row(s, origin)
		if err != nil {
			return Result{}, err
		}
		res.Rows = append(res.Rows, row)
	}
	slices.SortFunc(res.Rows, func(a, b export.Row) int { return export.Compare(&a, &b) })
	return res, nil
}

// groupValues appends the raw values row r contributes for one groupBy entry to out: one, or
// a list's distinct elements (an image twice in one pod counts the pod once), or null for a
// missing value or an empty list.
func groupValues(g string, r *export.Row, raw [][]byte, at int, out [][]byte, quoted map[string][]byte) ([][]byte, error) {
	if at < 0 {
		var v string
		switch g {
		case ".namespace":
			v = r.Namespace
		case ".kind":
			v = r.Kind
		case ".group":
			v = r.Group
		case ".target":
			v = r.Target
		}
		q, ok := quoted[v]
		if !ok {
			var err error
			if q, err = json.Marshal(v); err != nil {
				return nil, err
			}
			quoted[v] = q
		}
		return append(out, q), nil
	}
	v := raw[at]
	switch {
	case v == nil:
		return append(out, null), nil
	case v[0] != '[':
		return append(out, v), nil
	}
	out, err := elements(v, out)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return append(out, null), nil
	}
	distinct := out[:1]
	for _, e := range out[1:] {
		if !slices.ContainsFunc(distinct, func(d []byte) bool { return bytes.Equal(d, e) }) {
			distinct = append(distinct, e)
		}
	}
	return distinct, nil
}

// isNumber reports whether a raw value is a JSON number: a string, boolean or list is not
// summed.
func isNumber(raw []byte) bool {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return false
	}
	_, err := strconv.ParseFloat(string(raw), 64)
	return err == nil
}

func (g *group) add(j int, raw []byte) {
	n := string(raw)
	if !g.float[j] {
		if i, err := strconv.ParseInt(n, 10, 64); err == nil {
			if s := g.ints[j] + i; (i >= 0) == (s >= g.ints[j]) { // no overflow
				g.ints[j] = s
				return
			}
		}
		g.float[j], g.floats[j] = true, float64(g.ints[j])
	}
	f, _ := strconv.ParseFloat(n, 64) // isNumber parsed it
	g.floats[j] += f
}

// product calls fn with values set to each combination of choices, from index i on.
func product(choices [][][]byte, values [][]byte, i int, fn func()) {
	if i == len(choices) {
		fn()
		return
	}
	for _, v := range choices[i] {
		values[i] = v
		product(choices, values, i+1, fn)
	}
}

// row renders a group as a canonical row. Its identity is a hash of the rollup's name and the
// group's values, so the same group is the same row in every export.
func (g *group) row(s Spec, origin *export.Origin) (export.Row, error) {
	values := map[string]any{}
	names := make([]string, len(s.GroupBy))
	namespace := ""
	for j, by := range s.GroupBy {
		dec := json.NewDecoder(bytes.NewReader(g.values[j]))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return export.Row{}, fmt.Errorf("rollup %s: %s: %w", s.Name, by, err)
		}
		values[strings.TrimPrefix(by, ".")] = v
		names[j] = display(v, g.values[j])
		if by == ".namespace" {
			namespace, _ = v.(string)
		}
	}
	sums := map[string]any{}
	for j, a := range s.Sum {
		if g.float[j] {
			f := g.floats[j]
			if math.IsInf(f, 0) || math.IsNaN(f) {
				continue // no JSON for it: the sum is left out rather than the export failed
			}
			sums[a] = f
		} else {
			sums[a] = g.ints[j]
		}
	}
	attrs := map[string]any{"count": g.count, "group": values}
	if len(s.Sum) > 0 {
		attrs["sum"] = sums
	}
	enc, err := export.EncodeAttributes(attrs)
	if err != nil {
		return export.Row{}, fmt.Errorf("rollup %s: %w", s.Name, err)
	}
	name := s.Name
	if len(names) > 0 {
		name = strings.Join(names, "/")
	}
	sum := sha256.Sum256([]byte(s.Name + "\x00" + g.key))
	return export.NewRow(origin, namespace, name, hex.EncodeToString(sum[:16]), enc), nil
}

// display is a group value in the row's name: a string as it is, anything else as JSON.
func display(v any, raw []byte) string {
	switch v := v.(type) {
	case nil:
		return NoValue
	case string:
		if v == "" {
			return NoValue
		}
		return v
	default:
		return string(raw)
	}
}
