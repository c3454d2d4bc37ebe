package agentbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kollectWrites reads the API server's own count of the writes to Kollect objects
// (apiserver_request_total of group kollect.dev, by resource, subresource and verb): what an
// agent's start costs the API server in status updates, read from the server rather than
// from the agent.
func kollectWrites(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	body, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `group="kollect.dev"`) {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "apiserver_request_total{"), "} ")
		if !ok {
			continue
		}
		verb := label(labels, "verb")
		if verb == "GET" || verb == "LIST" || verb == "WATCH" {
			continue
		}
		key := verb + " " + label(labels, "resource")
		if sub := label(labels, "subresource"); sub != "" {
			key += "/" + sub
		}
		n, err := strconv.ParseFloat(value, 64)
		if err == nil {
			out[key] += n
		}
	}
	return out, sc.Err()
}

// label is one label's value in a Prometheus sample's label set (values here hold no quote).
func label(labels, name string) string {
	for _, pair := range strings.Split(labels, `",`) {
		if k, v, ok := strings.Cut(pair, `="`); ok && k == name {
			return strings.TrimSuffix(v, `"`)
		}
	}
	return ""
}

// writesSince formats the writes in after that were not in before, busiest first.
func writesSince(before, after map[string]float64) string {
	type kv struct {
		k string
		n float64
	}
	var all []kv
	var total float64
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			all = append(all, kv{k, d})
			total += d
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].k < all[j].k })
	parts := []string{fmt.Sprintf("%.0f in all", total)}
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %.0f", e.k, e.n))
	}
	return strings.Join(parts, ", ")
}

// saveAPIServerProfile saves the API server's CPU profile or execution trace (kind "profile"
// or "trace") over the next d into file (the kube-apiserver serves /debug/pprof to
// administrators by default), for where the agent's start costs the server its CPU.
func saveAPIServerProfile(ctx context.Context, cfg *rest.Config, kind string, d time.Duration, file string) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = d + 30*time.Second
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}
	body, err := cs.RESTClient().Get().AbsPath("/debug/pprof/"+kind).
		Param("seconds", strconv.Itoa(int(d.Seconds()))).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("profiling the API server: %w", err)
	}
	return os.WriteFile(file, body, 0o644)
}
