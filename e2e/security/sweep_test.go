package security

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// seen is everything collected from one place a user or the hub can look: where (a file,
// an object, an endpoint) and what it showed.
type seen struct{ where, text string }

// plant is a value that must not show in some places.
type plant struct {
	name, value string
}

// hits fails the test once per source that shows a planted value, naming the source and the
// line around the hit with every planted value masked (the test's own output must not become
// the leak). It returns how many sources it searched, to report coverage.
func hits(t *testing.T, what string, sources []seen, plants ...plant) int {
	t.Helper()
	mask := func(s string) string {
		for _, p := range plants {
			s = strings.ReplaceAll(s, p.value, "<"+p.name+">")
		}
		return s
	}
	for _, src := range sources {
		for _, p := range plants {
			i := strings.Index(src.text, p.value)
			if i < 0 {
				continue
			}
			start := strings.LastIndexByte(src.text[:i], '\n') + 1
			end := strings.IndexByte(src.text[i:], '\n')
			if end < 0 {
				end = len(src.text)
			} else {
				end += i
			}
			// The excerpt is cut around the hit after masking, so that no cut leaves part of
			// a planted value unmasked; binary bytes (SQLite pages) print as dots.
			before, after := mask(src.text[start:i]), mask(src.text[i+len(p.value):end])
			before, after = before[max(0, len(before)-300):], after[:min(len(after), 300)]
			excerpt := strings.Map(func(r rune) rune {
				if r < ' ' || r == utf8.RuneError {
					return '.'
				}
				return r
			}, before+"<"+p.name+">"+after)
			t.Errorf("%s: %s shows the planted %s (%d times); line %d: %s", what, src.where, p.name,
				strings.Count(src.text, p.value), strings.Count(src.text[:i], "\n")+1, excerpt)
		}
	}
	return len(sources)
}

// apiObjects returns every object the API server serves, one source per object: the Kollect
// kinds' status (and metadata), every other kind whole. Secrets are left out (they hold the
// credentials by design), and so are the specs of Kollect objects unless withSpecs: the test
// wrote the inline credentials there itself, and a spec is only what its author put in.
func apiObjects(ctx context.Context, cfg *rest.Config, withSpecs bool) ([]seen, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var out []seen
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !canList(r) || (gv.Group == "" && r.Name == "secrets") {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", gv.WithResource(r.Name), err)
			}
			for _, it := range items.Items {
				if gv.Group == "kollect.dev" && !withSpecs {
					unstructured.RemoveNestedField(it.Object, "spec")
				}
				raw, err := json.Marshal(it.Object)
				if err != nil {
					return nil, err
				}
				where := r.Name + "." + gv.String() + " " + it.GetName()
				if ns := it.GetNamespace(); ns != "" {
					where = r.Name + "." + gv.String() + " " + ns + "/" + it.GetName()
				}
				out = append(out, seen{where, string(raw)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out, nil
}

func canList(r metav1.APIResource) bool {
	for _, v := range r.Verbs {
		if v == "list" {
			return true
		}
	}
	return false
}

// dirFiles returns every regular file under dir, read as bytes, one source per file.
func dirFiles(dir, label string) ([]seen, error) {
	var out []seen
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, seen{label + " " + rel, string(raw)})
		return nil
	})
	return out, err
}

// scrape reads an HTTP endpoint of a local process (the agent's /metrics).
func scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		return sb.String(), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return sb.String(), nil
}

// eventSources lists core/v1 and events.k8s.io/v1 Events of every namespace, one source each.
func eventSources(t *testing.T, ctx context.Context, c client.Client) []seen {
	var core corev1.EventList
	must(t, c.List(ctx, &core))
	var ev eventsv1.EventList
	must(t, c.List(ctx, &ev))
	var out []seen
	for _, e := range core.Items {
		raw, _ := json.Marshal(e)
		out = append(out, seen{"core/v1 Event " + e.Namespace + "/" + e.Name, string(raw)})
	}
	for _, e := range ev.Items {
		raw, _ := json.Marshal(e)
		out = append(out, seen{"events.k8s.io/v1 Event " + e.Namespace + "/" + e.Name, string(raw)})
	}
	if len(core.Items) == 0 {
		t.Error("no Events at all: the search of Events cannot prove anything")
	}
	return out
}

// hubAnswers reads what the dashboard and the CLI read from the hub: FleetService answers as
// JSON, the first messages of its WatchFleet stream, and /metrics on the API port.
func hubAnswers(t *testing.T, ctx context.Context, h *hub) []seen {
	var out []seen
	for _, q := range []struct {
		method string
		in     any
	}{
		{"ListClusters", map[string]any{}},
		{"GetCluster", map[string]any{"name": clusterName}},
		{"ListHeartbeats", map[string]any{"cluster": clusterName, "limit": 100}},
		{"GetFleetHealth", map[string]any{}},
		{"ListBundles", map[string]any{}},
		{"ListAuditEvents", map[string]any{"limit": 1000}},
		{"ListBootstrapTokens", map[string]any{}},
	} {
		raw, err := h.call(ctx, q.method, q.in)
		must(t, err)
		out = append(out, seen{"the hub's " + q.method + " answer", string(raw)})
	}
	out = append(out, seen{"the hub's WatchFleet stream", watchFleet(t, ctx, h)})
	if code, body, err := h.get(ctx, "/metrics"); err == nil {
		t.Logf("the hub's /metrics on its API port: HTTP %d, %d bytes", code, len(body))
		out = append(out, seen{fmt.Sprintf("the hub's /metrics (HTTP %d)", code), string(body)})
	}
	return out
}

// watchFleet reads WatchFleet's first messages (Connect streaming, JSON): the snapshot the
// dashboard starts from. The stream stays open: reading ends with the request's context.
func watchFleet(t *testing.T, ctx context.Context, h *hub) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	body := []byte("{}")
	env := make([]byte, 5)
	binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+h.addr+"/kollect.fleet.v1.FleetService/WatchFleet",
		bytes.NewReader(append(env, body...)))
	must(t, err)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Authorization", "Bearer "+h.adminToken)
	resp, err := h.http.Do(req)
	must(t, err)
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if sb.Len() == 0 {
		t.Errorf("WatchFleet sent nothing (HTTP %s)", resp.Status)
	}
	return sb.String()
}
