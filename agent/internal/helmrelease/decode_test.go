package helmrelease

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// fixture is the Secret helm v3.21.4 wrote for the second revision of release demo (installed
// with database.password set, upgraded with image.tag=2.0) in e2e/sinks/helm_test.go; rerun
// that test with KOLLECT_HELM_FIXTURE=<this path> to make it again.
const fixture = "testdata/sh.helm.release.v1.demo.v2.json"

// fixturePassword is the value the fixture's release was installed with.
const fixturePassword = "hunter2-never-exported"

func loadFixture(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	var secret map[string]any
	if err := json.Unmarshal(raw, &secret); err != nil {
		t.Fatal(err)
	}
	return secret
}

func TestDecodeSecretWrittenByHelm(t *testing.T) {
	secret := loadFixture(t)
	doc, rel, err := Decode(secret, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Release{Namespace: "helm-apps", Name: "demo", Revision: 2, UID: ReleaseUID("helm-apps", "demo")}); rel != want {
		t.Fatalf("release %+v, want %+v", rel, want)
	}
	r := doc["release"].(map[string]any)
	r["updated"] = strings.Repeat("x", len(r["updated"].(string))) // the time of the run
	want := map[string]any{"name": "demo", "namespace": "helm-apps", "chart": "demo", "version": "0.1.0", "appVersion": "1.0.0",
		"status": "deployed", "revision": int64(2), "updated": "xxxxxxxxxxxxxxxxxxxx", "description": "tag 2.0"}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("release %v\nwant    %v", r, want)
	}
	if _, ok := doc["values"]; ok {
		t.Fatal("values decoded without Options.Values")
	}
	meta := doc["metadata"].(map[string]any)
	if meta["name"] != "demo" || meta["uid"] != rel.UID || meta["labels"].(map[string]any)["owner"] != "helm" {
		t.Fatalf("metadata %v", meta)
	}
	if doc["kind"] != Kind || doc["apiVersion"] != APIVersion {
		t.Fatalf("kind %v apiVersion %v", doc["kind"], doc["apiVersion"])
	}
}

func TestDecodeRedactsValues(t *testing.T) {
	doc, _, err := Decode(loadFixture(t), Options{Values: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"database": map[string]any{"password": Redacted}, "image": map[string]any{"tag": Redacted}}
	if !reflect.DeepEqual(doc["values"], want) {
		t.Fatalf("values %v, want %v", doc["values"], want)
	}
	raw, _ := json.Marshal(doc)
	if bytes.Contains(raw, []byte(fixturePassword)) || bytes.Contains(raw, []byte(`"2.0"`)) {
		t.Fatalf("the decoded document holds a value: %s", raw)
	}
	if got := redact([]any{"a", 1, nil, map[string]any{"k": true}}); !reflect.DeepEqual(got, []any{Redacted, Redacted, nil, map[string]any{"k": Redacted}}) {
		t.Fatalf("redact kept a leaf: %v", got)
	}
}

// secretWith is a release Secret whose data.release holds payload, encoded as the API serves
// a Secret's data (base64 once more than what Helm stores).
func secretWith(payload []byte) map[string]any {
	return map[string]any{"type": SecretType, "metadata": map[string]any{"name": "sh.helm.release.v1.bad.v3", "namespace": "ns"},
		"data": map[string]any{"release": base64.StdEncoding.EncodeToString(payload)}}
}

func helmEncoded(t *testing.T, releaseJSON string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(releaseJSON))
	_ = zw.Close()
	return []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// TestDecodeBadInput: every malformed Secret gives an error that says what is wrong and quotes
// none of its content.
func TestDecodeBadInput(t *testing.T) {
	const secretText = "s3cret-content"
	gz := helmEncoded(t, `{"name":"x","version":1,"config":{"pw":"`+secretText+`"`) // truncated JSON
	zipped, _ := base64.StdEncoding.DecodeString(string(gz))
	truncatedGzip := []byte(base64.StdEncoding.EncodeToString(zipped[:len(zipped)-12]))
	cases := map[string]struct {
		secret map[string]any
		want   string
	}{
		"not a release Secret": {map[string]any{"type": "Opaque"}, "the Secret's type is not helm.sh/release.v1"},
		"no data.release":      {map[string]any{"type": SecretType, "data": map[string]any{"other": "eA=="}}, "the Secret has no data.release"},
		"not base64":           {map[string]any{"type": SecretType, "data": map[string]any{"release": "%%" + secretText}}, "data.release is not base64"},
		"base64 only once":     {secretWith([]byte("{" + secretText)), "data.release is not base64-encoded twice, as Helm writes it"},
		"not gzip nor JSON": {secretWith([]byte(base64.StdEncoding.EncodeToString([]byte(secretText)))),
			"data.release is neither gzip nor a JSON object"},
		"corrupt gzip": {secretWith([]byte(base64.StdEncoding.EncodeToString(append([]byte{0x1f, 0x8b, 0x08}, secretText...)))),
			"data.release is not valid gzip"},
		"truncated gzip": {secretWith(truncatedGzip), "data.release is truncated or corrupt gzip"},
		"bad JSON":       {secretWith(gz), "the release is not valid JSON (syntax error at byte 55)"},
		"JSON syntax": {secretWith(helmEncoded(t, `{"name":"x","config":{"pw":`+secretText+`}}`)),
			"the release is not valid JSON (syntax error at byte 28)"},
		"JSON types": {secretWith(helmEncoded(t, `{"name":"x","version":"`+secretText+`"}`)),
			"the release is not valid JSON (field version is a JSON string, not int64)"},
		"no revision":  {secretWith(helmEncoded(t, `{"name":"x"}`)), "the release has no name or revision"},
		"bad deployed": {secretWith(helmEncoded(t, `{"name":"x","version":1,"info":{"last_deployed":"`+secretText+`"}}`)), "info.last_deployed is not an RFC 3339 time"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Decode(c.secret, Options{Values: true})
			if err == nil {
				t.Fatal("decoded")
			}
			if got, want := err.Error(), "decoding Helm release: "+c.want; got != want {
				t.Errorf("error %q\nwant  %q", got, want)
			}
			if strings.Contains(err.Error(), secretText) || strings.Contains(err.Error(), "s3c") {
				t.Errorf("the error quotes the Secret: %q", err)
			}
		})
	}
}

func TestFromSecretName(t *testing.T) {
	r, ok := FromSecretName("ns", "sh.helm.release.v1.my.app.v12")
	if !ok || r.Name != "my.app" || r.Revision != 12 || r.UID != ReleaseUID("ns", "my.app") {
		t.Fatalf("%+v %v", r, ok)
	}
	for _, bad := range []string{"other", "sh.helm.release.v1.x", "sh.helm.release.v1.x.v0", "sh.helm.release.v1.x.vx"} {
		if _, ok := FromSecretName("ns", bad); ok {
			t.Errorf("%s parsed as a release Secret", bad)
		}
	}
}

// BenchmarkDecode decodes the Secret helm wrote, with redacted values: the work the agent's
// transform does once per release Secret version.
func BenchmarkDecode(b *testing.B) {
	raw, err := os.ReadFile(fixture)
	if err != nil {
		b.Fatal(err)
	}
	var secret map[string]any
	if err := json.Unmarshal(raw, &secret); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(secret, Options{Values: true}); err != nil {
			b.Fatal(err)
		}
	}
}
