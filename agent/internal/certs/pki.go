package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// keyPair is a certificate with its key, PEM encoded.
type keyPair struct {
	Cert, Key []byte
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// newCA creates a self-signed CA valid from now for validity.
func newCA(commonName string, now time.Time, validity time.Duration) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return keyPair{}, fmt.Errorf("self-signing CA: %w", err)
	}
	return encode(der, key)
}

// newServing issues a serving certificate for dnsNames signed by ca.
func newServing(ca keyPair, dnsNames []string, now time.Time, validity time.Duration) (keyPair, error) {
	caCert, caKey, err := ca.parse()
	if err != nil {
		return keyPair{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating serving key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return keyPair{}, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter // never outlive the issuer
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		NotBefore: now.Add(-time.Minute), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing serving certificate: %w", err)
	}
	return encode(der, key)
}

func encode(der []byte, key *ecdsa.PrivateKey) (keyPair, error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("encoding key: %w", err)
	}
	return keyPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

func (kp keyPair) parse() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cert, err := parseCert(kp.Cert)
	if err != nil {
		return nil, nil, err
	}
	b, _ := pem.Decode(kp.Key)
	if b == nil {
		return nil, nil, errors.New("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing key: %w", err)
	}
	return cert, key, nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate: %w", err)
	}
	return c, nil
}

// dueForRenewal reports whether two thirds of a certificate's lifetime have passed (or it
// cannot be read).
func dueForRenewal(certPEM []byte, now time.Time) bool {
	c, err := parseCert(certPEM)
	if err != nil {
		return true
	}
	life := c.NotAfter.Sub(c.NotBefore)
	return now.After(c.NotBefore.Add(life * 2 / 3))
}

// verifies reports whether serving was issued by ca for every name.
func verifies(ca, serving []byte, dnsNames []string, now time.Time) bool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return false
	}
	c, err := parseCert(serving)
	if err != nil {
		return false
	}
	for _, n := range dnsNames {
		if _, err := c.Verify(x509.VerifyOptions{DNSName: n, Roots: pool, CurrentTime: now}); err != nil {
			return false
		}
	}
	return true
}
