package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Prometheus is a Prometheus server (Debian's) on 127.0.0.1, for tests that evaluate the
// documented alerts against what the shipped binaries serve.
type Prometheus struct {
	*Process
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string
}

// PrometheusBinary is where Debian's prometheus package installs the server.
const PrometheusBinary = "/usr/bin/prometheus"

// StartPrometheus writes config (prometheus.yml) and rules (file name → rule-file YAML) to a
// private directory and starts Prometheus with them; config refers to the rule files by their
// bare names. It returns once /-/ready answers.
func StartPrometheus(config string, rules map[string]string) (*Prometheus, error) {
	if _, err := os.Stat(PrometheusBinary); err != nil {
		return nil, fmt.Errorf("Prometheus is not installed (%w): run hack/ensure-servers.sh", err)
	}
	dir, err := os.MkdirTemp("", "kollect-prometheus-")
	if err != nil {
		return nil, err
	}
	files := map[string]string{"prometheus.yml": config}
	for name, body := range rules {
		files[name] = body
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	port, err := FreePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--web.console.templates=" + dir, "--web.console.libraries=" + dir}
	ready := func() error {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	}
	p, err := StartProcess("prometheus", dir, PrometheusBinary, args, nil, ready)
	if err != nil {
		return nil, err
	}
	return &Prometheus{Process: p, URL: base}, nil
}

// API calls a GET endpoint of the HTTP API (path like "/api/v1/alerts") and decodes its
// "data" into out.
func (p *Prometheus) API(ctx context.Context, path string, query url.Values, out any) error {
	u := p.URL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status, Error string
		Data          json.RawMessage
	}
	if err := json.Unmarshal(raw, &env); err != nil || env.Status != "success" {
		return fmt.Errorf("prometheus %s: %s: %s", path, resp.Status, raw)
	}
	return json.Unmarshal(env.Data, out)
}

// Sample is one series of an instant query's vector result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query evaluates an instant PromQL query now.
func (p *Prometheus) Query(ctx context.Context, promql string) ([]Sample, error) {
	var data struct {
		ResultType string
		Result     []struct {
			Metric map[string]string
			Value  [2]any
		}
	}
	if err := p.API(ctx, "/api/v1/query", url.Values{"query": {promql}, "time": {fmt.Sprint(time.Now().Unix())}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %s, want vector", promql, data.ResultType)
	}
	out := make([]Sample, 0, len(data.Result))
	for _, r := range data.Result {
		var v float64
		if s, ok := r.Value[1].(string); ok {
			if _, err := fmt.Sscan(s, &v); err != nil {
				return nil, fmt.Errorf("query %q: value %q: %w", promql, s, err)
			}
		}
		out = append(out, Sample{Metric: r.Metric, Value: v})
	}
	return out, nil
}
