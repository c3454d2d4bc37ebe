package sink

import (
	"net/netip"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/api/validation"
)

// driverReads parses uri as the driver's ApplyURI does (a mongodb+srv URI as mongodb://, with
// TLS on as SRV turns it on: the SRV and TXT lookups are not made).
func driverReads(uri string) (*connstring.ConnString, bool) {
	srv := strings.HasPrefix(uri, "mongodb+srv://")
	if srv {
		uri = "mongodb://" + strings.TrimPrefix(uri, "mongodb+srv://")
	}
	cs, err := connstring.ParseAndValidate(uri)
	if err != nil {
		return nil, false
	}
	if srv && !cs.SSLSet {
		cs.SSL = true
	}
	return cs, true
}

// onlyLoopback says whether every host the driver dials is this machine.
func onlyLoopback(hosts []string) bool {
	for _, h := range hosts {
		host := h
		if i := strings.LastIndex(h, ":"); i >= 0 && !strings.HasSuffix(h, "]") {
			host = h[:i]
		}
		host = strings.Trim(strings.ToLower(host), "[]")
		ip, err := netip.ParseAddr(host)
		if host != "localhost" && (err != nil || !ip.Unmap().IsLoopback()) {
			return false
		}
	}
	return true
}

// FuzzURIChecksAsDriverReads: the webhook's checks of a mongodb sink's uri (package
// validation, run on every sink the agent builds and every bundle the hub takes) see what the
// driver makes of the URI, not what a URL parser does: a URI the driver reads with
// verification off is refused without a grant; one that makes it read a file of the agent's
// pod (a CA, a client certificate or key) or authenticate as the pod is refused; PLAIN in
// plaintext to another machine is refused without a grant; a password is refused.
func FuzzURIChecksAsDriverReads(f *testing.F) {
	for _, s := range []string{
		"mongodb://db.example.com:27017/?tls=true", "mongodb+srv://cluster0.example.net/?retryWrites=true&w=majority",
		"mongodb://h1:27017,h2:27018/db?replicaSet=rs0;tlsInsecure=true", "mongodb://h/?TLSINSECURE=TRUE",
		"mongodb://h/?tls%49nsecure=true", "mongodb://h/?sslInsecure=true&tls=true",
		"mongodb://u?x@h/db?tlsInsecure=true", "mongodb://u?x@h/db?tlsCAFile=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
		"mongodb://h/?tlsCertificateKeyFile=/tmp/k8s-webhook-server/serving-certs/tls.key",
		"mongodb://h/?tlsCertificateFile=/etc/tls/tls.crt&tlsPrivateKeyFile=/etc/tls/tls.key",
		"mongodb://h/?authMechanism=MONGODB-OIDC&authMechanismProperties=ENVIRONMENT:k8s",
		"mongodb://h/?authMechanism=GSSAPI", "mongodb://h/?authMechanism=PLAIN", "mongodb://h/?authMechanism=PL%41IN",
		"mongodb://h/?auth%4Dechanism=PLAIN", "mongodb://u?x@h/?authMechanism=PLAIN", "mongodb://127.0.0.1/?authMechanism=PLAIN",
		"mongodb+srv://h/?authMechanism=PLAIN&tls=false", "mongodb://user:pw@h/", "mongodb://user@h/?authMechanism=MONGODB-X509",
		"mongodb://h#x:pw@h2/", "mongodb://h/?tlsCertificateKeyFilePassword=pw", "mongodb://%2Ftmp%2Fmongodb-27017.sock",
		"mongodb://[::1]:27017,[fe80::1%25eth0]:27017/?authMechanism=PLAIN",
	} {
		f.Add(s)
	}
	path := field.NewPath("spec")
	uriPath := path.Child("mongodb", "uri").String()
	f.Fuzz(func(t *testing.T, uri string) {
		cs, ok := driverReads(uri)
		if !ok {
			return // the driver refuses it: the sink never connects
		}
		spec := map[string]any{"mongodb": map[string]any{"uri": uri, "database": "d", "secretRef": map[string]any{"name": "s"}}}
		insecure := validation.InsecureTLS(path, spec)
		unverified := func(what string) bool {
			for _, u := range insecure {
				if u.Field.String() == uriPath && strings.Contains(u.Setting, what) {
					return true
				}
			}
			return false
		}
		if cs.SSLInsecure && !unverified("=true") {
			t.Fatalf("%q: the driver skips verification (tlsInsecure), and InsecureTLS says %v", uri, insecure)
		}
		plain := strings.EqualFold(cs.AuthMechanism, "PLAIN") && !cs.SSL
		if plain && !onlyLoopback(cs.Hosts) && !unverified("PLAIN") {
			t.Fatalf("%q: the driver sends a PLAIN password in plaintext to %v, and InsecureTLS says %v", uri, cs.Hosts, insecure)
		}
		files := cs.SSLCaFileSet || cs.SSLClientCertificateKeyFileSet || cs.SSLCertificateFileSet || cs.SSLPrivateKeyFileSet
		mech := strings.ToUpper(cs.AuthMechanism)
		if (files || mech == "MONGODB-OIDC" || mech == "GSSAPI") && len(validation.PodFiles(path, spec)) == 0 {
			t.Fatalf("%q: the driver reads the pod's files or identity (files %v, mechanism %q), and PodFiles says nothing", uri, files, cs.AuthMechanism)
		}
		if (cs.PasswordSet || cs.SSLClientCertificateKeyPasswordSet) && len(validation.InlineCredentials(path, spec)) == 0 {
			t.Fatalf("%q: the driver reads a password from the uri, and InlineCredentials says nothing", uri)
		}
	})
}
