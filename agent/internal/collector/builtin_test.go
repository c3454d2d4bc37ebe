package collector

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestBuiltinKindsDecodeAsJSONDoes: an object listed as protobuf and converted reads exactly as
// the same object listed as JSON into an unstructured object, for built-in kinds with the
// field types users' profiles read (strings, maps, byte data, integers, quantities, int-or-
// strings, timestamps, nested lists, managedFields), so that switching a kind's encoding
// changes no extracted value and no row.
func TestBuiltinKindsDecodeAsJSONDoes(t *testing.T) {
	ctx := context.Background()
	ns := "builtin-equivalence"
	c := cp.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	replicas, yes := int32(3), true
	objects := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm", Labels: map[string]string{"app": "a"},
			Annotations: map[string]string{"note": "x"}}, Data: map[string]string{"mode": "blue", "empty": ""},
			BinaryData: map[string][]byte{"blob": {0, 1, 2, 255}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "owned-", Finalizers: []string{"example.com/keep"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "0f0e0d0c-0b0a-4908-8706-050403020100",
				Controller: &yes, BlockOwnerDeletion: &yes}, {APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "1f0e0d0c-0b0a-4908-8706-050403020100"}}},
			Immutable: &yes, Data: map[string]string{"a": "b"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s", Annotations: map[string]string{"note": "y"}}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"password": []byte("hunter2")}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc"}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "a"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("web")}, {Name: "m", Port: 9090, TargetPort: intstr.FromInt32(9091)}}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.2",
					Env: []corev1.EnvVar{{Name: "A", Value: "1"}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/ready", Port: intstr.FromInt32(8080)}}}}}}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "1"}}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(1<<20, resource.BinarySI)}}}}}},
	}
	for _, o := range objects {
		must(c.Create(ctx, o))
	}

	v, err := discovery.NewDiscoveryClientForConfigOrDie(cp.Config).ServerVersion()
	must(err)
	b, err := NewBuiltin(cp.Config, v.Minor)
	must(err)
	if b == nil {
		t.Fatalf("the test's API server (%s) is newer than client-go (minor %d): protobuf watches are off", v.GitVersion, clientMinor())
	}
	dyn := dynamic.NewForConfigOrDie(cp.Config)
	kinds := []schema.GroupVersionResource{
		{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"},
		{Version: "v1", Resource: "services"}, {Group: "apps", Version: "v1", Resource: "deployments"},
		{Version: "v1", Resource: "pods"},
	}
	kindOf := map[string]string{"configmaps": "ConfigMap", "secrets": "Secret", "services": "Service",
		"deployments": "Deployment", "pods": "Pod"}
	compared := 0
	for _, gvr := range kinds {
		gvk := gvr.GroupVersion().WithKind(kindOf[gvr.Resource])
		want, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		must(err)
		src, ok := b.source(gvk, gvr, ns)
		if !ok {
			t.Fatalf("%s is not served as protobuf", gvk)
		}
		list, err := src.list(ctx, metav1.ListOptions{})
		must(err)
		items, err := meta.ExtractList(list)
		must(err)
		got := map[string]map[string]any{}
		for _, it := range items {
			u, err := toUnstructured(it, gvk)
			must(err)
			got[u.GetName()] = u.Object
		}
		for _, w := range want.Items {
			g, ok := got[w.GetName()]
			if !ok {
				t.Fatalf("%s %s missing from the protobuf list", gvk.Kind, w.GetName())
			}
			if !reflect.DeepEqual(g, w.Object) {
				t.Errorf("%s %s differs:\n protobuf %s\n json     %s", gvk.Kind, w.GetName(), fmt.Sprint(g), fmt.Sprint(w.Object))
			}
			compared++
		}
	}
	if compared < len(objects) {
		t.Fatalf("compared %d objects, created %d", compared, len(objects))
	}

	// Custom resources and kinds unknown to client-go stay JSON.
	if _, ok := b.source(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"},
		schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, ""); ok {
		t.Fatal("a custom resource is served as protobuf")
	}
}

// TestClientGoMinorFollowsGoMod: clientGoMinor is the client-go of go.mod.
func TestClientGoMinorFollowsGoMod(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/client-go v0\.(\d+)\.`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/client-go")
	}
	if got := string(m[1]); got != fmt.Sprint(clientGoMinor) {
		t.Fatalf("go.mod has client-go v0.%s, clientGoMinor is %d: update it", got, clientGoMinor)
	}
}

// TestBuiltinOnlyForServersNoNewerThanTheClient: typed decoding drops fields its types lack, so
// a server newer than the agent's client-go is watched as JSON.
func TestBuiltinOnlyForServersNoNewerThanTheClient(t *testing.T) {
	m := clientMinor()
	for _, c := range []struct {
		server string
		want   bool
	}{
		{fmt.Sprint(m), true}, {fmt.Sprint(m) + "+", true}, {fmt.Sprint(m - 3), true},
		{fmt.Sprint(m + 1), false}, {fmt.Sprint(m+1) + "+", false}, {"", false}, {"x", false},
	} {
		if got := serverKnown(c.server, m); got != c.want {
			t.Errorf("server minor %q, client %d: %v, want %v", c.server, m, got, c.want)
		}
	}
	b, err := NewBuiltin(cp.Config, fmt.Sprint(m+1))
	if err != nil || b != nil {
		t.Fatalf("a newer server: %v, %v; want no protobuf watches", b, err)
	}
	if b.knows(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) {
		t.Fatal("a nil Builtin serves ConfigMaps")
	}
}
