package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServerBinary finds a test server built by hack/ensure-servers.sh in the directories of
// KOLLECT_SERVERS. A missing server is an error: tests never skip for want of a server.
func ServerBinary(name string) (string, error) {
	dirs := os.Getenv("KOLLECT_SERVERS")
	if dirs == "" {
		return "", fmt.Errorf("KOLLECT_SERVERS is not set: run the tests through `make test`, "+
			"or export KOLLECT_SERVERS=$(hack/ensure-servers.sh) (needed for %s)", name)
	}
	for _, dir := range filepath.SplitList(dirs) {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("test server %s not found in KOLLECT_SERVERS=%s: rerun hack/ensure-servers.sh", name, dirs)
}

// FreePort returns a TCP port on 127.0.0.1 that is free now, for a server the test starts next.
//
// Why not the kernel's choice (listen on :0): that port comes from the ephemeral range, where
// every outgoing connection on the machine also takes its source port, so between the test's
// check and the server's bind a client elsewhere (an agent dialling its API server, another
// test package) could take it, and the server failed with "address already in use". Ports
// below the ephemeral range are only ever taken by a listener, and each is handed out once
// per process.
func FreePort() (int, error) {
	lo, hi := listenerPortRange()
	portsMu.Lock()
	defer portsMu.Unlock()
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		if handedOut[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		handedOut[port] = true
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// listenerPortRange is the range FreePort picks from: the 12,000 ports below the kernel's
// ephemeral range (ip_local_port_range, 32768 by default), never below 1024.
func listenerPortRange() (lo, hi int) {
	hi = 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(raw)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	return max(1024, hi-12000), max(hi, 2048)
}

// Process is a server started for tests, stopped with Stop. Halt and Resume stop it
// gracefully and start it again with the same command line, port and data, for outages.
type Process struct {
	Name string
	// Dir is the server's private temporary directory, removed on Stop.
	Dir string

	bin   string
	args  []string
	env   []string
	ready func() error
	// haltSignal is what Halt sends to the group: the server's own graceful shutdown.
	haltSignal syscall.Signal

	cmd *exec.Cmd
	log *os.File
	// exited is closed when the current run's process has been reaped.
	exited chan struct{}
	// logStart is the length of server.log when the current run started.
	logStart int64
}

// StartProcess runs bin with args in its own process group, logging to Dir/server.log, and
// waits until ready returns nil (or the process exits, or 30 s pass).
func StartProcess(name, dir, bin string, args []string, env []string, ready func() error) (*Process, error) {
	p := &Process{Name: name, Dir: dir, bin: bin, args: args, env: env, ready: ready, haltSignal: syscall.SIGTERM}
	if err := p.run(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// run starts one run of the server, appending to server.log, and waits until it is ready.
// On failure the process is gone and the log is closed; the directory is left to the caller.
func (p *Process) run() error {
	logFile, err := os.OpenFile(filepath.Join(p.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if fi, err := logFile.Stat(); err == nil {
		p.logStart = fi.Size()
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.cmd, p.log, p.exited = cmd, logFile, make(chan struct{})
	var waitErr error
	go func(exited chan struct{}) { waitErr = cmd.Wait(); close(exited) }(p.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("%s not ready after 30s: %w\n%s", p.Name, err, p.Log())
		}
		select {
		case <-p.exited:
			p.log.Close()
			return fmt.Errorf("%s exited during start-up: %v\n%s", p.Name, waitErr, p.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PID is the process ID of the server's current run, which leads its own process group (see
// GroupCPU); 0 when it is not running.
func (p *Process) PID() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Log returns the server's output so far, for failure messages.
func (p *Process) Log() string {
	raw, _ := os.ReadFile(filepath.Join(p.Dir, "server.log"))
	return string(raw)
}

// RunLog returns the output of the current run only (since the last start or Resume), for
// readiness checks that look for a line every run prints.
func (p *Process) RunLog() string {
	raw := p.Log()
	if int(p.logStart) <= len(raw) {
		return raw[p.logStart:]
	}
	return raw
}

// Signal sends sig to the server's process group (SIGSTOP/SIGCONT simulate an outage). A
// SIGSTOP returns once the server is stopped: the signal is delivered asynchronously, and a
// server still running for a moment after kill(2) would answer what the test sends next.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return err
	}
	if sig == syscall.SIGSTOP {
		return waitStopped(p.cmd.Process.Pid)
	}
	return nil
}

// waitStopped waits until /proc says the process is stopped (state T).
func waitStopped(pid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return fmt.Errorf("reading the state of process %d: %w", pid, err)
		}
		// The state follows the command name, which is in parentheses and may hold spaces.
		if i := bytes.LastIndexByte(raw, ')'); i > 0 && i+2 < len(raw) && (raw[i+2] == 'T' || raw[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not stop within 10s of SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// Halt stops the server gracefully, as an operator would (each server's own clean shutdown
// signal, SIGKILL only if it is still running after 30 s), keeping its directory, data and
// port: clients then get "connection refused" until Resume.
func (p *Process) Halt() error {
	if err := p.Signal(p.haltSignal); err != nil {
		return fmt.Errorf("halting %s: %w", p.Name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not stop within 30s of %v; killed\n%s", p.Name, p.haltSignal, p.Log())
	}
	// The group may hold children that outlive the leader (runuser's postgres).
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.log.Close()
	return nil
}

// Resume starts a halted server again with the same command line, environment and readiness
// check, appending to its log; it returns once the server is ready.
func (p *Process) Resume() error {
	select {
	case <-p.exited:
	default:
		return fmt.Errorf("resuming %s: it is still running", p.Name)
	}
	return p.run()
}

// kill ends the current run's process group and waits until it is reaped. A run that has
// exited already (halted) is not signalled again: its process id may belong to another
// process by now.
func (p *Process) kill() {
	select {
	case <-p.exited:
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	p.log.Close()
}

// Stop kills the server's process group and removes its directory.
func (p *Process) Stop() {
	p.kill()
	_ = os.RemoveAll(p.Dir)
}

// Shutdown stops the server gracefully, as Halt does, and removes its directory: when it
// returns, every process of the server is gone. Stop's SIGKILL to the group does not promise
// that for PostgreSQL, whose backends run in sessions of their own and exit only once they
// notice that their postmaster died, after Stop returned. For programs that must leave nothing
// running (make demo).
func (p *Process) Shutdown() {
	if err := p.Halt(); err != nil {
		p.kill()
	}
	_ = os.RemoveAll(p.Dir)
}

// tcpReady reports whether addr accepts TCP connections.
func tcpReady(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// Postgres is a throwaway PostgreSQL 15 cluster on 127.0.0.1.
type Postgres struct {
	*Process
	Port int
	// URL connects as the superuser postgres to database postgres.
	URL string
	// CAPEM is the CA of the server certificate when the server speaks TLS.
	CAPEM []byte
}

// PostgresOptions configure StartPostgresWith.
type PostgresOptions struct {
	// TLS serves TLS (next to plain connections) with a certificate for 127.0.0.1 signed by a
	// new CA, returned in Postgres.CAPEM.
	TLS bool
	// Settings are more server settings, each "name=value" as postgres -c takes it (e.g.
	// shared_preload_libraries=pg_stat_statements for a benchmark's statement profile).
	Settings []string
	// ListenAddresses are addresses to listen on beside 127.0.0.1 (a node cluster's HostIP,
	// for pods), and TrustNetworks the client networks (CIDRs) allowed in without a password,
	// as 127.0.0.1 is (a node's pod range).
	ListenAddresses []string
	TrustNetworks   []string
}

// StartPostgres initialises and starts a PostgreSQL cluster with fsync off. initdb and postgres
// refuse to run as root, so as root they run as the postgres user.
func StartPostgres() (*Postgres, error) { return StartPostgresWith(PostgresOptions{}) }

// StartPostgresWith starts a PostgreSQL cluster with options; see StartPostgres.
func StartPostgresWith(opts PostgresOptions) (*Postgres, error) {
	pgbin := os.Getenv("PGBIN")
	if pgbin == "" {
		pgbin = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(pgbin, "initdb")); err != nil {
		return nil, fmt.Errorf("PostgreSQL 15 is not installed (%w): run hack/ensure-servers.sh", err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	var runAs []string
	if os.Geteuid() == 0 {
		if err := ensurePostgresUser(); err != nil {
			return nil, err
		}
		runAs = []string{"runuser", "-u", "postgres", "--"}
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		return nil, err
	}
	if len(runAs) > 0 {
		if out, err := exec.Command("chown", "postgres:postgres", data).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("chown %s: %v: %s", data, err, out)
		}
	}
	initdb := append(append([]string{}, runAs...), filepath.Join(pgbin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	if out, err := exec.Command(initdb[0], initdb[1:]...).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if len(opts.TrustNetworks) > 0 {
		hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		for _, cidr := range opts.TrustNetworks {
			fmt.Fprintf(hba, "host all all %s trust\n", cidr)
		}
		if err := hba.Close(); err != nil {
			return nil, err
		}
	}
	// The server runs under setpriv, which execs it in place with its own parent-death signal
	// (a change of user clears the one StartProcess sets): a killed test leaves no postgres.
	var serveAs []string
	if len(runAs) > 0 {
		serveAs = []string{"setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig=KILL", "--"}
	}
	cmdline := append(append([]string{}, serveAs...), filepath.Join(pgbin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-k", data, "-c", "listen_addresses="+strings.Join(append([]string{"127.0.0.1"}, opts.ListenAddresses...), ","),
		"-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	for _, setting := range opts.Settings {
		cmdline = append(cmdline, "-c", setting)
	}
	var caPEM []byte
	if opts.TLS {
		var certFile, keyFile string
		if caPEM, certFile, keyFile, err = ServerCertificate(data); err != nil {
			return nil, err
		}
		// postgres refuses a key readable by others or owned by another user.
		if len(runAs) > 0 {
			if out, err := exec.Command("chown", "postgres:postgres", certFile, keyFile).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("chown certificates: %v: %s", err, out)
			}
		}
		cmdline = append(cmdline, "-c", "ssl=on", "-c", "ssl_cert_file="+certFile, "-c", "ssl_key_file="+keyFile)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	ready := func() error {
		out, err := exec.Command(filepath.Join(pgbin, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(port)).CombinedOutput()
		if err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}
	p, err := StartProcess("postgres", dir, cmdline[0], cmdline[1:], nil, ready)
	if err != nil {
		return nil, err
	}
	// SIGINT is PostgreSQL's fast shutdown: it ends the sessions and shuts down cleanly. Its
	// SIGTERM (smart shutdown) would wait for every client to disconnect, and a sink's
	// connection pool does not.
	p.haltSignal = syscall.SIGINT
	return &Postgres{Process: p, Port: port, URL: url, CAPEM: caPEM}, nil
}

// CreateDatabase creates a fresh database and returns its URL, so tests sharing one server
// stay apart.
func (pg *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "psql", pg.URL, "-v", "ON_ERROR_STOP=1", "-qc",
		fmt.Sprintf(`CREATE DATABASE %q`, name)).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("creating database %s: %v: %s", name, err, out)
	}
	return strings.Replace(pg.URL, "/postgres?", "/"+name+"?", 1), nil
}

func ensurePostgresUser() error {
	if err := exec.Command("id", "postgres").Run(); err == nil {
		return nil
	}
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "postgres").CombinedOutput(); err != nil {
		return fmt.Errorf("useradd postgres: %v: %s", err, out)
	}
	return nil
}

// GitHTTP is a smart-HTTP git server (git http-backend) serving bare repositories under Root.
type GitHTTP struct {
	*Process
	// URL is the base URL; a repository Root/x.git is URL + "/x.git".
	URL  string
	Root string
}

// StartGitHTTP serves bare repositories under a new temporary root, with basic auth when user
// is not empty.
func StartGitHTTP(user, pass string) (*GitHTTP, error) {
	bin, err := ServerBinary("githttp")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-githttp-")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "repos")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"-listen", addr, "-root", root}
	if user != "" {
		args = append(args, "-user", user, "-pass", pass)
	}
	p, err := StartProcess("githttp", dir, bin, args, nil, tcpReady(addr))
	if err != nil {
		return nil, err
	}
	return &GitHTTP{Process: p, URL: "http://" + addr, Root: root}, nil
}

// InitBareRepo creates a bare repository Root/name with an initial commit on branch main.
func (g *GitHTTP) InitBareRepo(name string) (string, error) {
	return InitBareRepo(filepath.Join(g.Root, name))
}

// InitBareRepo creates a bare repository at path whose branch main holds one commit, as a
// hosted repository created with a README would.
func InitBareRepo(path string) (string, error) {
	work, err := os.MkdirTemp("", "kollect-gitinit-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	steps := [][]string{
		{"git", "init", "-q", "--bare", "-b", "main", path},
		{"git", "-C", work, "init", "-q", "-b", "main"},
		{"git", "-C", work, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "--allow-empty", "-m", "initial"},
		{"git", "-C", work, "push", "-q", path, "main"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return path, nil
}
