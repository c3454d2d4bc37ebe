package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kollect.dev/testenv"
)

// TestDemo runs `make demo` as a newcomer does, in its own process group as a terminal runs
// it, and stops it the two ways users do: Ctrl-C once it is up (SIGINT to the whole group,
// after checking what it showed: the sample bundle reaching both clusters through the hub,
// both clusters' rows in one git repository and a scaled Deployment as a one-row commit, and
// the psql query over the PostgreSQL both export to answering with rows of both), and
// SIGTERM to make alone while the demo is still starting. Either way no process the demo
// started may survive, and nothing may remain in its temporary directory.
func TestDemo(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		sig     syscall.Signal
		toGroup bool
		after   string   // the line of output after which the signal is sent
		want    []string // what the output must show by then
	}{{
		name: "Ctrl-C once up", sig: syscall.SIGINT, toGroup: true, after: "dashboard:",
		want: []string{
			"bundle inventory revision 1 goes to: east, west",
			"kollectclusterinventory.kollect.dev/fleet",
			"east/fleet/Deployment.yaml",
			"west/fleet/Deployment.yaml",
			"Rows: 0 added, 1 changed, 0 removed",
			"Deployment shop/cart",
			"+    replicas: 5",
			"$ psql postgres://kollect_agent@127.0.0.1:",
			" cluster | rows | coverage | confirmed_ago | changed_ago",
		},
	}, {
		name: "SIGTERM to make while starting", sig: syscall.SIGTERM, after: "creating sample workloads",
	}} {
		t.Run(c.name, func(t *testing.T) {
			tmp, err := os.MkdirTemp("", "kollect-demo-test-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(tmp)
			// PostgreSQL runs as the user postgres when the test runs as root: it must reach its
			// data directory under tmp.
			if err := os.Chmod(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("make", "--no-print-directory", "demo")
			cmd.Dir = root
			// The demo's own temporary files go to tmp, so that anything left there is a leak.
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out := startWatched(t, cmd)
			if !out.waitFor(c.after, 10*time.Minute) {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				t.Fatalf("make demo did not print %q:\n%s", c.after, out.String())
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("demo output lacks %q", w)
				}
			}
			if c.toGroup {
				checkFleetQuery(t, out.String())
			}
			started := descendants(cmd.Process.Pid)
			target := cmd.Process.Pid
			if c.toGroup {
				target = -target
			}
			if err := syscall.Kill(target, c.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Errorf("make demo still running 2 minutes after %v", c.sig)
			}
			// Whatever survived is killed, so that a failing run does not leak into the next.
			var alive []string
			for pid, name := range started {
				if syscall.Kill(pid, 0) == nil {
					alive = append(alive, strconv.Itoa(pid)+" "+name)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if len(alive) > 0 {
				t.Errorf("after %v these processes of the demo survived: %s\n%s", c.sig, strings.Join(alive, ", "), out.String())
			}
			if len(started) < 5 {
				t.Errorf("only %d processes under make demo when signalled, want make, the demo, the hub and control planes: %v", len(started), started)
			}
			left, _ := filepath.Glob(filepath.Join(tmp, "*"))
			if len(left) > 0 {
				t.Errorf("after %v the demo left %v in its temporary directory", c.sig, left)
			}
		})
	}
}

// watched collects a command's output and reports when a line appears.
type watched struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	cond *sync.Cond
}

func startWatched(t *testing.T, cmd *exec.Cmd) *watched {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	w := &watched{}
	w.cond = sync.NewCond(&w.mu)
	go func() {
		// Keep draining until the demo exits, so that it never blocks writing.
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			w.mu.Lock()
			w.buf.WriteString(sc.Text() + "\n")
			w.cond.Broadcast()
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor reports whether s appeared in the output within timeout.
func (w *watched) waitFor(s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	wake := time.AfterFunc(timeout, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.cond.Broadcast()
	})
	defer wake.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !strings.Contains(w.buf.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		w.cond.Wait()
	}
	return true
}

// descendants returns every process below pid (by parent, whatever its process group: the
// control planes run in groups of their own), with its command name.
func descendants(pid int) map[int]string {
	children := map[int][]int{}
	names := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so split after the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], p)
		names[p] = s[strings.IndexByte(s, '(')+1 : i]
	}
	out := map[int]string{pid: names[pid]}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out[c] = names[c]
			queue = append(queue, c)
		}
	}
	return out
}

// fleetRow is one answer line of docs/examples/demo-fleet.sql in psql's aligned output:
// " east    |   14 | complete | 00:00:03      | 00:00:01".
var fleetRow = regexp.MustCompile(`(?m)^ (\S+)\s+\|\s+(\d+)\s+\|\s+(.+?)\s+\|\s+(\S+)\s+\|\s+(\S+)\s*$`)

// checkFleetQuery asserts the psql answer the demo printed: both clusters, each with rows,
// complete coverage and a confirmation age.
func checkFleetQuery(t *testing.T, out string) {
	t.Helper()
	i := strings.Index(out, "$ psql ")
	if i < 0 {
		t.Error("the demo ran no psql query")
		return
	}
	rows := map[string]int{}
	for _, m := range fleetRow.FindAllStringSubmatch(out[i:], -1) {
		n, _ := strconv.Atoi(m[2])
		rows[m[1]] = n
		if m[3] != "complete" {
			t.Errorf("the psql answer says cluster %s's coverage is %q, want complete:\n%s", m[1], m[3], out[i:])
		}
	}
	for _, cluster := range []string{"east", "west"} {
		if rows[cluster] <= 0 {
			t.Errorf("the psql answer has no rows of cluster %s (parsed %v):\n%s", cluster, rows, out[i:])
		}
	}
	if len(rows) != 2 {
		t.Errorf("the psql answer has clusters %v, want east and west", rows)
	}
}
