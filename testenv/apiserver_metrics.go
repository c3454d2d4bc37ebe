package testenv

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/discovery"
)

// mutatingVerbs are the apiserver_request_total verbs that write.
var mutatingVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// Writes returns how many write requests (create, update, patch, apply, delete) the control
// plane's kube-apiserver has served for the given resources (plural names, any group), read
// from its own apiserver_request_total counter. Two readings bracket a window: an unchanged
// count is server-side evidence that nothing wrote those resources in it. Writes of
// subresources (status) are not counted: they are the controllers' reports, not changes of
// the objects.
func (cp *ControlPlane) Writes(ctx context.Context, resources ...string) (int, error) {
	return cp.requests(ctx, mutatingVerbs, resources)
}

// StatusWrites returns how many writes of the status subresource of the given resources the
// kube-apiserver has served: the controllers' reports, which Writes leaves out. Two readings
// bracket a window as for Writes.
func (cp *ControlPlane) StatusWrites(ctx context.Context, resources ...string) (int, error) {
	families, err := cp.apiserverMetrics(ctx)
	if err != nil {
		return 0, err
	}
	return sumSubresource(families, mutatingVerbs, resources, "status"), nil
}

// Lists returns how many lists of the given resources (plural names, any group, any scope)
// the control plane's kube-apiserver has served, counted where they are served: LIST requests
// (apiserver_request_total) and watch-lists, the watches that start with every object
// (sendInitialEvents, which client-go's informers use when they can), once their initial
// events are out (apiserver_watch_list_duration_seconds). A watch-list still sending its
// initial events is not counted yet.
func (cp *ControlPlane) Lists(ctx context.Context, resources ...string) (int, error) {
	families, err := cp.apiserverMetrics(ctx)
	if err != nil {
		return 0, err
	}
	n := sumRequests(families, []string{"LIST"}, resources)
	for _, m := range families["apiserver_watch_list_duration_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" && slices.Contains(resources, l.GetValue()) {
				n += int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return n, nil
}

// requests sums apiserver_request_total over verbs and resources, subresources left out.
func (cp *ControlPlane) requests(ctx context.Context, verbs, resources []string) (int, error) {
	families, err := cp.apiserverMetrics(ctx)
	if err != nil {
		return 0, err
	}
	return sumRequests(families, verbs, resources), nil
}

// apiserverMetrics reads and parses the kube-apiserver's /metrics.
func (cp *ControlPlane) apiserverMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		return nil, fmt.Errorf("apiserver client: %w", err)
	}
	raw, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the apiserver's metrics: %w", err)
	}
	return families, nil
}

// sumRequests sums apiserver_request_total over verbs and resources, subresources left out.
func sumRequests(families map[string]*dto.MetricFamily, verbs, resources []string) int {
	return sumSubresource(families, verbs, resources, "")
}

// sumSubresource sums apiserver_request_total over verbs and resources for one subresource
// ("" for the objects themselves).
func sumSubresource(families map[string]*dto.MetricFamily, verbs, resources []string, want string) int {
	total := 0.0
	for _, m := range families["apiserver_request_total"].GetMetric() {
		var verb, resource, subresource string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			case "subresource":
				subresource = l.GetValue()
			}
		}
		if subresource == want && slices.Contains(resources, resource) && slices.Contains(verbs, verb) {
			total += m.GetCounter().GetValue()
		}
	}
	return int(total)
}
