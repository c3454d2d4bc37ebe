package gitrepo

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// sshGitServer serves git over SSH: golang.org/x/crypto/ssh for the SSH layer, accepting one
// client key, and the installed git (through git-shell, which runs only git's own commands)
// for the git protocol. No sshd is installed here; the git side is the real program.
func sshGitServer(t *testing.T, clientKey ssh.PublicKey) (addr string, hostKey ssh.PublicKey) {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(key.Marshal(), clientKey.Marshal()) {
			return &ssh.Permissions{}, nil
		}
		return nil, errors.New("unknown key")
	}}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveSSH(c, cfg)
		}
	}()
	return l.Addr().String(), signer.PublicKey()
}

func serveSSH(c net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer ch.Close()
			for req := range requests {
				if req.Type != "exec" || len(req.Payload) < 4 {
					_ = req.Reply(req.Type == "env", nil)
					continue
				}
				command := string(req.Payload[4 : 4+binary.BigEndian.Uint32(req.Payload)])
				_ = req.Reply(true, nil)
				cmd := exec.Command("git-shell", "-c", command)
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
				status := uint32(0)
				if err := cmd.Run(); err != nil {
					status = 1
				}
				_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
				return
			}
		}()
	}
}

func TestSSHKeyAndKnownHosts(t *testing.T) {
	clientPub, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(clientPub)
	addr, hostKey := sshGitServer(t, sshPub)
	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "ssh.git"))
	if err != nil {
		t.Fatal(err)
	}
	_, otherHost, _ := ed25519.GenerateKey(rand.Reader)
	otherKey, _ := ssh.NewPublicKey(otherHost.Public())
	url := fmt.Sprintf("ssh://git@%s%s", addr, repo)
	build := func(known ssh.PublicKey, key []byte) *Sink {
		secret := map[string][]byte{"ssh-privatekey": key, "known_hosts": []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, known) + "\n")}
		return newSink(t, "east", url, v1alpha1.LayoutDocument, secret)
	}
	keyPEM := pem.EncodeToMemory(block)

	if err := build(otherKey, keyPEM).Probe(context.Background()); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Errorf("unknown host key: want a terminal error, got %v", err)
	}
	_, strangerPriv, _ := ed25519.GenerateKey(rand.Reader)
	strangerBlock, _ := ssh.MarshalPrivateKey(strangerPriv, "")
	if err := build(hostKey, pem.EncodeToMemory(strangerBlock)).Probe(context.Background()); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Errorf("refused client key: want a terminal error, got %v", err)
	}
	s := build(hostKey, keyPEM)
	if err := s.Probe(context.Background()); err != nil {
		t.Fatalf("probe: %v", err)
	}
	e := &exporter{sink: s}
	if res := e.export(t, context.Background(), pod(t, "east", "shop", "web", 1)); res.Commit.IsZero() {
		t.Fatal("no commit over SSH")
	}
	out, err := exec.Command("git", "--git-dir", repo, "show", "main:east/workloads.yaml").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("name: web")) {
		t.Fatalf("pushed document: %v: %s", err, out)
	}
}
