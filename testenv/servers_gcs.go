package testenv

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

// GCS is fake-gcs-server, the emulator of the Cloud Storage JSON API, keeping objects in
// memory. Clients reach it with STORAGE_EMULATOR_HOST=Host or the endpoint Endpoint +
// "/storage/v1/" without authentication.
type GCS struct {
	*Process
	// Endpoint is the base URL (scheme, host and port).
	Endpoint string
	// Host is host:port, the form STORAGE_EMULATOR_HOST takes.
	Host string
}

// StartGCS starts fake-gcs-server over plain HTTP with the memory backend.
func StartGCS() (*GCS, error) {
	bin, err := ServerBinary("fake-gcs-server")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-gcs-")
	if err != nil {
		return nil, err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	endpoint := "http://" + host
	args := []string{"-scheme", "http", "-host", "127.0.0.1", "-port", fmt.Sprint(port), "-backend", "memory",
		"-external-url", endpoint, "-public-host", host, "-log-level", "warn"}
	client := &http.Client{Timeout: time.Second}
	ready := func() error {
		resp, err := client.Get(endpoint + "/storage/v1/b?project=test")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("listing buckets: %s", resp.Status)
		}
		return nil
	}
	p, err := StartProcess("fake-gcs-server", dir, bin, args, nil, ready)
	if err != nil {
		return nil, err
	}
	return &GCS{Process: p, Endpoint: endpoint, Host: host}, nil
}
