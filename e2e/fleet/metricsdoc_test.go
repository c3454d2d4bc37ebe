package fleet

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// hubMetricName is a hub metric's name as docs/hub.md writes it.
var hubMetricName = regexp.MustCompile("`(kollect_hub_[a-z_]+)")

// documentedHubMetrics returns every hub metric docs/hub.md names, and whether it may be
// absent from /metrics: a metric with labels has no series until something sets one (a sink
// error, a preview answer), one without labels is always served.
func documentedHubMetrics(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "hub.md"))
	if err != nil {
		t.Fatal(err)
	}
	mayBeAbsent := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		for _, m := range hubMetricName.FindAllStringSubmatch(line, -1) {
			labelled := false
			if cells := strings.Split(line, "|"); len(cells) > 3 && strings.Contains(cells[1], m[1]) {
				labels := strings.TrimSpace(cells[2])
				labelled = !strings.HasPrefix(labels, "—")
			}
			mayBeAbsent[m[1]] = mayBeAbsent[m[1]] || labelled
		}
	}
	return mayBeAbsent
}

// checkDocumentedMetrics: every hub metric docs/hub.md names is served by h, the running
// kollect-hub binary, unless it has labels and no series yet.
func (f *haFleetT) checkDocumentedMetrics(t *testing.T, h *hub) {
	t.Helper()
	raw, err := f.curl(t, h, h.url()+"/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", h.addr, err)
	}
	served := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			served[strings.Fields(name)[0]] = true
		}
	}
	documented := documentedHubMetrics(t)
	if len(documented) < 10 {
		t.Fatalf("docs/hub.md names %d hub metrics: the parser lost them", len(documented))
	}
	for name, mayBeAbsent := range documented {
		if !served[name] && !mayBeAbsent {
			t.Errorf("docs/hub.md names %s, which the running kollect-hub does not serve", name)
		}
	}
}
