package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NATSOptions configures StartNATS; the zero value is a server without auth.
type NATSOptions struct {
	// User and Password, when User is set, are required of every client.
	User, Password string
	// Token, when set, is required of every client (exclusive with User).
	Token string
	// CertFile and KeyFile (PEM), when set, make the server require TLS.
	CertFile, KeyFile string
	// Config, when set, is written to a configuration file the server loads (for what has no
	// flag, such as nkey users); flags take precedence over it.
	Config string
}

// NATS is a nats-server with JetStream on 127.0.0.1, storing streams under its directory.
type NATS struct {
	*Process
	// URL is nats://127.0.0.1:PORT, or tls://127.0.0.1:PORT with TLS.
	URL string
}

// StartNATS starts nats-server with JetStream on a free port.
func StartNATS(opts NATSOptions) (*NATS, error) {
	bin, err := ServerBinary("nats-server")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-nats-")
	if err != nil {
		return nil, err
	}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "jetstream")}
	if opts.Config != "" {
		conf := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(conf, []byte(opts.Config), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "-c", conf)
	}
	if opts.CertFile != "" {
		args = append(args, "--tls", "--tlscert", opts.CertFile, "--tlskey", opts.KeyFile)
	}
	switch {
	case opts.User != "":
		args = append(args, "--user", opts.User, "--pass", opts.Password)
	case opts.Token != "":
		args = append(args, "--auth", opts.Token)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	tcp := tcpReady(addr)
	// proc is set once the first run is up, so that a Resume looks for this run's line, not
	// the previous run's.
	var proc *Process
	ready := func() error {
		if err := tcp(); err != nil {
			return err
		}
		// JetStream is usable only once the server says so, a moment after it listens.
		var log string
		if proc != nil {
			log = proc.RunLog()
		} else {
			raw, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			log = string(raw)
		}
		if !strings.Contains(log, "Server is ready") {
			return errors.New("nats-server is not ready yet")
		}
		return nil
	}
	p, err := StartProcess("nats-server", dir, bin, args, nil, ready)
	if err != nil {
		return nil, err
	}
	proc = p
	scheme := "nats://"
	if opts.CertFile != "" {
		scheme = "tls://"
	}
	return &NATS{Process: p, URL: scheme + addr}, nil
}
