package agentbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kind is one kind of seeded object: its profile and target name, what a tenant's scope must
// allow, the profile's spec, and how the i-th object of the kind looks.
type kind struct {
	name      string // profile and target name
	kind      string // the Kubernetes kind, as kollect_watch_lists_total labels it
	scopeRule string // the KollectScope allowedKinds entry
	profile   string // the KollectProfile spec
	exclude   string // the target's names.exclude, if any
	object    func(ns string, i int) client.Object
}

// The kinds of the mixed shape, as a cluster holds them: many small ConfigMaps, fewer but much
// larger Deployments (what a Helm chart renders, with the managedFields the API server adds),
// and custom resources of a CRD. mixShare says how many of every ten objects are of each kind.
var (
	configMaps = kind{name: "configmaps", kind: "ConfigMap", scopeRule: "{kind: ConfigMap}", profile: profileSpec,
		exclude: "kube-root-ca.crt", object: configMap}
	deployments = kind{name: "deployments", kind: "Deployment", scopeRule: "{group: apps, kind: Deployment}", profile: `
spec:
  target: {group: apps, version: v1, kind: Deployment}
  attributes:
    - {name: app, cel: "object.metadata.labels['app.kubernetes.io/name']"}
    - {name: image, cel: "object.spec.template.spec.containers[0].image"}
    - {name: replicas, jsonPath: "{.spec.replicas}", type: int}
    - {name: cpu, cel: "object.spec.template.spec.containers[0].resources.requests.cpu"}`, object: deployment}
	widgets = kind{name: "widgets", kind: "Widget", scopeRule: "{group: bench.kollect.dev, kind: Widget}", profile: `
spec:
  target: {group: bench.kollect.dev, version: v1, kind: Widget}
  attributes:
    - {name: owner, jsonPath: "{.spec.owner}"}
    - {name: size, jsonPath: "{.spec.size}", type: int}
    - {name: tags, cel: "size(object.spec.tags)", type: int}`, object: widget}

	mixed    = []kind{configMaps, deployments, widgets}
	mixShare = []int{6, 3, 1}
)

// kindOf is the kind of the i-th seeded object and its namespace: round-robin over the
// namespaces, and over the kinds by mixShare within each namespace, so that every namespace
// holds the same mix.
func (s shape) kindOf(i int) (kind, string) {
	ns := namespace(i % s.namespaces)
	if kinds := s.kindList(); len(kinds) == 1 {
		return kinds[0], ns
	}
	slot := (i / s.namespaces) % 10
	for k, share := range mixShare {
		if slot < share {
			return s.kinds[k], ns
		}
		slot -= share
	}
	panic("mixShare does not sum to 10")
}

// configMap is a small ConfigMap: two labels, two data entries, about 300 bytes stored.
func configMap(ns string, i int) client.Object {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("cm-%07d", i),
			Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%50), "tier": []string{"web", "db", "cache"}[i%3]},
		},
		Data: map[string]string{"mode": []string{"blue", "green"}[i%2], "replicas": fmt.Sprint(i % 7)},
	}
}

// deployment is what a chart renders for a web service with a log-shipping sidecar: about
// 4 KiB stored with its managedFields.
func deployment(ns string, i int) client.Object {
	name := fmt.Sprintf("app-%07d", i)
	labels := map[string]string{"app.kubernetes.io/name": fmt.Sprintf("svc-%d", i%50), "app.kubernetes.io/instance": name}
	meta := map[string]string{"app.kubernetes.io/version": fmt.Sprintf("1.%d.0", i%9),
		"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": fmt.Sprintf("svc-0.%d.0", i%9)}
	for k, v := range labels {
		meta[k] = v
	}
	env := make([]corev1.EnvVar, 0, 8)
	for e := range 8 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", e), Value: fmt.Sprintf("value-%d-%d", e, i%13)})
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 10}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: meta,
			Annotations: map[string]string{"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": ns}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1 + i%5)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: meta, Annotations: map[string]string{"checksum/config": fmt.Sprintf("%064x", i)}},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
					Containers: []corev1.Container{{
						Name: "app", Image: fmt.Sprintf("registry.example/team/svc-%d:1.%d.0", i%50, i%9),
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						Env:   env,
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
						LivenessProbe: probe, ReadinessProbe: probe,
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/svc"}},
					}, {
						Name: "log-shipper", Image: "registry.example/platform/log-shipper:3.1.4",
						Args:      []string{"--input=/var/log/app", "--output=stdout"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
				},
			},
		},
	}
}

// widget is a custom resource of widgetCRD.
func widget(ns string, i int) client.Object {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "bench.kollect.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": ns, "name": fmt.Sprintf("widget-%07d", i),
			"labels": map[string]any{"team": fmt.Sprintf("team-%d", i%20)}},
		"spec": map[string]any{"owner": fmt.Sprintf("team-%d", i%20), "size": int64(i % 100),
			"tags": []any{"a", "b", fmt.Sprintf("t%d", i%4)}},
	}}
	return u
}

// widgetCRD defines Widget: a namespaced kind with a structural schema, as an operator's
// CRD would.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.bench.kollect.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "bench.kollect.dev", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"owner": {Type: "string"},
							"size":  {Type: "integer"},
							"tags":  {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}},
						}},
					},
				}},
			}},
		},
	}
}

// excludeNames is the target's names block: ConfigMaps leave out the CA bundle the API server
// puts in every namespace, which is not the benchmark's.
func (k kind) excludeNames() string {
	if k.exclude == "" {
		return ""
	}
	return "\n  names: {exclude: [" + k.exclude + "]}"
}

// createCRD creates a CRD and waits until the API server serves it.
func createCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	if err := c.Create(ctx, crd); err != nil {
		return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", crd.Name, err)
	}
	return nil
}

// lists is how many lists of the shape's kinds the agent has sent (kollect_watch_lists_total).
func (s shape) lists(b testing.TB, a *agentProc) float64 {
	var sum float64
	for _, k := range s.kindList() {
		n, _ := a.metricSum(b, "kollect_watch_lists_total", `kind="`+k.kind+`"`)
		sum += n
	}
	return sum
}
