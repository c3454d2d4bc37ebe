package testenv

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"
)

// BigQuery is goccy/bigquery-emulator (built from hack/servers/bigquery-emulator): the BigQuery
// REST API (datasets, tables, tabledata.insertAll, jobs.query) over ZetaSQL on an in-memory
// SQLite database, plus the Storage Read/Write API over gRPC. It runs every job in one SQLite
// transaction, but not every statement real BigQuery accepts (see docs/sinks/bigquery.md).
//
// Clients reach it with option.WithEndpoint(Endpoint) and option.WithoutAuthentication().
type BigQuery struct {
	*Process
	// Project is the one project the emulator serves.
	Project string
	// Endpoint is the REST base URL (scheme, host and port).
	Endpoint string
	// GRPCAddr is host:port of the Storage API.
	GRPCAddr string
}

// StartBigQuery starts the emulator for project ("test" when empty) on two free loopback
// ports, HTTP and gRPC.
func StartBigQuery(project string) (*BigQuery, error) {
	if project == "" {
		project = "test"
	}
	bin, err := ServerBinary("bigquery-emulator")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	grpcPort, err := FreePort()
	for err == nil && grpcPort == port {
		grpcPort, err = FreePort()
	}
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-bigquery-")
	if err != nil {
		return nil, err
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"--project=" + project, "--host=127.0.0.1", "--port=" + strconv.Itoa(port),
		"--grpc-port=" + strconv.Itoa(grpcPort), "--log-level=warn"}
	client := &http.Client{Timeout: time.Second}
	ready := func() error {
		resp, err := client.Get(endpoint + "/bigquery/v2/projects/" + project + "/datasets")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("listing datasets: %s", resp.Status)
		}
		return nil
	}
	p, err := StartProcess("bigquery-emulator", dir, bin, args, nil, ready)
	if err != nil {
		return nil, err
	}
	return &BigQuery{Process: p, Project: project, Endpoint: endpoint, GRPCAddr: fmt.Sprintf("127.0.0.1:%d", grpcPort)}, nil
}
