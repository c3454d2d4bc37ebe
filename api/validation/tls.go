package validation

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Unverified is a sink setting under which the sink would not verify the server it sends its
// rows and credentials to.
type Unverified struct {
	// Field holds the setting, such as spec.postgres.sslMode.
	Field *field.Path
	// Setting says what the field holds: "set", "disable", "tlsInsecure=true".
	Setting string
	// Effect says what the sink would then do.
	Effect string
}

// String renders the setting for a refusal. It holds field names, enum values and option
// names only, never a field's free text, so it cannot leak a secret.
func (u Unverified) String() string {
	return fmt.Sprintf("%s %s: %s", u.Field, u.Setting, u.Effect)
}

const (
	effectUnverified = "the sink would not verify its server's certificate"
	effectPlaintext  = "the sink would send its credentials and rows in plaintext, to a server it does not verify"
	effectAnyPublic  = "the sink would accept any server with a certificate from a public authority, whatever its name"
	effectPassword   = "the sink would send its SASL password in plaintext, to a broker it does not verify"
	effectHTTP       = "the sink would send its credentials in plaintext HTTP, to a server it does not verify"
	effectNATS       = "the sink would log in over plaintext (a token or password in the clear), to a server it does not verify"
	effectMongoPlain = "the sink would send its password in plaintext (authMechanism PLAIN), to a server it does not verify"
)

// InsecureTLS returns the settings of a sink spec, in its unstructured form, under which the
// sink would not verify its server: insecureSkipVerify set to true anywhere, a postgres
// sslMode that is plaintext or checks no certificate, a mongodb uri option that turns
// verification off, Kafka's SASL PLAIN and NATS credentials without TLS, and http:// endpoints that would carry a
// credential to another machine. Only a KollectClusterScope may allow them (allowInsecureSkipVerify): a
// connection that does not verify its server sends rows and credentials to whoever answers.
func InsecureTLS(path *field.Path, spec any) []Unverified {
	var found []Unverified
	walkInsecure(path, spec, &found)
	if m, ok := spec.(map[string]any); ok {
		found = append(found, postgresSSLMode(path.Child("postgres"), m["postgres"])...)
		found = append(found, mongoURIOptions(path.Child("mongodb"), m["mongodb"])...)
		found = append(found, mongoPlain(path.Child("mongodb"), m["mongodb"])...)
		found = append(found, kafkaPlain(path.Child("kafka"), m["kafka"])...)
		found = append(found, natsPlain(path.Child("nats"), m["nats"])...)
		found = append(found, httpCredentials(path, m)...)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Field.String() < found[j].Field.String() })
	return found
}

func walkInsecure(path *field.Path, v any, found *[]Unverified) {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if on, ok := child.(bool); ok && on && k == "insecureSkipVerify" {
				*found = append(*found, Unverified{Field: path.Child(k), Setting: "set", Effect: effectUnverified})
				continue
			}
			walkInsecure(path.Child(k), child, found)
		}
	case []any:
		for i, child := range x {
			walkInsecure(path.Index(i), child, found)
		}
	}
}

// postgresSSLMode reports a postgres sslMode that does not verify the server. Unset is the
// default, verify-full. require and verify-ca check the chain but not the name; the agent has
// them trust the CA of tls.caSecretRef only (libpq's sslrootcert), so with one they verify the
// server. Without one, require checks nothing, and verify-ca would trust every public
// authority for any name. disable (and libpq's allow and prefer, should a spec built in code
// name them) sends the password in plaintext.
func postgresSSLMode(path *field.Path, v any) []Unverified {
	cfg, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	mode, _ := cfg["sslMode"].(string)
	tlsCfg, _ := cfg["tls"].(map[string]any)
	ca, _ := tlsCfg["caSecretRef"].(map[string]any)
	at := path.Child("sslMode")
	switch mode {
	case "", "verify-full":
		return nil
	case "require", "verify-ca":
		if ca != nil {
			return nil
		}
		effect := effectUnverified
		if mode == "verify-ca" {
			effect = effectAnyPublic
		}
		return []Unverified{{Field: at, Setting: mode + " without tls.caSecretRef", Effect: effect}}
	default:
		return []Unverified{{Field: at, Setting: mode, Effect: effectPlaintext}}
	}
}

// mongoInsecureOptions are the MongoDB connection string options (lower case: the driver
// matches them so) that turn off certificate or host name verification; the ssl spelling is
// the older alias the Go driver still reads.
var mongoInsecureOptions = []string{"tlsinsecure", "sslinsecure", "tlsallowinvalidcertificates", "tlsallowinvalidhostnames"}

// mongoURIOptions reports the options of a mongodb uri that turn verification off: a knob
// beside tls.insecureSkipVerify that must need the same grant. The options are split as the
// driver splits them (on & and ;), since a URI with several hosts is no URL net/url parses.
func mongoURIOptions(path *field.Path, v any) []Unverified {
	cfg, _ := v.(map[string]any)
	uri, _ := cfg["uri"].(string)
	var names []string
	for _, pair := range mongoPairs(uri) {
		k, v, _ := strings.Cut(pair, "=")
		name, errK := url.QueryUnescape(k)
		value, errV := url.QueryUnescape(v)
		if errK != nil || errV != nil { // the driver refuses the URI
			continue
		}
		if strings.EqualFold(value, "true") && slices.Contains(mongoInsecureOptions, strings.ToLower(name)) {
			names = append(names, name+"=true")
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	return []Unverified{{Field: path.Child("uri"), Setting: strings.Join(slices.Compact(names), ", "), Effect: effectUnverified}}
}

// mongoParts splits a MongoDB URI as the driver does: the user information ends at the first
// '@', wherever it is (so a '?' before it is no query: "mongodb://u?x@host/?tlsInsecure=true"
// is user u?x); the hosts follow, up to a '/' or '?'; the query follows the first '?' after
// the user information.
func mongoParts(uri string) (hosts, query string) {
	_, rest, _ := strings.Cut(uri, "://")
	if i := strings.Index(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	hosts = rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		hosts = rest[:i]
	}
	_, query, _ = strings.Cut(rest, "?")
	return hosts, query
}

// mongoPairs returns the option pairs of a MongoDB URI's query, split as the driver splits
// them (on & and ;), and also those after the URI's first '?' where that differs: an option
// is looked for wherever a reader of the URI could find it.
func mongoPairs(uri string) []string {
	_, query := mongoParts(uri)
	pairs := splitOptions(query)
	if _, naive, ok := strings.Cut(uri, "?"); ok && naive != query {
		pairs = append(pairs, splitOptions(naive)...)
	}
	return pairs
}

func splitOptions(query string) []string {
	return strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' })
}

// mongoPlain reports authMechanism=PLAIN (LDAP) over a plaintext connection to another
// machine: PLAIN sends the password itself. (SCRAM, the default, proves it without sending it.)
// TLS is on with a tls block, tls=true or ssl=true in the URI, or mongodb+srv:// unless the
// URI turns it off.
func mongoPlain(path *field.Path, v any) []Unverified {
	cfg, _ := v.(map[string]any)
	uri, _ := cfg["uri"].(string)
	scheme, _, _ := strings.Cut(uri, "://")
	hosts, query := mongoParts(uri)
	plain, secure := false, strings.EqualFold(scheme, "mongodb+srv")
	for _, pair := range splitOptions(query) {
		k, v, _ := strings.Cut(pair, "=")
		// Unescaped as the driver unescapes them: auth%4Dechanism=PL%41IN is PLAIN.
		if u, err := url.QueryUnescape(k); err == nil {
			k = u
		}
		if u, err := url.QueryUnescape(v); err == nil {
			v = u
		}
		switch strings.ToLower(k) {
		case "authmechanism":
			plain = strings.EqualFold(v, "PLAIN")
		case "tls", "ssl":
			secure = strings.EqualFold(v, "true")
		}
	}
	if !plain || secure || tlsOn(cfg["tls"]) {
		return nil
	}
	for _, h := range strings.Split(hosts, ",") {
		if u, err := url.Parse("mongodb://" + h); err != nil || !loopback(u.Hostname()) {
			return []Unverified{{Field: path.Child("uri"), Setting: "authMechanism=PLAIN without TLS", Effect: effectMongoPlain}}
		}
	}
	return nil
}

// tlsOn says whether a sink's tls block turns TLS on, as sinktls.Config does: enabled, or
// anything only TLS uses.
func tlsOn(v any) bool {
	t, _ := v.(map[string]any)
	on, _ := t["enabled"].(bool)
	return on || t["caSecretRef"] != nil || t["clientCertSecretRef"] != nil || t["insecureSkipVerify"] == true
}

// natsPlain reports a NATS sink with a secretRef, without TLS, and a nats:// (or ws://, or
// scheme-less) server on another machine: the client logs in with what the Secret holds, a token or a password in the clear
// among them (the spec cannot tell which), unless the server asks for TLS — which an impostor
// does not.
func natsPlain(path *field.Path, v any) []Unverified {
	cfg, _ := v.(map[string]any)
	if cfg["secretRef"] == nil || tlsOn(cfg["tls"]) {
		return nil
	}
	servers, _ := cfg["servers"].([]any)
	for i, s := range servers {
		raw, _ := s.(string)
		u, err := url.Parse(natsURL(raw))
		plaintext := err == nil && (strings.EqualFold(u.Scheme, "nats") || strings.EqualFold(u.Scheme, "ws"))
		if plaintext && !loopback(u.Hostname()) {
			return []Unverified{{Field: path.Child("servers").Index(i), Setting: "nats:// with secretRef and without TLS", Effect: effectNATS}}
		}
	}
	return nil
}

// natsURL is a NATS server as nats.go reads it: one without a scheme ("nats.example:4222",
// "10.0.0.5:4222", which net/url would take for a scheme or refuse) is nats://.
func natsURL(server string) string {
	if !strings.Contains(server, "://") {
		return "nats://" + server
	}
	return server
}

// kafkaPlain reports SASL PLAIN without TLS: PLAIN sends the password itself, so without TLS
// whoever sits between the agent and the broker reads it. (SCRAM proves the password without
// sending it.)
func kafkaPlain(path *field.Path, v any) []Unverified {
	cfg, _ := v.(map[string]any)
	if mech, _ := cfg["saslMechanism"].(string); mech != "PLAIN" {
		return nil
	}
	if tlsOn(cfg["tls"]) {
		return nil
	}
	return []Unverified{{Field: path.Child("saslMechanism"), Setting: "PLAIN without TLS", Effect: effectPassword}}
}

// credentialURLs are, per sink type, the fields holding URLs a credential from secretRef is
// sent to: git's basic auth or token, GitLab's token (to the repository and the API), the
// OAuth token GCS and BigQuery present, and an Azure shared access signature. (S3 signs its
// requests: its secret key never crosses the connection.)
var credentialURLs = map[string][]string{
	"git":       {"url"},
	"gitlab":    {"url", "baseURL"},
	"gcs":       {"endpoint"},
	"bigquery":  {"endpoint"},
	"azureBlob": {"endpoint"},
}

// httpCredentials reports an http:// URL of a sink with a secretRef whose credential would be
// sent to it in plaintext. Loopback hosts are left out: the connection stays in the agent's
// pod (and reaching them needs the agent's --allow-local-sinks anyway).
func httpCredentials(path *field.Path, spec map[string]any) []Unverified {
	var found []Unverified
	for typ, fields := range credentialURLs {
		cfg, ok := spec[typ].(map[string]any)
		if !ok || cfg["secretRef"] == nil {
			continue
		}
		for _, f := range fields {
			if raw, _ := cfg[f].(string); plaintextRemote(raw) {
				found = append(found, Unverified{Field: path.Child(typ, f), Setting: "http:// with secretRef", Effect: effectHTTP})
			}
		}
	}
	return found
}

// plaintextRemote says whether raw is an http:// URL of a host other than loopback.
func plaintextRemote(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && strings.EqualFold(u.Scheme, "http") && !loopback(u.Hostname())
}

// loopback says whether host names this machine: localhost or a loopback address.
func loopback(host string) bool {
	host = strings.ToLower(host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
