package bundle

import (
	"context"
	"testing"
)

// FuzzValidate validates arbitrary multi-document YAML as a bundle: it is accepted, or refused
// with an error that has a message, never a panic. The seeds run with every `go test`.
func FuzzValidate(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: {name: p, namespace: team-a}\nspec:\n  target: {version: v1, kind: ConfigMap}\n  attributes: [{name: x, cel: object.metadata.name}]\n",
		"---\n---\n", "kind: Deployment\napiVersion: apps/v1\nmetadata: {name: x}\n", "a: &a [*a]\n", "{{{", "- 1\n- 2\n",
		"apiVersion: kollect.dev/v1alpha1\nkind: KollectInventory\nmetadata: {name: i}\nspec: {exportTiming: {debounce: 1ns}}\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: kollect}\nstringData: {password: x}\n", "\xff\xfe",
	} {
		f.Add(seed)
	}
	v, err := NewValidator()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, manifests string) {
		if _, err := v.Validate(context.Background(), manifests); err != nil && err.Error() == "" {
			t.Fatal("a refusal without a message")
		}
	})
}
