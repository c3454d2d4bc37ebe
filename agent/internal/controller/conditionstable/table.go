// Package conditionstable reads the tables of docs/operations.md ("Conditions") that define an
// inventory's conditions, for the tests that hold the agent to them: the table of states (each
// state's Ready, Synced and Degraded) and the table of every reason.
package conditionstable

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DocPath is docs/operations.md from a package two levels under agent/internal.
const DocPath = "../../../docs/operations.md"

// Value is one condition's documented status ("True" or "False") and reason.
type Value struct {
	Status, Reason string
}

func (v Value) String() string { return v.Status + " " + v.Reason }

// State is one row of the table of states.
type State struct {
	Name                    string
	Ready, Synced, Degraded Value
}

// Reason is one row of the table of every reason: the conditions (type=status) and the
// reasons it documents for a kind.
type Reason struct {
	Kind       string
	Conditions []string
	Reasons    []string
}

var (
	value      = regexp.MustCompile("^(True|False) `([A-Za-z]+)`")
	identifier = regexp.MustCompile("`([A-Z][A-Za-z]+)`")
)

// States reads the table of states: the rows under the header "| State | Ready | Synced |
// Degraded |".
func States(markdown []byte) ([]State, error) {
	rows, err := table(markdown, "| State | Ready | Synced | Degraded |", 4)
	if err != nil {
		return nil, err
	}
	out := make([]State, 0, len(rows))
	for _, r := range rows {
		s := State{Name: r[0]}
		for i, v := range []*Value{&s.Ready, &s.Synced, &s.Degraded} {
			m := value.FindStringSubmatch(r[i+1])
			if m == nil {
				return nil, fmt.Errorf("state %q: cell %q is not True or False followed by a `Reason`", r[0], r[i+1])
			}
			*v = Value{Status: m[1], Reason: m[2]}
		}
		out = append(out, s)
	}
	return out, nil
}

// Reasons reads the table of every reason: the rows under the header "| Kind | Condition |
// Reason | Meaning and what to do |".
func Reasons(markdown []byte) ([]Reason, error) {
	rows, err := table(markdown, "| Kind | Condition | Reason | Meaning and what to do |", 4)
	if err != nil {
		return nil, err
	}
	out := make([]Reason, 0, len(rows))
	for _, r := range rows {
		row := Reason{Kind: r[0], Conditions: strings.Split(r[1], ", ")}
		for _, m := range identifier.FindAllStringSubmatch(r[2], -1) {
			row.Reasons = append(row.Reasons, m[1])
		}
		out = append(out, row)
	}
	return out, nil
}

// table returns the cells of the table under header, which has columns cells per row.
func table(markdown []byte, header string, columns int) ([][]string, error) {
	lines := strings.Split(string(markdown), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == header {
			if start >= 0 {
				return nil, fmt.Errorf("two tables under %q", header)
			}
			start = i
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no table under %q", header)
	}
	var out [][]string
	for _, l := range lines[start+2:] { // the header, then its |---| line
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) != columns {
			return nil, fmt.Errorf("row %q has %d cells, want %d", l, len(cells), columns)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		out = append(out, cells)
	}
	if len(out) == 0 {
		return nil, errors.New("the table under " + header + " has no rows")
	}
	return out, nil
}
