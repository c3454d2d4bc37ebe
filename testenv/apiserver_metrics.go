package testenv

import (
	"bytes"
	"context"
	"fmt"
	"slices"

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

// Lists returns how many LIST requests the control plane's kube-apiserver has served for the
// given resources (plural names, any group, any scope), from its own apiserver_request_total:
// what a client's informers cost it, counted where they are served.
func (cp *ControlPlane) Lists(ctx context.Context, resources ...string) (int, error) {
	return cp.requests(ctx, []string{"LIST"}, resources)
}

// requests sums apiserver_request_total over verbs and resources, subresources left out.
func (cp *ControlPlane) requests(ctx context.Context, verbs, resources []string) (int, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		return 0, fmt.Errorf("apiserver client: %w", err)
	}
	raw, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return 0, fmt.Errorf("parsing the apiserver's metrics: %w", err)
	}
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
		if subresource == "" && slices.Contains(resources, resource) && slices.Contains(verbs, verb) {
			total += m.GetCounter().GetValue()
		}
	}
	return int(total), nil
}
