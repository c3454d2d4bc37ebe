package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// proc is a command the test started, with its output in a log file.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan error
}

// start runs bin with args and env (added to the test's environment) until stop or the end of
// the test; on failure its log is shown.
func start(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{log: filepath.Join(t.TempDir(), name+".log"), exited: make(chan error, 1)}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			raw, _ := os.ReadFile(p.log)
			t.Logf("%s log:\n%s", name, raw)
		}
	})
	return p
}

// stop sends SIGTERM and waits (SIGKILL after 30 s); calling it again does nothing.
func (p *proc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// alive fails the test when the process has exited.
func (p *proc) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("%s exited: %v", filepath.Base(p.log), err)
	default:
	}
}

func (p *proc) output() string {
	raw, _ := os.ReadFile(p.log)
	return string(raw)
}
