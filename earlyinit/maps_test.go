package earlyinit

import "testing"

func TestFileMappings(t *testing.T) {
	maps := `00400000-034ab000 r-xp 00000000 fe:00 1234                         /usr/bin/kollect-agent
034ab000-06e19000 r--p 030ab000 fe:00 1234                         /usr/bin/kollect-agent
06e19000-06fbc000 rw-p 06a19000 fe:00 1234                         /usr/bin/kollect-agent
06fbc000-07000000 rw-p 00000000 00:00 0
7fad1d303000-7fad1d459000 r-xp 00028000 fe:00 99                   /usr/lib/x86_64-linux-gnu/libc.so.6
7fad1d459000-7fad1d460000 r--p 00000000 fe:00 1235                 /usr/bin/kollect-agent-other
7fad1d460000-7fad1d470000 r--p 00000000 fe:00 1236                 /opt/my agent/kollect-agent
zz-yy r--p 00000000 fe:00 1234 /usr/bin/kollect-agent
`
	got := fileMappings([]byte(maps), "/usr/bin/kollect-agent")
	want := []mapping{{0x400000, 0x34ab000, false}, {0x34ab000, 0x6e19000, false}, {0x6e19000, 0x6fbc000, true}}
	if len(got) != len(want) {
		t.Fatalf("fileMappings = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fileMappings = %+v, want %+v (other files, anonymous memory and malformed lines left out)", got, want)
		}
	}
	// A path with a space is compared whole.
	if got := fileMappings([]byte(maps), "/opt/my agent/kollect-agent"); len(got) != 1 || got[0].start != 0x7fad1d460000 {
		t.Fatalf("fileMappings of a path with a space = %+v", got)
	}
}
