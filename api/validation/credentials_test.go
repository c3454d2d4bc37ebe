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

// TestCredentialsInQueryStrings: a token in a URL's query string is shown wherever the URL is
// (status, previews, errors, logs, the hub's heartbeats), like a password before the host;
// query options that are no secret stay allowed.
func TestCredentialsInQueryStrings(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"https://gitlab.example.com/team/inv.git?private_token=glpat-x", true},
		{"http://127.0.0.1:9000/?X-Amz-Security-Token=abc", true},
		{"https://s3.example.com/b?X-Amz-Credential=AKIA%2F20260101&X-Amz-Signature=f00", true},
		{"https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=abc%3D", true},
		{"https://bigquery.googleapis.com/?key=AIza", true},
		{"https://git.example.com/x.git?access%5Ftoken=t", true},
		{"mongodb://db.example/?tls=true&tlsCertificateKeyFilePassword=p", true},
		{"mongodb://db.example/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:t", true},
		{"mongodb://db.example/?authSource=admin&replicaSet=rs0&tlsCertificateKeyFile=/k.pem", false},
		{"https://git.example.com/x.git?ref=main", false},
		{"https://git.example.com/x.git#token=fragment-only", false},
		{"not a url ?token=x", false},
	} {
		if got := carriesCredentials(tc.url); got != tc.want {
			t.Errorf("carriesCredentials(%q) = %t, want %t", tc.url, got, tc.want)
		}
	}
}
