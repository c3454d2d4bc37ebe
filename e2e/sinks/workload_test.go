package sinks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

const (
	cluster   = "east"
	inventory = "fleet"
	// sinkNS holds the profiles, the sinks and their Secrets.
	sinkNS = "kollect-sinks"
)

// teams are the workload namespaces; changeNS is the one the modify, delete and add touch, so
// that the documents and rows of the others must stay exactly as they were.
var (
	teams    = []string{"team-a", "team-b", "team-c"}
	changeNS = "team-b"
)

// row is one exported row in a canonical, client-independent form.
type row struct {
	Cluster, Inventory, Target, Group, Version, Kind, Namespace, Name, UID string
	// Profile and ProfileGeneration are the row's provenance.
	Profile           string
	ProfileGeneration int64
	// Attributes is the attribute object re-encoded with sorted keys.
	Attributes string
}

func (r row) key() string { return r.Target + "/" + r.UID }

func (r row) String() string {
	return fmt.Sprintf("%s/%s %s %s/%s %s/%s/%s (%s) %s@%d %s", r.Cluster, r.Inventory, r.Target, r.Group, r.Version,
		r.Kind, r.Namespace, r.Name, r.UID, r.Profile, r.ProfileGeneration, r.Attributes)
}

// rowSet is rows by key (target/uid).
type rowSet map[string]row

// canonJSON re-encodes a JSON value with sorted keys and numbers as written (3 and 3.0 stay
// distinct only if the writer wrote them so; integral floats are normalised to integers
// because some stores keep every number as a double).
func canonJSON(raw []byte) (string, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("decoding %q: %w", raw, err)
	}
	v = normNumbers(v)
	out, err := json.Marshal(v)
	return string(out), err
}

func normNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil && f == float64(int64(f)) {
			return int64(f)
		}
		return x
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
		return x
	case map[string]any:
		for k, e := range x {
			x[k] = normNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normNumbers(e)
		}
	}
	return v
}

// diffRows describes how got differs from want, or "" when they are equal.
func diffRows(want, got rowSet) string {
	var out []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, "missing "+w.String())
		case g != w:
			out = append(out, "differs: want "+w.String()+"\n           got  "+g.String())
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "unexpected "+g.String())
		}
	}
	sort.Strings(out)
	if len(out) > 8 {
		out = append(out[:8], fmt.Sprintf("… and %d more", len(out)-8))
	}
	return strings.Join(out, "\n  ")
}

// seedWorkloads creates the namespaces and their objects: per team 3 Deployments,
// 3 ConfigMaps and 2 Services (24 objects).
func seedWorkloads(ctx context.Context, c client.Client) error {
	for i, ns := range teams {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		for j, app := range []string{"web", "api", "worker"} {
			if err := c.Create(ctx, deployment(ns, app, int32(i+j+1), fmt.Sprintf("registry.example/%s:%d.%d", app, i+1, j))); err != nil {
				return err
			}
			if err := c.Create(ctx, configMap(ns, app+"-config", map[string]string{"mode": []string{"blue", "green", "canary"}[j], "team": ns})); err != nil {
				return err
			}
		}
		for j, app := range []string{"web", "api"} {
			if err := c.Create(ctx, service(ns, app, 80+int32(j), 9000+int32(i))); err != nil {
				return err
			}
		}
	}
	return nil
}

func deployment(ns, name string, replicas int32, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name, "team": ns}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "main", Image: image},
					{Name: "sidecar", Image: "registry.example/proxy:2.1"},
				}},
			},
		},
	}
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func service(ns, name string, ports ...int32) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}}}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p, TargetPort: intstr.FromInt32(p)})
	}
	return svc
}

// kollectConfig is the profiles and cluster targets (namespace-independent part).
const kollectConfig = `
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: deployments, namespace: kollect-sinks}
spec:
  target: {group: apps, version: v1, kind: Deployment}
  attributes:
    - {name: replicas, jsonPath: "{.spec.replicas}", type: int}
    - {name: images, cel: "object.spec.template.spec.containers.map(c, c.image)", type: list}
    - {name: team, jsonPath: "{.metadata.labels.team}"}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: configmaps, namespace: kollect-sinks}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: mode, jsonPath: "{.data.mode}"}
    - {name: entries, cel: "size(object.data)", type: int}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: services, namespace: kollect-sinks}
spec:
  target: {version: v1, kind: Service}
  attributes:
    - {name: type, jsonPath: "{.spec.type}"}
    - {name: ports, cel: "object.spec.ports.map(p, p.port)", type: list}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: deployments, labels: {kollect.dev/inventory: fleet}}
spec:
  profileRef: {name: deployments, namespace: kollect-sinks}
  namespaces: {include: [team-a, team-b, team-c]}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: configmaps, labels: {kollect.dev/inventory: fleet}}
spec:
  profileRef: {name: configmaps, namespace: kollect-sinks}
  namespaces: {include: [team-a, team-b, team-c]}
  names: {exclude: [kube-root-ca.crt]}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: services, labels: {kollect.dev/inventory: fleet}}
spec:
  profileRef: {name: services, namespace: kollect-sinks}
  namespaces: {include: [team-a, team-b, team-c]}
`

// applyYAML creates every document of a multi-document YAML stream.
func applyYAML(ctx context.Context, c client.Client, stream string) error {
	for _, doc := range strings.Split(stream, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", doc, err)
		}
		if err := c.Create(ctx, obj.(client.Object)); err != nil {
			return fmt.Errorf("creating %s: %w", doc, err)
		}
	}
	return nil
}

// expectedRows computes the rows from the cluster's objects, read with the control plane's
// client: what every sink must hold.
func expectedRows(ctx context.Context, c client.Client) (rowSet, error) {
	want := rowSet{}
	// Each target's profile has the target's name; the rows carry its current generation.
	generations := map[string]int64{}
	for _, name := range []string{"deployments", "configmaps", "services"} {
		p := &kollectv1.KollectProfile{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: sinkNS, Name: name}, p); err != nil {
			return nil, err
		}
		generations[name] = p.Generation
	}
	add := func(target, group, kind string, m metav1.Object, attrs map[string]any) error {
		raw, err := json.Marshal(attrs)
		if err != nil {
			return err
		}
		a, err := canonJSON(raw)
		if err != nil {
			return err
		}
		version := "v1"
		r := row{Cluster: cluster, Inventory: inventory, Target: target, Group: group, Version: version, Kind: kind,
			Namespace: m.GetNamespace(), Name: m.GetName(), UID: string(m.GetUID()),
			Profile: sinkNS + "/" + target, ProfileGeneration: generations[target], Attributes: a}
		want[r.key()] = r
		return nil
	}
	for _, ns := range teams {
		var deps appsv1.DeploymentList
		if err := c.List(ctx, &deps, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for i := range deps.Items {
			d := &deps.Items[i]
			var images []string
			for _, ct := range d.Spec.Template.Spec.Containers {
				images = append(images, ct.Image)
			}
			if err := add("deployments", "apps", "Deployment", d, map[string]any{"replicas": *d.Spec.Replicas, "images": images, "team": d.Labels["team"]}); err != nil {
				return nil, err
			}
		}
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for i := range cms.Items {
			cm := &cms.Items[i]
			if cm.Name == "kube-root-ca.crt" {
				continue
			}
			if err := add("configmaps", "", "ConfigMap", cm, map[string]any{"mode": cm.Data["mode"], "entries": len(cm.Data)}); err != nil {
				return nil, err
			}
		}
		var svcs corev1.ServiceList
		if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for i := range svcs.Items {
			s := &svcs.Items[i]
			var ports []int32
			for _, p := range s.Spec.Ports {
				ports = append(ports, p.Port)
			}
			if err := add("services", "", "Service", s, map[string]any{"type": string(s.Spec.Type), "ports": ports}); err != nil {
				return nil, err
			}
		}
	}
	return want, nil
}

// crdSinkTypes reads the sink types the CRDs offer: the spec.type enum of every *sinks CRD.
func crdSinkTypes(root string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "api", "crds", "*sinks.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no sink CRDs under %s/api/crds: %v", root, err)
	}
	types := map[string]string{} // type -> CRD kind
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd struct {
			Spec struct {
				Names    struct{ Kind string }
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema struct {
							Properties map[string]struct {
								Properties map[string]struct {
									Enum []string
								}
							}
						} `json:"openAPIV3Schema"`
					}
				}
			}
		}
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, v := range crd.Spec.Versions {
			enum := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["type"].Enum
			if len(enum) == 0 {
				return nil, fmt.Errorf("%s: no spec.type enum", f)
			}
			for _, t := range enum {
				types[t] = crd.Spec.Names.Kind
			}
		}
	}
	return types, nil
}

// decoder decodes YAML of the Kollect kinds and the built-in ones into typed objects.
var decoder = serializer.NewCodecFactory(testenv.Scheme).UniversalDeserializer()
