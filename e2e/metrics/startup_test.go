package metrics

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"kollect.dev/testenv"
)

// earlyInit is the package that advises the executable's pages before the agent's others
// initialise (earlyinit/doc.go); its module path sorts first so that Go initialises it early.
const earlyInit = "0.kollect.dev/earlyinit"

// checkStartupAdvice reads, from the kernel, what the start-up advice of package earlyinit
// did to the running agent (pid, its log at logPath, after both "released start-up memory"
// lines): every mapping of its executable is advised MADV_RANDOM (VmFlags rr in
// /proc/<pid>/smaps), the binary's resident pages when the caches had synced (the first
// release's "before", which the agent read from its /proc/self/status) are below
// startupFileBound and after the second release below settledFileBound (RssFile of
// /proc/<pid>/status), and `GODEBUG=inittrace=1 kollect-agent --version` shows earlyinit
// initialised among the binary's first few dozen packages.
func checkStartupAdvice(t *testing.T, bin string, pid int, logPath string) {
	t.Helper()
	maps, err := testenv.ExecutableMappings(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if !slices.Contains(m.Flags, "rr") {
			t.Errorf("the agent's executable mapping %s %s is not advised MADV_RANDOM (VmFlags %v)", m.Range, m.Perms, m.Flags)
		}
	}
	mem, err := testenv.ProcessMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The line docs/operations.md shows ("Memory and profiles").
	if !regexp.MustCompile(`"msg":"executable read at random since start-up","advisedMiB":[1-9][0-9]*,"evicted":true,"off":false`).Match(raw) {
		t.Errorf("the agent did not log that its executable is read at random since start-up:\n%s", raw)
	}
	startup, ok := firstReleaseFileMiB(raw)
	if !ok {
		t.Fatalf("no file figure in the agent's first \"released start-up memory\" line:\n%s", raw)
	}
	t.Logf("the agent's executable: %.1f MiB resident before the first release, %.1f MiB settled (RssFile)", startup, mem["RssFile"])
	if startup > startupFileBound {
		t.Errorf("%.1f MiB of the agent's executable were resident when its caches had synced, more than %d MiB: its start-up reads more of the binary (a new library's initialisers, or the advice lost)", startup, startupFileBound)
	}
	if mem["RssFile"] > settledFileBound {
		t.Errorf("%.1f MiB of the agent's executable stay resident after its releases, more than %d MiB", mem["RssFile"], settledFileBound)
	}

	trace := exec.Command(bin, "--version")
	trace.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := trace.CombinedOutput()
	if err != nil {
		t.Fatalf("GODEBUG=inittrace=1 kollect-agent --version: %v\n%s", err, out)
	}
	order := initOrder(out)
	at := slices.Index(order, earlyInit)
	if at < 0 || at >= earlyInitRank || len(order) < 10*earlyInitRank {
		t.Fatalf("%s is initialised %dth of %d packages, not among the first %d", earlyInit, at+1, len(order), earlyInitRank)
	}
}

const (
	// startupFileBound and settledFileBound are in MiB, for the binary built from this
	// repository (about 115 MiB), in this test (a few objects, three sinks, one of them down,
	// --release-startup-memory-after 1s). Measured: 53.5 MiB resident when the caches had
	// synced and 25 MiB after the second release, against 72.5 and 40 MiB with
	// KOLLECT_STARTUP_MADVISE=off.
	startupFileBound = 62
	settledFileBound = 32
	// earlyInitRank: earlyinit runs after syscall and the packages syscall needs, 24th of
	// about 770 in the agent.
	earlyInitRank = 40
)

// firstReleaseFileMiB reads the file figure of "before" in the first "released start-up
// memory" line: `"before":"60.1 MiB (anonymous 12.0 MiB, file 48.1 MiB)"`.
func firstReleaseFileMiB(log []byte) (float64, bool) {
	re := regexp.MustCompile(`"before":"[^"]*file ([0-9.]+) MiB\)"`)
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"released start-up memory"`) {
			continue
		}
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[1], 64)
		return v, err == nil
	}
	return 0, false
}

// initOrder lists the packages of a GODEBUG=inittrace=1 output in the order they ran.
func initOrder(trace []byte) []string {
	var out []string
	for _, line := range strings.Split(string(trace), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "init" && strings.HasPrefix(f[2], "@") {
			out = append(out, f[1])
		}
	}
	return out
}
