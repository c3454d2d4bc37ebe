package fleetsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// object is the little of a bundle's object the simulated evaluation reads.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Target struct {
			Group, Version, Kind string
		} `json:"target"`
		Attributes []struct {
			Name string `json:"name"`
		} `json:"attributes"`
		ProfileRef struct {
			Name string `json:"name"`
		} `json:"profileRef"`
	} `json:"spec"`
}

func (o object) ref() string {
	if o.Metadata.Namespace == "" {
		return o.Metadata.Name
	}
	return o.Metadata.Namespace + "/" + o.Metadata.Name
}

// answerPreview evaluates a preview as a plausible agent would and answers with ReportPreview:
// every target of the manifests matches most of the cluster's first inventory's items, the
// first attribute of each fails on PreviewErrors objects, and every inventory holds every
// target's rows at about 220 bytes a row.
func (a *agent) answerPreview(ctx context.Context, p *fleetv1.PreviewRequest) error {
	start := time.Now()
	res := &fleetv1.PreviewResult{PreviewId: p.GetId(), Cluster: a.spec.Name, AgentVersion: a.spec.AgentVersion,
		DistinctValuesLimit: 1000, SamplesRefused: p.GetMaxSamples() > 0}
	objs, err := decodeObjects(p.GetManifests())
	if err != nil {
		res.Error = err.Error()
	}
	profiles := map[string]object{}
	for _, o := range objs {
		if o.Kind == "KollectProfile" {
			profiles[o.ref()] = o
		}
	}
	listed := int64(100)
	if len(a.spec.Inventories) > 0 {
		listed = a.spec.Inventories[0].Items
	}
	var targets []string
	var rows int64
	for _, o := range objs {
		if o.Kind != "KollectTarget" && o.Kind != "KollectClusterTarget" {
			continue
		}
		profileRef := o.Spec.ProfileRef.Name
		if o.Metadata.Namespace != "" {
			profileRef = o.Metadata.Namespace + "/" + profileRef
		}
		prof, ok := profiles[profileRef]
		if !ok { // a cluster-scoped target names the profile's namespace, the manifest may not
			for _, cand := range profiles {
				if cand.Metadata.Name == o.Spec.ProfileRef.Name {
					prof = cand
				}
			}
		}
		matched := listed * 9 / 10
		failed := min(int64(a.spec.PreviewErrors), matched)
		t := &fleetv1.PreviewTarget{Target: o.ref(), Profile: profileRef, Group: prof.Spec.Target.Group,
			Version: prof.Spec.Target.Version, Kind: prof.Spec.Target.Kind,
			KindState: fleetv1.PreviewKindState_PREVIEW_KIND_STATE_SERVED, ObjectsListed: listed,
			ObjectsMatched: matched, Rows: matched - failed, Failed: failed}
		for i, attr := range prof.Spec.Attributes {
			pa := &fleetv1.PreviewAttribute{Name: attr.Name, Values: t.Rows, DistinctValues: min(t.Rows, int64(3+5*i))}
			if i == 0 && failed > 0 {
				pa.Errors = failed
				for j := range min(failed, 3) {
					pa.ErrorSamples = append(pa.ErrorSamples, &fleetv1.PreviewObjectError{
						Object:  fmt.Sprintf("team-a/legacy-%d", j),
						Message: fmt.Sprintf("%s: no such key", attr.Name)})
				}
			}
			t.Attributes = append(t.Attributes, pa)
		}
		res.Targets = append(res.Targets, t)
		targets = append(targets, t.Target)
		rows += t.Rows
	}
	sort.Strings(targets)
	for _, o := range objs {
		if o.Kind == "KollectInventory" || o.Kind == "KollectClusterInventory" {
			res.Inventories = append(res.Inventories, &fleetv1.PreviewInventory{Inventory: o.ref(), Targets: targets,
				Rows: rows, EstimatedBytes: rows * 220})
		}
	}
	if res.Error != "" {
		res.Targets, res.Inventories = nil, nil
	}
	res.Took, res.EvaluatedAt = durationpb.New(time.Since(start)), timestamppb.Now()
	return a.call(func(api fleetv1connect.AgentServiceClient) error {
		_, err := api.ReportPreview(ctx, connect.NewRequest(&fleetv1.ReportPreviewRequest{ClusterName: a.spec.Name, Result: res}))
		return err
	})
}

// decodeObjects reads multi-document YAML.
func decodeObjects(manifests string) ([]object, error) {
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifests)), 4096)
	var out []object
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding the manifests: %w", err)
		}
		if o.Kind != "" {
			out = append(out, o)
		}
	}
}
