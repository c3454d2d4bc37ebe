package validation

import (
	"net/url"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// PodFilesMessage is what a refusal of PodFiles says.
const PodFilesMessage = "options that read the agent pod's own files or identity (tlsCAFile, tlsCertificateKeyFile, tlsCertificateFile, tlsPrivateKeyFile, " +
	"authMechanism MONGODB-OIDC or GSSAPI) are refused: give certificates in tls.caSecretRef and tls.clientCertSecretRef, credentials in secretRef"

// mongoFileOptions are the MongoDB connection string options (lower case, as the driver
// matches them) that name a file the driver reads: the CA, or a client certificate and key
// (in one file, or in two: tlsCertificateFile and tlsPrivateKeyFile).
// The file would be the agent pod's, not the sink author's, so a sink could present the
// agent's own key material (its webhook serving key, a mounted client certificate) to a
// server of its author's choosing.
var mongoFileOptions = []string{"tlscafile", "tlscertificatekeyfile", "sslcertificateauthorityfile", "sslclientcertificatekeyfile",
	"tlscertificatefile", "tlsprivatekeyfile"}

// PodFiles returns the fields (under path, such as spec.mongodb.uri) of a sink spec, in its
// unstructured form, whose settings make the client read a file of the agent's pod, or
// authenticate with the pod's own machine identity: MONGODB-OIDC with an ENVIRONMENT reads
// the pod's service account token (or its cloud identity), GSSAPI its Kerberos credentials.
// Sinks take certificates, keys and credentials from Secrets only.
func PodFiles(path *field.Path, spec map[string]any) []*field.Path {
	cfg, _ := spec["mongodb"].(map[string]any)
	uri, _ := cfg["uri"].(string)
	if len(mongoOptions(uri, mongoFileOptions)) > 0 {
		return []*field.Path{path.Child("mongodb", "uri")}
	}
	for _, m := range mongoValues(uri, "authmechanism") {
		if strings.EqualFold(m, "MONGODB-OIDC") || strings.EqualFold(m, "GSSAPI") {
			return []*field.Path{path.Child("mongodb", "uri")}
		}
	}
	return nil
}

// mongoAmbient reports a mongodb sink that authenticates as the agent: MONGODB-AWS without a
// secretRef takes the AWS default chain of the agent's environment (IRSA, the instance role).
func mongoAmbient(cfg map[string]any) bool {
	uri, _ := cfg["uri"].(string)
	if cfg["secretRef"] != nil {
		return false
	}
	for _, m := range mongoValues(uri, "authmechanism") {
		if strings.EqualFold(m, "MONGODB-AWS") {
			return true
		}
	}
	return false
}

// mongoOptions returns the options of uri, among names (lower case), that are set.
func mongoOptions(uri string, names []string) []string {
	var found []string
	for _, n := range names {
		if len(mongoValues(uri, n)) > 0 {
			found = append(found, n)
		}
	}
	sort.Strings(found)
	return found
}

// mongoValues returns the values of option name (lower case) in a MongoDB URI's query, split
// as the driver splits it (see mongoPairs): a URI with several hosts is no URL net/url parses.
func mongoValues(uri, name string) []string {
	var out []string
	for _, pair := range mongoPairs(uri) {
		k, v, _ := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err == nil && strings.ToLower(key) == name {
			if value, err := url.QueryUnescape(v); err == nil {
				out = append(out, value)
			}
		}
	}
	return out
}
