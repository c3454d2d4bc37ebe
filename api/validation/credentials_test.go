package validation

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestInlineCredentialsInUnstructuredSpecs(t *testing.T) {
	spec := map[string]any{
		"git":   map[string]any{"url": "https://bot:s3cret@git.example.com/x.git", "authorEmail": "bot@example.com"},
		"nats":  map[string]any{"servers": []any{"nats://a:4222", "nats://token@b:4222"}},
		"other": map[string]any{"remote": "git@git.example.com:team/x.git", "broken": "ht tp://u:p@host"},
	}
	var got []string
	for _, p := range InlineCredentials(field.NewPath("spec"), spec) {
		got = append(got, p.String())
	}
	want := []string{"spec.git.url", "spec.nats.servers[1]", "spec.other.broken"}
	if !slices.Equal(got, want) {
		t.Fatalf("InlineCredentials = %v, want %v", got, want)
	}
}
