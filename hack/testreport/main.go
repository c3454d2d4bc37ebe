// Command testreport reads `go test -json` on stdin and prints what a plain `go test` would —
// one line per package, and the full output of every test or package that failed — followed by
// the slowest packages and top-level tests, the total wall time and a closing "N passed, N failed" line, so that a
// regression in test time shows in every CI log. Just before that closing line it repeats, per
// failed test, the last lines the test wrote with t.Log or t.Error (not the log dumps of its
// cleanups), so a log that keeps only its tail still says what failed. It exits 1 when
// anything failed.
//
// Usage: go test -json ./... | testreport [-slowest N] [-slowest-tests N]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// event is one line of test2json output (go doc cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
	// ImportPath is set on build-output events (go test -json since Go 1.24).
	ImportPath string
}

type packageResult struct {
	name    string
	elapsed time.Duration
	status  string // ok, FAIL, no test files
}

type report struct {
	out       io.Writer
	outputs   map[string][]string // package/test → buffered output lines
	packages  map[string]*packageResult
	order     []string
	passed    int
	failed    int
	skipped   int
	start     time.Time
	end       time.Time
	malformed int
	// digests holds, per failed test, the last lines it wrote itself (see digest).
	digests []string
	// tests holds every top-level test that passed or failed, for the slowest-tests table:
	// a package's time is often one test's.
	tests []testResult
}

type testResult struct {
	pkg, name string
	elapsed   time.Duration
}

func main() {
	slowest := flag.Int("slowest", 10, "how many of the slowest packages to list")
	slowestTests := flag.Int("slowest-tests", 10, "how many of the slowest top-level tests to list")
	flag.Parse()
	r := &report{out: os.Stdout, outputs: map[string][]string{}, packages: map[string]*packageResult{}}
	start := time.Now()
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r.summary(*slowest, *slowestTests, time.Since(start))
	if r.failed > 0 || r.malformed > 0 || r.anyPackageFailed() {
		os.Exit(1)
	}
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Build errors and the like arrive as plain text: pass them through.
			fmt.Fprintln(r.out, string(line))
			if strings.Contains(string(line), "FAIL") || strings.HasPrefix(string(line), "#") {
				r.malformed++
			}
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	if r.start.IsZero() || e.Time.Before(r.start) {
		r.start = e.Time
	}
	if e.Time.After(r.end) {
		r.end = e.Time
	}
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "output":
		r.outputs[key] = append(r.outputs[key], e.Output)
		return
	case "build-output":
		fmt.Fprint(r.out, e.Output)
		return
	case "pass", "fail", "skip":
	default:
		return
	}
	if e.Test != "" {
		if e.Action != "skip" && !strings.Contains(e.Test, "/") {
			r.tests = append(r.tests, testResult{pkg: e.Package, name: e.Test, elapsed: time.Duration(e.Elapsed * float64(time.Second))})
		}
		switch e.Action {
		case "pass":
			r.passed++
		case "skip":
			r.skipped++
		case "fail":
			r.failed++
			for _, l := range r.outputs[key] {
				fmt.Fprint(r.out, l)
			}
			if d := digest(r.outputs[key]); d != "" {
				r.digests = append(r.digests, "--- "+e.Test+"\n"+d)
			}
		}
		delete(r.outputs, key)
		return
	}
	p := &packageResult{name: e.Package, elapsed: time.Duration(e.Elapsed * float64(time.Second)), status: "ok"}
	switch {
	case e.Action == "fail":
		p.status = "FAIL"
		// Package-level output holds panics, TestMain failures and timeouts.
		for _, l := range r.outputs[key] {
			fmt.Fprint(r.out, l)
		}
	case e.Action == "skip":
		p.status = "no test files"
	}
	delete(r.outputs, key)
	if _, seen := r.packages[e.Package]; !seen {
		r.order = append(r.order, e.Package)
	}
	r.packages[e.Package] = p
	if p.status == "ok" {
		fmt.Fprintf(r.out, "%-4s\t%s\t%.1fs\n", p.status, p.name, p.elapsed.Seconds())
	}
}

func (r *report) anyPackageFailed() bool {
	for _, p := range r.packages {
		if p.status == "FAIL" {
			return true
		}
	}
	return false
}

func (r *report) summary(n, nTests int, wall time.Duration) {
	var ran []*packageResult
	var busy time.Duration
	for _, name := range r.order {
		if p := r.packages[name]; p.status != "no test files" {
			ran = append(ran, p)
			busy += p.elapsed
		}
	}
	sort.SliceStable(ran, func(i, j int) bool { return ran[i].elapsed > ran[j].elapsed })
	if n > len(ran) {
		n = len(ran)
	}
	fmt.Fprintf(r.out, "\nslowest packages (%d of %d with tests):\n", n, len(ran))
	tw := tabwriter.NewWriter(r.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, p := range ran[:n] {
		fmt.Fprintf(tw, "%.1f s\t%s\t%s\t\n", p.elapsed.Seconds(), p.status, p.name)
	}
	_ = tw.Flush()
	r.slowestTests(nTests)
	fmt.Fprintf(r.out, "wall time %s, package time %s (%d packages)\n",
		wall.Round(time.Second), busy.Round(time.Second), len(ran))
	if len(r.digests) > 0 {
		shown := r.digests
		if len(shown) > maxDigests {
			shown = shown[:maxDigests]
		}
		fmt.Fprintf(r.out, "\nwhat the failed tests said last (%d of %d):\n%s", len(shown), len(r.digests), strings.Join(shown, ""))
	}
	fmt.Fprintf(r.out, "\n%d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
}

// slowestTests lists the n slowest top-level tests, with their package's last element.
func (r *report) slowestTests(n int) {
	if n <= 0 || len(r.tests) == 0 {
		return
	}
	tests := slices.Clone(r.tests)
	sort.SliceStable(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	n = min(n, len(tests))
	fmt.Fprintf(r.out, "slowest tests (%d of %d):\n", n, len(tests))
	tw := tabwriter.NewWriter(r.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, t := range tests[:n] {
		fmt.Fprintf(tw, "%.1f s\t%s\t%s\t\n", t.elapsed.Seconds(), t.pkg[strings.LastIndex(t.pkg, "/")+1:], t.name)
	}
	_ = tw.Flush()
}

const (
	maxDigests     = 3
	digestLines    = 12
	digestLineSize = 240
)

// testLine matches the first line of a t.Log or t.Error call: "    file_test.go:123: ...".
var testLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// digest returns the last digestLines first lines of the test's own t.Log and t.Error calls,
// leaving out dumps (a first line ending in ":" followed by indented text, as cleanups print
// a server's log), each cut at digestLineSize.
func digest(lines []string) string {
	var kept []string
	for _, l := range lines {
		l = strings.TrimRight(l, "\n")
		if !testLine.MatchString(l) || strings.HasSuffix(l, ":") {
			continue
		}
		if len(l) > digestLineSize {
			l = l[:digestLineSize] + "…"
		}
		kept = append(kept, l)
	}
	if len(kept) > digestLines {
		kept = kept[len(kept)-digestLines:]
	}
	if len(kept) == 0 {
		return ""
	}
	return strings.Join(kept, "\n") + "\n"
}
