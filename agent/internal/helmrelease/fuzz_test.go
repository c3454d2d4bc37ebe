package helmrelease

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// fuzzCanary is a value the seeds hide in releases: no error may quote it.
const fuzzCanary = "hunter2-canary"

// encodings of a fuzzed payload into data.release: as given (the API's base64 and Helm's are
// the fuzzer's to get right), JSON as Helm reads it uncompressed, and as Helm writes it.
const (
	encRaw = iota
	encJSON
	encGzip
	encodings
)

func encodeRelease(payload []byte, enc uint8) string {
	switch enc % encodings {
	case encRaw:
		return string(payload)
	case encJSON:
		return base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString(payload)))
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(payload)
	_ = zw.Close()
	return base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString(buf.Bytes())))
}

// FuzzDecode feeds Decode release Secrets of any content, as any namespace may create them
// (type helm.sh/release.v1 is the only gate). A malformed one gives an *Error that quotes none
// of it; a decoded one is bounded by what it came from, keeps no value (every leaf of values
// is redacted), and is a release of the namespace its Secret is in, with that namespace's UID:
// a Secret in one namespace cannot speak for, and replace the row of, another namespace's
// release.
func FuzzDecode(f *testing.F) {
	for _, s := range []struct {
		payload string
		enc     uint8
		ns      string
	}{
		{`{"name":"demo","namespace":"apps","version":2,"info":{"status":"deployed","last_deployed":"2026-01-02T03:04:05.123Z"},` +
			`"chart":{"metadata":{"name":"demo","version":"0.1.0","appVersion":"1.0.0"}},"config":{"db":{"password":"` + fuzzCanary + `"},"l":[1,null,{"k":true}]}}`, encGzip, "apps"},
		{`{"name":"cilium","namespace":"kube-system","version":999999,"info":{"status":"deployed"}}`, encGzip, "team-a"},
		{`{"name":"x","version":1}`, encJSON, ""},
		{`{"name":"x","version":1,"namespace":"other"}`, encJSON, "ns"},
		{`{"name":"x","version":"` + fuzzCanary + `"}`, encGzip, "ns"},
		{`{"name":"x","version":1,"info":{"last_deployed":"` + fuzzCanary + `"}}`, encJSON, "ns"},
		{`{"name":"x","version":1,"config":{"pw":"` + fuzzCanary + `"`, encGzip, "ns"},
		{`{"name":"x","version":1,"config":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, encGzip, "ns"},
		{`{"name":"x","version":-1}`, encJSON, "ns"},
		{"\x1f\x8b\x08" + fuzzCanary, encJSON, "ns"},
		{"%%" + fuzzCanary, encRaw, "ns"},
		{base64.StdEncoding.EncodeToString([]byte(fuzzCanary)), encRaw, "ns"},
		{"", encGzip, "ns"},
	} {
		f.Add([]byte(s.payload), s.enc, s.ns, true)
	}
	f.Fuzz(func(t *testing.T, payload []byte, enc uint8, ns string, values bool) {
		secret := map[string]any{"type": SecretType,
			"metadata": map[string]any{"name": "sh.helm.release.v1.x.v1", "namespace": ns, "labels": map[string]any{"owner": "helm"}},
			"data":     map[string]any{"release": encodeRelease(payload, enc)}}
		doc, rel, err := Decode(secret, Options{Values: values})
		if err != nil {
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a decoding *Error", err, err)
			}
			if bytes.Contains(payload, []byte(fuzzCanary)) && strings.Contains(err.Error(), fuzzCanary) {
				t.Fatalf("the error quotes the Secret: %v", err)
			}
			return
		}
		if ns != "" && rel.Namespace != ns {
			t.Fatalf("a Secret in namespace %q decoded as a release of namespace %q", ns, rel.Namespace)
		}
		meta := doc["metadata"].(map[string]any)
		if rel.UID != ReleaseUID(rel.Namespace, rel.Name) || meta["uid"] != rel.UID || meta["namespace"] != rel.Namespace {
			t.Fatalf("identity %+v, document metadata %v", rel, meta)
		}
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("the document does not marshal: %v", err)
		}
		// Every leaf of the release becomes at most a redaction: bounded by the release's
		// JSON (what the gzip decompressed to, itself bounded by maxDecoded) times the
		// redaction's length, plus the document's fixed fields.
		if limit := 16*releaseSize(t, secret) + 4096; len(out) > limit {
			t.Fatalf("a release of %d bytes decoded to %d bytes", releaseSize(t, secret), len(out))
		}
		if v, ok := doc["values"].(map[string]any); ok {
			for k, leaf := range v {
				assertRedacted(t, k, leaf)
			}
		}
	})
}

// releaseSize is the length of the release JSON a Secret that decoded holds.
func releaseSize(t *testing.T, secret map[string]any) int {
	enc := secret["data"].(map[string]any)["release"].(string)
	outer, _ := base64.StdEncoding.DecodeString(enc)
	raw, _ := base64.StdEncoding.DecodeString(string(outer))
	if bytes.HasPrefix(raw, gzipMagic) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("a release that decoded is no gzip: %v", err)
		}
		n, _ := io.Copy(io.Discard, io.LimitReader(zr, maxDecoded+1))
		return int(n)
	}
	return len(raw)
}

func assertRedacted(t *testing.T, path string, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			assertRedacted(t, path+"."+k, e)
		}
	case []any:
		for _, e := range x {
			assertRedacted(t, path+"[]", e)
		}
	case nil:
	default:
		if x != Redacted {
			t.Fatalf("values %s kept its leaf %v", path, x)
		}
	}
}
