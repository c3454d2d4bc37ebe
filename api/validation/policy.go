package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ambientClients are the sink configurations (under spec) whose client library falls back to
// the agent's own cloud identity when no secretRef is given, and whether an explicit endpoint
// turns that fallback off (the sink then talks to an emulator or proxy without credentials).
// Sinks whose schema requires a secretRef have no ambient mode and are not listed: postgres,
// and azureblob (a shared access signature or an account key from the Secret).
var ambientClients = []struct {
	key            string
	endpointIsAnon bool
}{
	{key: "s3"},                             // the AWS default chain: env, shared config, IRSA, instance roles
	{key: "gcs", endpointIsAnon: true},      // Application Default Credentials
	{key: "bigquery", endpointIsAnon: true}, // Application Default Credentials
}

// AmbientCredentials returns the secretRef fields (under path, such as spec.s3.secretRef) a
// sink spec, in its unstructured form, leaves unset where its client would then authenticate
// as the agent itself. A namespaced sink doing so borrows the agent's cloud identity for
// whoever wrote it, so only a KollectClusterScope may allow it (allowAmbientCredentials).
func AmbientCredentials(path *field.Path, spec map[string]any) []*field.Path {
	var found []*field.Path
	for _, c := range ambientClients {
		cfg, ok := spec[c.key].(map[string]any)
		if !ok {
			continue
		}
		if ref, _ := cfg["secretRef"].(map[string]any); ref != nil {
			continue
		}
		if endpoint, _ := cfg["endpoint"].(string); c.endpointIsAnon && endpoint != "" {
			continue
		}
		found = append(found, path.Child(c.key, "secretRef"))
	}
	if cfg, ok := spec["mongodb"].(map[string]any); ok && mongoAmbient(cfg) {
		found = append(found, path.Child("mongodb", "secretRef"))
	}
	return found
}
