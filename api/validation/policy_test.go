package validation

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func paths(ps []*field.Path) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func TestAmbientCredentials(t *testing.T) {
	for _, c := range []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"s3 without secretRef", map[string]any{"s3": map[string]any{"bucket": "b"}}, []string{"spec.s3.secretRef"}},
		{"s3 with an endpoint still uses the default chain", map[string]any{"s3": map[string]any{"endpoint": "https://minio:9000"}}, []string{"spec.s3.secretRef"}},
		{"s3 with secretRef", map[string]any{"s3": map[string]any{"secretRef": map[string]any{"name": "k"}}}, []string{}},
		{"gcs without secretRef", map[string]any{"gcs": map[string]any{"bucket": "b"}}, []string{"spec.gcs.secretRef"}},
		{"gcs emulator endpoint", map[string]any{"gcs": map[string]any{"endpoint": "http://gcs:4443"}}, []string{}},
		{"bigquery without secretRef", map[string]any{"bigquery": map[string]any{"project": "p"}}, []string{"spec.bigquery.secretRef"}},
		{"azureblob always has a secretRef", map[string]any{"azureBlob": map[string]any{"account": "a", "container": "c"}}, []string{}},
		{"postgres always has a secretRef", map[string]any{"postgres": map[string]any{"host": "db"}}, []string{}},
	} {
		if got := paths(AmbientCredentials(field.NewPath("spec"), c.spec)); !slices.Equal(got, c.want) {
			t.Errorf("%s: AmbientCredentials = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestInsecureTLS(t *testing.T) {
	spec := map[string]any{
		"kafka":   map[string]any{"tls": map[string]any{"enabled": true, "insecureSkipVerify": true}},
		"mongodb": map[string]any{"tls": map[string]any{"insecureSkipVerify": false}},
		"list":    []any{map[string]any{"insecureSkipVerify": true}},
	}
	if got, want := paths(InsecureTLS(field.NewPath("spec"), spec)), []string{"spec.kafka.tls.insecureSkipVerify", "spec.list[0].insecureSkipVerify"}; !slices.Equal(got, want) {
		t.Fatalf("InsecureTLS = %v, want %v", got, want)
	}
}
