package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcessCPU is the CPU time (user and system) a process has used so far, from /proc; benchmarks
// report it per operation.
func ProcessCPU(pid int) (time.Duration, error) {
	return processCPU(pid, false)
}

// processCPU is ProcessCPU, plus with children the CPU of the process's children that have
// ended and been waited for.
func processCPU(pid int, children bool) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	last := 12
	if children {
		last = 14 // cutime, cstime
	}
	var ticks int64
	for i := 11; i <= last; i++ {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("process %d: unexpected /proc stat line %q", pid, raw)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// ProcessRSSMiB is a process's resident set size in MiB, from /proc.
func ProcessRSSMiB(pid int) (float64, error) {
	m, err := ProcessMemory(pid)
	if err != nil {
		return 0, err
	}
	v, ok := m["VmRSS"]
	if !ok {
		return 0, fmt.Errorf("process %d: no VmRSS in /proc status", pid)
	}
	return v, nil
}

// ProcessMemory is every kB figure of a process's /proc status (VmRSS, VmHWM — the peak
// resident set —, RssAnon, RssFile, VmSwap, …) in MiB, keyed by the name without its colon:
// one read gives a consistent set, so a benchmark can say what part of the resident set is
// the binary's mapped pages (RssFile) and what part is memory it allocated (RssAnon).
func ProcessMemory(pid int) (map[string]float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("process %d: /proc status line %q: %w", pid, line, err)
		}
		out[strings.TrimSuffix(f[0], ":")] = kb / 1024
	}
	return out, nil
}

// Mapping is one mapping of a process's executable, from /proc/<pid>/smaps.
type Mapping struct {
	// Range is the address range and Perms the permissions, as in /proc/<pid>/maps.
	Range, Perms string
	// RssKiB is how much of it is resident.
	RssKiB int64
	// Flags are its VmFlags: "rr" is madvise(MADV_RANDOM), "sr" MADV_SEQUENTIAL.
	Flags []string
}

// ExecutableMappings returns the mappings of a process's executable (/proc/<pid>/exe) from
// its /proc/<pid>/smaps: what the kernel keeps resident of the binary, and how it was advised.
func ExecutableMappings(pid int) ([]Mapping, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, fmt.Errorf("finding the executable of process %d: %w", pid, err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the mappings of process %d: %w", pid, err)
	}
	var out []Mapping
	var current *Mapping
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case !strings.HasSuffix(f[0], ":"):
			// A mapping's header: address perms offset dev inode [path]; the path may hold spaces.
			current = nil
			if len(f) >= 6 && strings.Join(f[5:], " ") == exe {
				out = append(out, Mapping{Range: f[0], Perms: f[1]})
				current = &out[len(out)-1]
			}
		case current == nil:
		case f[0] == "Rss:" && len(f) >= 2:
			if current.RssKiB, err = strconv.ParseInt(f[1], 10, 64); err != nil {
				return nil, fmt.Errorf("process %d: smaps line %q: %w", pid, line, err)
			}
		case f[0] == "VmFlags:":
			current.Flags = f[1:]
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("process %d: no mapping of %s in /proc smaps", pid, exe)
	}
	return out, nil
}

// CPUByCommand sums the CPU time (user and system) of every process whose command name is one
// of names, by name: a benchmark reads it around a phase to say where the machine's time
// went besides the process it measures (kube-apiserver, etcd, postgres). Processes that end
// between the directory listing and the read are skipped. The CPU of a process's children
// that have ended counts too (cutime and cstime): PostgreSQL runs each session in a server
// process of its own, and a session that ended within the phase would otherwise not count.
func CPUByCommand(names ...string) (map[string]time.Duration, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	out := map[string]time.Duration{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || !want[strings.TrimSpace(string(comm))] {
			continue
		}
		if v, err := processCPU(pid, true); err == nil {
			out[strings.TrimSpace(string(comm))] += v
		}
	}
	return out, nil
}

// GroupCPU is the CPU time (user and system) of every process in process group pgid, plus that
// of their children that have ended and been waited for. A server the harness starts leads a
// group of its own (Process.PID), so this is the whole server: PostgreSQL's session processes,
// the CGI processes of a git HTTP server. Benchmarks and fleet tests read it around a phase.
func GroupCPU(pgid int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	var total time.Duration
	found := false
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // ended since the listing
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		if len(f) < 15 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		found = true
		for i := 11; i <= 14; i++ { // utime, stime, cutime, cstime
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: unexpected /proc stat line %q", pid, raw)
			}
			total += time.Duration(v) * time.Second / 100 // USER_HZ is 100 on Linux
		}
	}
	if !found {
		return 0, fmt.Errorf("no process in group %d", pgid)
	}
	return total, nil
}

// EstablishedConns counts the established TCP connections whose local port is port (the
// server's side of each client connection), from /proc/net/tcp and tcp6.
func EstablishedConns(port int) (int, error) {
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", file, err)
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "01" { // 01: TCP_ESTABLISHED
				continue
			}
			i := strings.LastIndexByte(f[1], ':')
			if p, err := strconv.ParseUint(f[1][i+1:], 16, 16); err == nil && int(p) == port {
				n++
			}
		}
	}
	return n, nil
}
