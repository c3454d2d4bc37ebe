package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"testing"
	"time"
)

// selfSigned is a serving certificate for 127.0.0.1 and the pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestHandshakeListener: a client that connects and never says hello neither holds up the
// clients behind it nor stays connected past the handshake timeout; Accept hands out only
// connections whose handshake is done, and fails with net.ErrClosed once the listener closed.
func TestHandshakeListener(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newHandshakeListener(raw, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}, 300*time.Millisecond, slog.New(slog.DiscardHandler))

	silent, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	client := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", raw.Addr().String(), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
		if err == nil {
			_, err = c.Write([]byte("hello"))
			defer c.Close()
		}
		client <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	tc, ok := c.(*tls.Conn)
	if !ok || !tc.ConnectionState().HandshakeComplete || tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("accepted %T, want a *tls.Conn past its handshake with h2 negotiated", c)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if err := <-client; err != nil {
		t.Fatal(err)
	}
	c.Close()

	// The silent client is dropped once the timeout passed: its read ends without data.
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ne net.Error
	if n, err := silent.Read(buf); n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the silent client read %d bytes, %v: want the hub to have closed it", n, err)
	}

	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}
