package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"kollect.dev/proto/capin"
)

// Identity is the hub's serving certificate and the fingerprint agents pin.
type Identity struct {
	Certificate tls.Certificate
	// CAPEM is the CA certificate (or, for a brought certificate, the last certificate of its
	// chain) in PEM, served at /ca.crt.
	CAPEM []byte
	// Fingerprint is "sha256:<hex>" of CAPEM's DER (capin.Fingerprint), the pin agents and
	// the CLI verify with capin.ClientConfig.
	Fingerprint string
}

// Load reads a brought certificate chain and key.
func Load(certFile, keyFile string) (*Identity, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate %s: %w", certFile, err)
	}
	top := cert.Certificate[len(cert.Certificate)-1]
	return &Identity{Certificate: cert, CAPEM: encodeCert(top), Fingerprint: capin.Fingerprint(top)}, nil
}

// File names in the data directory.
const (
	caCertFile  = "ca.crt"
	caKeyFile   = "ca.key"
	tlsCertFile = "tls.crt"
	tlsKeyFile  = "tls.key"
)

// LoadOrCreate returns the hub's own CA and serving certificate from dir, creating the CA on
// first start and (re)issuing the serving certificate when it is missing, expires within 30
// days or lacks one of hosts (DNS names or IPs). The CA, and so the pinned fingerprint, never
// changes once created.
func LoadOrCreate(dir string, hosts []string, now time.Time) (*Identity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory %s: %w", dir, err)
	}
	caCert, caKey, err := loadOrCreateCA(dir, now)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsCertFile), filepath.Join(dir, tlsKeyFile))
	if err != nil || !fits(cert, caCert, hosts, now) {
		if cert, err = issue(dir, caCert, caKey, hosts, now); err != nil {
			return nil, err
		}
	}
	return &Identity{Certificate: cert, CAPEM: encodeCert(caCert.Raw), Fingerprint: capin.Fingerprint(caCert.Raw)}, nil
}

func loadOrCreateCA(dir string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err == nil {
		caCert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return nil, nil, fmt.Errorf("parsing %s: %w", certPath, err)
		}
		key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
		if !ok {
			return nil, nil, fmt.Errorf("%s: CA key is not ECDSA", keyPath)
		}
		return caCert, key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("loading hub CA from %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Kollect hub CA", Organization: []string{"Kollect"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return nil, nil, err
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing new CA: %w", err)
	}
	return caCert, key, nil
}

// fits reports whether a serving certificate is signed by the CA, valid for 30 more days and
// names every host.
func fits(cert tls.Certificate, ca *x509.Certificate, hosts []string, now time.Time) bool {
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil || leaf.CheckSignatureFrom(ca) != nil || now.Add(30*24*time.Hour).After(leaf.NotAfter) {
		return false
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
				return false
			}
		} else if !slices.Contains(leaf.DNSNames, h) {
			return false
		}
	}
	return true
}

func issue(dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kollect-hub"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issuing serving certificate: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, tlsCertFile), filepath.Join(dir, tlsKeyFile)
	// The chain file holds the CA too, so clients that pin receive it in the handshake.
	if err := writePair(certPath, keyPath, append(encodeCert(der), encodeCert(ca.Raw)...), key); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("loading new serving certificate: %w", err)
	}
	return cert, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// writePair writes a certificate (DER or PEM) and its key; the key is readable by the owner only.
func writePair(certPath, keyPath string, cert []byte, key *ecdsa.PrivateKey) error {
	if len(cert) > 0 && cert[0] != '-' {
		cert = encodeCert(cert)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding key: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", keyPath, err)
	}
	if err := os.WriteFile(certPath, cert, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", certPath, err)
	}
	return nil
}
