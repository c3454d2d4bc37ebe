package testenv

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// APIServerPID is the process id of the control plane's kube-apiserver. envtest keeps its
// process to itself, so it is found in /proc: a child of this process running kube-apiserver
// with this control plane's secure port.
func (cp *ControlPlane) APIServerPID() (int, error) {
	u, err := url.Parse(cp.Config.Host)
	if err != nil {
		return 0, fmt.Errorf("control plane %q: parsing its host %q: %w", cp.Name, cp.Config.Host, err)
	}
	port := "--secure-port=" + u.Port()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || parentOf(pid) != self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" {
			continue
		}
		for _, a := range args[1:] {
			if a == port {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("control plane %q: no kube-apiserver child of process %d with %s", cp.Name, self, port)
}

// FreezeAPIServer stops the kube-apiserver with SIGSTOP: connections stay open and requests
// hang, as with an apiserver that stopped answering (etcd keeps running). ThawAPIServer
// resumes it.
func (cp *ControlPlane) FreezeAPIServer() error { return cp.signalAPIServer(syscall.SIGSTOP) }

// ThawAPIServer resumes a frozen kube-apiserver with SIGCONT.
func (cp *ControlPlane) ThawAPIServer() error { return cp.signalAPIServer(syscall.SIGCONT) }

func (cp *ControlPlane) signalAPIServer(sig syscall.Signal) error {
	pid, err := cp.APIServerPID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("control plane %q: sending %v to kube-apiserver %d: %w", cp.Name, sig, pid, err)
	}
	if sig == syscall.SIGSTOP {
		if err := waitStopped(pid); err != nil {
			return fmt.Errorf("control plane %q: %w", cp.Name, err)
		}
	}
	return nil
}

// parentOf is a process's parent id from /proc, -1 when unreadable.
func parentOf(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 || i+2 > len(raw) {
		return -1
	}
	f := strings.Fields(string(raw[i+2:]))
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}
