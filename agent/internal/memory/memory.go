package memory

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"0.kollect.dev/earlyinit"
)

// StartupAdvice is what package earlyinit advised before the agent's other packages started:
// the executable's pages read at random, not with read-ahead (see its doc).
func StartupAdvice() earlyinit.Result { return earlyinit.Done() }

// Usage is the process's resident memory as the kernel counts it (/proc/self/status).
type Usage struct {
	// Resident is VmRSS: what `kubectl top pod` and a memory limit see.
	Resident uint64
	// Anonymous is RssAnon: the heap, stacks and runtime structures.
	Anonymous uint64
	// File is RssFile: mapped file pages, almost all of them the executable's.
	File uint64
}

// String formats the usage for logs, in MiB.
func (u Usage) String() string {
	const mib = 1 << 20
	return fmt.Sprintf("%.1f MiB (anonymous %.1f MiB, file %.1f MiB)",
		float64(u.Resident)/mib, float64(u.Anonymous)/mib, float64(u.File)/mib)
}

// Resident reads the process's resident memory.
func Resident() (Usage, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Usage{}, fmt.Errorf("reading the process status: %w", err)
	}
	return parseStatus(raw), nil
}

// parseStatus reads the kB figures of a /proc/<pid>/status file.
func parseStatus(raw []byte) Usage {
	var u Usage
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "VmRSS":
			u.Resident = kb << 10
		case "RssAnon":
			u.Anonymous = kb << 10
		case "RssFile":
			u.File = kb << 10
		}
	}
	return u
}

// Release returns freed heap to the operating system and asks the kernel to reclaim the
// resident pages of the executable's read-only mappings. It reports how many bytes of
// mappings it advised; an error means the kernel refused the advice (a kernel before 5.4
// has no MADV_PAGEOUT), and the heap was returned regardless.
func Release() (advised uint64, err error) {
	debug.FreeOSMemory()
	return pageOutExecutable()
}

// mapping is one line of /proc/self/maps that Release may advise.
type mapping struct {
	start, end uint64
}

// executableMappings returns the read-only (text and rodata) mappings of path in a
// /proc/<pid>/maps file. Writable mappings are left alone: their pages may be dirty copies.
func executableMappings(maps []byte, path string) []mapping {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// address perms offset dev inode path
		if len(fields) < 6 || fields[5] != path || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, mapping{start: start, end: end})
	}
	return out
}

// DefaultGCPercent is the agent's garbage-collection target when GOGC is not set: the heap
// may grow to 1.5× what is live, not Go's 2×. The agent's live memory is its rows, and its
// CPU is idle between changes, so the collections this costs fall almost all in the initial
// load: measured on the shipped binary at 100k objects, the first export's peak fell by about
// a third for some 15% more CPU to the first export.
const DefaultGCPercent = 50

// ApplyGCDefault sets DefaultGCPercent unless the GOGC environment variable chooses.
// GOMEMLIMIT (the chart sets it from the container's limit) applies on top either way.
func ApplyGCDefault() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
