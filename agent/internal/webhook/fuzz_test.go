package webhook

import (
	"context"
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// FuzzAdmissionDecoding sends arbitrary bytes as the object of an admission request to every
// kind's validator, with panic recovery off: the webhook must answer (allowed or denied with a
// message), never panic. The seeds run with every `go test`; `go test -fuzz` explores more.
func FuzzAdmissionDecoding(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"kollect.dev/v1alpha1","kind":"KollectProfile","metadata":{"name":"p","namespace":"a"},"spec":{"target":{"version":"v1","kind":"ConfigMap"},"attributes":[{"name":"x","cel":"object.metadata.name"}]}}`,
		`{"apiVersion":"kollect.dev/v1alpha1","kind":"KollectTarget","metadata":{"name":"t","namespace":"a"},"spec":{"profileRef":{"name":"p"},"match":"object.spec.replicas > 1"}}`,
		`{"apiVersion":"kollect.dev/v1alpha1","kind":"KollectInventory","metadata":{"name":"i","namespace":"a"},"spec":{"targets":[{"name":"t"}],"exportTiming":{"debounce":"1ns"}}}`,
		`{"spec":{"attributes":[{"cel":"))"}]}}`, `{"spec":null}`, `[]`, `null`, `{"metadata":{"name":7}}`, ``, "\xff",
	} {
		f.Add(seed)
	}
	scheme := runtime.NewScheme()
	if err := kollectv1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	l := stubLookup{profiles: map[string]*kollectv1.KollectProfile{}}
	var hooks []*admission.Webhook
	var kinds []string
	for _, k := range kollectv1.Kinds {
		v := &validator{kind: k, scheme: scheme, lookup: l}
		hooks = append(hooks, admission.WithValidator[*unstructured.Unstructured](scheme, v))
		kinds = append(kinds, k.Kind)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for i, h := range hooks {
			for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
				req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
					UID: "fuzz", Operation: op, Name: "fuzz", Namespace: "a",
					Object: runtime.RawExtension{Raw: []byte(raw)}, OldObject: runtime.RawExtension{Raw: []byte(raw)},
				}}
				resp := h.Handle(context.Background(), req)
				if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
					t.Fatalf("%s %s: denied without a message: %s", kinds[i], op, fmt.Sprint(resp.Result))
				}
			}
		}
	})
}
