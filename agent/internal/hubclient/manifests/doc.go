// Package manifests decodes the multi-document YAML of hub bundles and checks each object
// against the agent's local allowlist: kollect.dev kinds only, in the namespaces the cluster
// admin listed and never the agent's own, with a default namespace for objects that name none.
// The applier and bundle previews share it, so a preview evaluates exactly the objects an
// apply would admit.
package manifests
