package pki

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kollect.dev/proto/capin"
)

func TestLoadOrCreateKeepsTheCA(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	first, err := LoadOrCreate(dir, []string{"localhost", "127.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.Fingerprint, "sha256:") || len(first.Fingerprint) != 71 {
		t.Fatalf("fingerprint %q", first.Fingerprint)
	}
	info, err := os.Stat(filepath.Join(dir, "ca.key"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key mode: %v %v", info.Mode(), err)
	}
	// A new host re-issues the serving certificate but keeps the CA and its fingerprint.
	second, err := LoadOrCreate(dir, []string{"localhost", "127.0.0.1", "hub.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if second.Fingerprint != first.Fingerprint {
		t.Fatal("CA changed")
	}
	if string(second.Certificate.Certificate[0]) == string(first.Certificate.Certificate[0]) {
		t.Fatal("serving certificate not re-issued for a new host")
	}
	// Near expiry (a year on) it is re-issued too.
	third, err := LoadOrCreate(dir, []string{"localhost"}, now.AddDate(0, 11, 15))
	if err != nil {
		t.Fatal(err)
	}
	if string(third.Certificate.Certificate[0]) == string(second.Certificate.Certificate[0]) {
		t.Fatal("expiring serving certificate not re-issued")
	}
}

func TestPinnedClientHandshake(t *testing.T) {
	id, err := LoadOrCreate(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{id.Certificate}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	// The identity the hub makes passes the check agents and the CLI make (capin).
	dial := func(pin, host string) error {
		cfg, err := capin.ClientConfig(pin, host)
		if err != nil {
			return err
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(id.Fingerprint, "127.0.0.1"); err != nil {
		t.Fatalf("pinned handshake: %v", err)
	}
	other, _ := LoadOrCreate(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err := dial(other.Fingerprint, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), "pinned CA") {
		t.Fatalf("handshake with the wrong pin: %v", err)
	}
	if err := dial(id.Fingerprint, "hub.example"); err == nil || !strings.Contains(err.Error(), "hub.example") {
		t.Fatalf("handshake for a host the certificate does not name: %v", err)
	}
}
