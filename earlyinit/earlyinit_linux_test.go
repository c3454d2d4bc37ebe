package earlyinit

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestInitAdvisedTheTestBinary reads the kernel's view of this test binary, whose init ran
// the advice: every mapping of the executable carries VmFlags "rr" (VM_RAND_READ).
func TestInitAdvisedTheTestBinary(t *testing.T) {
	mine, random := randomReadMappings(t)
	if r := Done(); r.Err != nil || r.Off || r.Advised == 0 {
		t.Fatalf("init: %+v", r)
	}
	if mine == 0 || random != mine {
		t.Fatalf("%d of the executable's %d mappings carry VmFlags rr", random, mine)
	}
}

// TestOffLeavesTheExecutableAlone runs this test binary again with KOLLECT_STARTUP_MADVISE=off
// (the documented opt-out): no mapping of it is advised.
func TestOffLeavesTheExecutableAlone(t *testing.T) {
	if os.Getenv("KOLLECT_STARTUP_MADVISE") == Off {
		if _, random := randomReadMappings(t); random != 0 || !Done().Off {
			t.Fatalf("with KOLLECT_STARTUP_MADVISE=off, %d mappings carry VmFlags rr (%+v)", random, Done())
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOffLeavesTheExecutableAlone$", "-test.v")
	cmd.Env = append(os.Environ(), "KOLLECT_STARTUP_MADVISE="+Off)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// randomReadMappings counts the mappings of this process's executable and those of them with
// VmFlags rr (VM_RAND_READ), from /proc/self/smaps.
func randomReadMappings(t *testing.T) (mine, random int) {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	// smaps is a header line per mapping (as in maps), then "Key: value" lines, VmFlags last.
	current := false
	for _, line := range strings.Split(string(smaps), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 6 && !strings.HasSuffix(fields[0], ":"):
			current = strings.Join(fields[5:], " ") == exe
			if current {
				mine++
			}
		case current && len(fields) > 0 && fields[0] == "VmFlags:":
			if slices.Contains(fields[1:], "rr") {
				random++
			}
		}
	}
	return mine, random
}
