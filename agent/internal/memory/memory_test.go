package memory

import (
	"os"
	"testing"
)

func TestParseStatus(t *testing.T) {
	u := parseStatus([]byte("Name:\tkollect-agent\nVmHWM:\t  120000 kB\nVmRSS:\t  106160 kB\nRssAnon:\t   15616 kB\nRssFile:\t   90544 kB\nRssShmem:\t       0 kB\n"))
	want := Usage{Resident: 106160 << 10, Anonymous: 15616 << 10, File: 90544 << 10}
	if u != want {
		t.Fatalf("parseStatus = %+v, want %+v", u, want)
	}
	if got := u.String(); got != "103.7 MiB (anonymous 15.2 MiB, file 88.4 MiB)" {
		t.Fatalf("String() = %q", got)
	}
}

func TestExecutableMappings(t *testing.T) {
	maps := `00400000-034ab000 r-xp 00000000 fe:00 1234 /usr/bin/kollect-agent
034ab000-06e19000 r--p 030ab000 fe:00 1234 /usr/bin/kollect-agent
06e19000-06fbc000 rw-p 06a19000 fe:00 1234 /usr/bin/kollect-agent
06fbc000-07000000 rw-p 00000000 00:00 0
7fad1d303000-7fad1d459000 r-xp 00028000 fe:00 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7fad1d459000-7fad1d460000 r--p 00000000 fe:00 1235 /usr/bin/kollect-agent-other
`
	got := executableMappings([]byte(maps), "/usr/bin/kollect-agent")
	want := []mapping{{0x400000, 0x34ab000}, {0x34ab000, 0x6e19000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("executableMappings = %x, want %x (the writable mapping, anonymous memory and other files left out)", got, want)
	}
}

// TestReleaseShrinksTheResidentExecutable runs Release in the test binary itself: the
// kernel must accept the advice, and the file-backed resident memory must shrink.
func TestReleaseShrinksTheResidentExecutable(t *testing.T) {
	// go test runs the binary it has just linked, whose page cache may still be dirty, and the
	// start-up advice (package earlyinit, imported by this package) starts its writeback: pages
	// being written back cannot be reclaimed. A shipped binary's pages are clean; so are these
	// once written.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if f, err := os.Open(exe); err != nil {
		t.Fatal(err)
	} else {
		err = f.Sync()
		f.Close()
		if err != nil {
			t.Fatalf("writing back %s: %v", exe, err)
		}
	}
	before, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	advised, err := Release()
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	after, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("advised %d MiB; before %s, after %s", advised>>20, before, after)
	if advised == 0 {
		t.Fatal("Release advised no mapping of the test executable")
	}
	if after.File >= before.File {
		t.Fatalf("the resident file pages did not shrink: before %s, after %s", before, after)
	}
}
