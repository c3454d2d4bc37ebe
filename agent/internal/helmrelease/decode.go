package helmrelease

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// SecretType is the type of the Secrets Helm keeps releases in; the agent watches only these.
const SecretType = "helm.sh/release.v1"

// FieldSelector selects Helm's release Secrets on the API server.
const FieldSelector = "type=" + SecretType

// Kind and APIVersion name the decoded document (object.kind, object.apiVersion).
const (
	Kind       = "HelmRelease"
	APIVersion = "kollect.dev/decoded"
)

// Redacted replaces every leaf of a release's values when they are exported.
const Redacted = "<redacted>"

// maxDecoded bounds the decompressed size of a release: Helm caps a Secret at 1 MiB, and a
// gzip bomb must not exhaust the agent's memory.
const maxDecoded = 64 << 20

// Options say what the decoded document holds beyond the release's summary.
type Options struct {
	// Values adds object.values: the release's values with every leaf redacted.
	Values bool
}

// Release identifies a decoded release: one row per (Namespace, Name), from its highest
// Revision.
type Release struct {
	Namespace, Name string
	Revision        int64
	// UID is stable across the release's revisions (derived from namespace and name), so an
	// upgrade updates the release's row instead of replacing it.
	UID string
}

// namespaceUID seeds the name-based UIDs of releases.
var namespaceUID = uuid.MustParse("6f1c6b5e-8c59-4d59-9a43-6a0b1bd1e7a1")

// ReleaseUID is the stable UID of the release name in namespace.
func ReleaseUID(namespace, name string) string {
	return uuid.NewSHA1(namespaceUID, []byte(namespace+"/"+name)).String()
}

// Error is a decoding failure. Its message names the Secret's part that was malformed and
// never quotes the Secret's content.
type Error struct{ msg string }

func (e *Error) Error() string { return "decoding Helm release: " + e.msg }

func fail(format string, a ...any) error { return &Error{msg: fmt.Sprintf(format, a...)} }

// release is the part of Helm's release JSON the document keeps; everything else (manifest,
// chart templates and files, hooks, notes) is skipped by the decoder.
type release struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Version   int64  `json:"version"`
	Info      struct {
		LastDeployed string `json:"last_deployed"`
		Description  string `json:"description"`
		Status       string `json:"status"`
	} `json:"info"`
	Chart struct {
		Metadata struct {
			Name       string `json:"name"`
			Version    string `json:"version"`
			AppVersion string `json:"appVersion"`
		} `json:"metadata"`
	} `json:"chart"`
	Config map[string]any `json:"config"`
}

// IsRelease reports whether a Secret (its unstructured content) is a Helm release.
func IsRelease(secret map[string]any) bool {
	t, _ := secret["type"].(string)
	return t == SecretType
}

// Decode turns a release Secret (its unstructured content, as the API serves it) into the
// decoded document and the release's identity.
func Decode(secret map[string]any, opts Options) (map[string]any, Release, error) {
	if !IsRelease(secret) {
		return nil, Release{}, fail("the Secret's type is not %s", SecretType)
	}
	meta, _ := secret["metadata"].(map[string]any)
	data, _ := secret["data"].(map[string]any)
	enc, ok := data["release"].(string)
	if !ok {
		return nil, Release{}, fail("the Secret has no data.release")
	}
	r, err := decodeRelease(enc)
	if err != nil {
		return nil, Release{}, err
	}
	if r.Name == "" || r.Version <= 0 {
		return nil, Release{}, fail("the release has no name or revision")
	}
	// The release is of the namespace its Secret is in, as Helm keeps it: the namespace the
	// JSON names is anyone's to write who may create a Secret, and would let one namespace
	// speak for (and, by UID, replace the row of) another namespace's release. Only a Secret
	// outside any namespace (a file the offline CLI reads) takes the JSON's.
	ns, _ := meta["namespace"].(string)
	if ns == "" {
		ns = r.Namespace
	}
	id := Release{Namespace: ns, Name: r.Name, Revision: r.Version, UID: ReleaseUID(ns, r.Name)}
	updated := ""
	if r.Info.LastDeployed != "" {
		ts, err := time.Parse(time.RFC3339Nano, r.Info.LastDeployed)
		if err != nil {
			return nil, Release{}, fail("info.last_deployed is not an RFC 3339 time")
		}
		updated = ts.UTC().Format(time.RFC3339)
	}
	docMeta := map[string]any{"name": r.Name, "namespace": ns, "uid": id.UID}
	if l, ok := meta["labels"].(map[string]any); ok {
		docMeta["labels"] = l
	}
	doc := map[string]any{
		"apiVersion": APIVersion,
		"kind":       Kind,
		"metadata":   docMeta,
		"release": map[string]any{
			"name":        r.Name,
			"namespace":   ns,
			"chart":       r.Chart.Metadata.Name,
			"version":     r.Chart.Metadata.Version,
			"appVersion":  r.Chart.Metadata.AppVersion,
			"status":      r.Info.Status,
			"revision":    r.Version,
			"updated":     updated,
			"description": r.Info.Description,
		},
	}
	if opts.Values {
		values := map[string]any{}
		for k, v := range r.Config {
			values[k] = redact(v)
		}
		doc["values"] = values
	}
	return doc, id, nil
}

var gzipMagic = []byte{0x1f, 0x8b, 0x08}

// decodeRelease undoes Helm's encoding of data.release: base64 (on top of the API's), gzip
// (Helm also reads uncompressed JSON, and so does this), JSON.
func decodeRelease(enc string) (*release, error) {
	outer, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fail("data.release is not base64")
	}
	raw, err := base64.StdEncoding.DecodeString(string(outer))
	if err != nil {
		return nil, fail("data.release is not base64-encoded twice, as Helm writes it")
	}
	if bytes.HasPrefix(raw, gzipMagic) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fail("data.release is not valid gzip")
		}
		unzipped, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
		if err != nil {
			return nil, fail("data.release is truncated or corrupt gzip")
		}
		if len(unzipped) > maxDecoded {
			return nil, fail("data.release decompresses to more than %d MiB", maxDecoded>>20)
		}
		raw = unzipped
	} else if len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '{' {
		return nil, fail("data.release is neither gzip nor a JSON object")
	}
	var r release
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fail("the release is not valid JSON (%s)", jsonProblem(err))
	}
	return &r, nil
}

// jsonProblem describes a JSON error by position and expected type only: encoding/json's own
// messages quote the offending character or value.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return "syntax error at byte " + strconv.FormatInt(syn.Offset, 10)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s is a JSON %s, not %s", typ.Field, typ.Value, typ.Type)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	default:
		return "malformed"
	}
}

// redact keeps the shape of a values tree (map keys, list lengths) and replaces every leaf.
func redact(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = redact(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redact(e)
		}
		return out
	case nil:
		return nil
	default:
		return Redacted
	}
}

// FromSecretName parses a release Secret's name (sh.helm.release.v1.<name>.v<rev>): the
// identity of a release whose data could not be decoded.
func FromSecretName(namespace, secretName string) (Release, bool) {
	rest, ok := strings.CutPrefix(secretName, "sh.helm.release.v1.")
	if !ok {
		return Release{}, false
	}
	i := strings.LastIndex(rest, ".v")
	if i <= 0 {
		return Release{}, false
	}
	rev, err := strconv.ParseInt(rest[i+2:], 10, 64)
	if err != nil || rev <= 0 {
		return Release{}, false
	}
	name := rest[:i]
	return Release{Namespace: namespace, Name: name, Revision: rev, UID: ReleaseUID(namespace, name)}, true
}
