package validation

import (
	"net/url"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// InlineCredentialsMessage is what a refusal of InlineCredentials says.
const InlineCredentialsMessage = "credentials in URLs are refused: put them in the Secret the sink's secretRef names"

// InlineCredentials returns the fields (under path, such as spec.git.url) of a sink spec, in its unstructured form, whose URLs carry credentials. Credentials belong in the
// Secret a secretRef names: a URL is printed in status, events, logs and the hub's heartbeats,
// and anyone who may read the sink object would read them. A user name alone is allowed where
// it is not a secret (ssh:// and git@host:path remotes, MongoDB URIs for X.509); a password,
// or any user information in another URL (an https token as user name), is not; nor is a
// query parameter that names a credential (?private_token=, X-Amz-Security-Token, sig, key).
func InlineCredentials(path *field.Path, spec any) []*field.Path {
	var found []*field.Path
	walkURLs(path, spec, &found)
	found = append(found, natsTokens(path, spec, found)...)
	sort.Slice(found, func(i, j int) bool { return found[i].String() < found[j].String() })
	return found
}

// natsTokens returns the NATS servers without a scheme that carry a user name: nats.go makes
// them nats:// URLs and sends a user name without a password as a token ("tok@host:4222").
// The walk takes them for scp-like git remotes, whose user name is no secret.
func natsTokens(path *field.Path, spec any, found []*field.Path) []*field.Path {
	m, _ := spec.(map[string]any)
	cfg, _ := m["nats"].(map[string]any)
	servers, _ := cfg["servers"].([]any)
	var out []*field.Path
	for i, s := range servers {
		raw, _ := s.(string)
		p := path.Child("nats", "servers").Index(i)
		if strings.Contains(raw, "://") || !carriesCredentials("nats://"+raw) {
			continue
		}
		if !slices.ContainsFunc(found, func(f *field.Path) bool { return f.String() == p.String() }) {
			out = append(out, p)
		}
	}
	return out
}

func walkURLs(path *field.Path, v any, found *[]*field.Path) {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			walkURLs(path.Child(k), child, found)
		}
	case []any:
		for i, child := range x {
			walkURLs(path.Index(i), child, found)
		}
	case string:
		if carriesCredentials(x) {
			*found = append(*found, path)
		}
	}
}

func carriesCredentials(s string) bool {
	if credentialInQuery(s) {
		return true
	}
	if !strings.Contains(s, "@") {
		return false
	}
	if !strings.Contains(s, "://") {
		// scp-like git remote (git@host:path) or a bare host: a user name, never a password.
		user, _, ok := strings.Cut(s, "@")
		return ok && strings.Contains(user, ":")
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		// Unparseable: refuse a user:password@ prefix all the same.
		_, rest, _ := strings.Cut(s, "://")
		user, _, ok := strings.Cut(rest, "@")
		return ok && !strings.Contains(user, "/") && user != ""
	}
	_, hasPassword := u.User.Password()
	switch strings.ToLower(u.Scheme) {
	case "ssh", "mongodb", "mongodb+srv":
		return hasPassword
	}
	return true
}

// credentialInQuery reports whether a URL carries a credential in its query string, as
// GitLab's ?private_token=, presigned S3 URLs (X-Amz-Security-Token, X-Amz-Signature), Azure
// SAS (sig=), Google API keys (key=) and MongoDB's tlsCertificateKeyFilePassword or
// AWS_SESSION_TOKEN in authMechanismProperties do: printed wherever the URL is, like a
// password before the host.
func credentialInQuery(s string) bool {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	_, query, ok := strings.Cut(rest, "?")
	if !ok {
		return false
	}
	query, _, _ = strings.Cut(query, "#")
	for _, pair := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		name, value, _ := strings.Cut(pair, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if v, err := url.QueryUnescape(value); err == nil {
			value = v
		}
		if credentialName(name) || strings.Contains(strings.ToUpper(value), "SESSION_TOKEN:") {
			return true
		}
	}
	return false
}

// credentialName says whether a query parameter's name names a credential.
func credentialName(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "sig", "key", "auth", "authorization", "pwd", "pass":
		return true
	}
	for _, part := range []string{"token", "secret", "passw", "signature", "credential", "apikey", "api_key", "api-key"} {
		if strings.Contains(n, part) {
			return true
		}
	}
	return false
}
