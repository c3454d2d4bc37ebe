package testenv

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The Azure Storage emulator's well-known development account: every Azurite, and every
// Azure tool's "UseDevelopmentStorage=true", knows it. It is no secret.
const (
	AzuriteDevAccount = "devstoreaccount1"
	AzuriteDevKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// azuriteSASVersion is the storage service version the account signatures Azurite mints are
// signed for (the string to sign below is that version's).
const azuriteSASVersion = "2021-08-06"

// Azurite is the Azure Storage emulator's blob service on 127.0.0.1, a stand-in for Azure
// Blob Storage, keeping its data in a fresh directory. Blob URLs are path-style:
// Endpoint/CONTAINER/BLOB, Endpoint ending in the account name.
type Azurite struct {
	*Process
	// Endpoint is the account's blob service URL, http(s)://127.0.0.1:PORT/ACCOUNT.
	Endpoint string
	// Account and Key are the one account the emulator serves and its shared key.
	Account, Key string
	// CAPEM is the authority of the server's certificate when started with TLS.
	CAPEM []byte
	// client trusts CAPEM.
	client *http.Client
}

// AzuriteOptions configure StartAzuriteWith.
type AzuriteOptions struct {
	// Account and Key replace the development account (AZURITE_ACCOUNTS): Key is base64.
	Account, Key string
	// TLS serves HTTPS with a certificate for 127.0.0.1 from a new CA (CAPEM).
	TLS bool
}

// StartAzurite starts the emulator's blob service with the development account.
func StartAzurite() (*Azurite, error) { return StartAzuriteWith(AzuriteOptions{}) }

// StartAzuriteWith starts the emulator's blob service alone (no queue or table service),
// telemetry off, accepting any API version the SDK sends.
func StartAzuriteWith(opts AzuriteOptions) (*Azurite, error) {
	bin, err := ServerBinary("azurite-blob")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-azurite-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, err
	}
	a := &Azurite{Account: AzuriteDevAccount, Key: AzuriteDevKey, client: &http.Client{Timeout: 30 * time.Second}}
	var env []string
	if opts.Account != "" {
		a.Account, a.Key = opts.Account, opts.Key
		env = append(env, "AZURITE_ACCOUNTS="+opts.Account+":"+opts.Key)
	}
	args := []string{"--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(port), "--location", data,
		"--disableTelemetry", "--skipApiVersionCheck"}
	scheme := "http"
	if opts.TLS {
		ca, cert, key, err := ServerCertificate(dir)
		if err != nil {
			return nil, err
		}
		args = append(args, "--cert", cert, "--key", key)
		a.CAPEM, scheme = ca, "https"
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		a.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := StartProcess("azurite", dir, bin, args, env, func() error {
		if err := tcpReady(addr)(); err != nil {
			return err
		}
		if log, _ := os.ReadFile(filepath.Join(dir, "server.log")); !strings.Contains(string(log), "successfully listens") {
			return fmt.Errorf("the blob service is not listening yet")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.Process = p
	a.Endpoint = scheme + "://" + addr + "/" + a.Account
	return a, nil
}

// AccountSAS mints an account shared access signature (the query string, without "?") for
// the blob service, on containers and blobs, with permissions (letters of "racwdl": read,
// add, create, write, delete, list), valid for an hour. It is signed here with the account
// key, by the rules of the storage service, not by any Azure SDK.
func (a *Azurite) AccountSAS(permissions string) string {
	start := time.Now().UTC().Add(-5 * time.Minute).Format(time.RFC3339)
	expiry := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	toSign := strings.Join([]string{a.Account, permissions, "b", "co", start, expiry, "", "", azuriteSASVersion, "", ""}, "\n")
	key, err := base64.StdEncoding.DecodeString(a.Key)
	if err != nil {
		panic(fmt.Sprintf("azurite account key is not base64: %v", err))
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(toSign))
	q := url.Values{"sv": {azuriteSASVersion}, "ss": {"b"}, "srt": {"co"}, "sp": {permissions}, "st": {start}, "se": {expiry},
		"sig": {base64.StdEncoding.EncodeToString(mac.Sum(nil))}}
	return q.Encode()
}

// Do sends a Blob REST API request to path (under Endpoint, such as "/c?restype=container"),
// authorized by a new account SAS with every permission, and returns the status and body.
func (a *Azurite) Do(method, path string, body io.Reader, header http.Header) (int, []byte, http.Header, error) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	req, err := http.NewRequest(method, a.Endpoint+path+sep+a.AccountSAS("racwdl"), body)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("x-ms-version", azuriteSASVersion)
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, resp.Header, err
}

// CreateContainer creates a container through the REST API.
func (a *Azurite) CreateContainer(name string) error {
	st, body, _, err := a.Do(http.MethodPut, "/"+name+"?restype=container", nil, nil)
	if err != nil {
		return err
	}
	if st != http.StatusCreated {
		return fmt.Errorf("creating container %s: %d %s", name, st, body)
	}
	return nil
}
