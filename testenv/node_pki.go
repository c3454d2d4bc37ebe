package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// clusterPKI is the certificate authority of a node cluster and what it signs: the API
// server's serving certificate (valid for the `kubernetes` Service's ClusterIP, which is what
// pods dial, and the host-side address), the client certificates of every component, the
// kubelet's serving certificate, and the service-account signing key.
type clusterPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newClusterPKI(dir string) (*clusterPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kollect node cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating the cluster CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &clusterPKI{dir: dir, ca: ca, caKey: key, serial: 1}
	if err := os.WriteFile(p.caFile(), pemCert(der), 0o644); err != nil {
		return nil, err
	}
	// The service-account token signer: RSA, as kube-apiserver's key-file flags expect PEM
	// keys of any kind but the issuer discovery document is simplest with RSA.
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *clusterPKI) caFile() string { return filepath.Join(p.dir, "ca.crt") }

// caPEM is the CA certificate in PEM.
func (p *clusterPKI) caPEM() []byte { return pemCert(p.ca.Raw) }

// issue signs a certificate named name (files NAME.crt and NAME.key in the PKI directory): a
// client certificate when ips and dns are empty, else a serving certificate for them.
func (p *clusterPKI) issue(name, cn string, orgs []string, ips []net.IP, dns []string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses: ips, DNSNames: dns}
	if len(ips) > 0 || len(dns) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return "", "", fmt.Errorf("signing %s: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	if err := os.WriteFile(certFile, pemCert(der), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// kubeconfig writes NAME.kubeconfig for a client certificate issued to cn in orgs, reaching
// server.
func (p *clusterPKI) kubeconfig(name, cn string, orgs []string, server string) (string, error) {
	certFile, keyFile, err := p.issue(name, cn, orgs, nil, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(p.dir, name+".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: node-cluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: %s
  context: {cluster: node-cluster, user: %s}
current-context: %s
`, server, p.caFile(), name, certFile, keyFile, name, name, name)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
