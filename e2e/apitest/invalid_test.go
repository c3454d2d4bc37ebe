package apitest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func mustParse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("bad test YAML: %v", err)
	}
	return u
}

// TestInvalidObjectsAreRefused sends objects the API server must refuse and checks that the
// refusal says why.
func TestInvalidObjectsAreRefused(t *testing.T) {
	createNamespace(t, "invalid")
	cases := []struct {
		name, doc, want string
	}{
		{"decode on a kind other than Secret", `
kind: KollectProfile
spec:
  target: {version: v1, kind: ConfigMap}
  decode: HelmRelease
  attributes: [{name: chart, jsonPath: "{.release.chart}"}]`, "decode HelmRelease reads Helm's release Secrets: set target to {version: v1, kind: Secret}"},
		{"decode on a Secret of another group", `
kind: KollectProfile
spec:
  target: {group: example.com, version: v1, kind: Secret}
  decode: HelmRelease
  attributes: [{name: chart, jsonPath: "{.release.chart}"}]`, "decode HelmRelease reads Helm's release Secrets: set target to {version: v1, kind: Secret}"},
		{"unknown decoder", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Secret}
  decode: Kustomize
  attributes: [{name: chart, jsonPath: "{.release.chart}"}]`, `supported values: "HelmRelease"`},
		{"decodeOptions without decode", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Secret}
  decodeOptions: {values: Redacted}
  attributes: [{name: chart, jsonPath: "{.release.chart}"}]`, "decodeOptions needs decode"},
		{"values exported as they are", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Secret}
  decode: HelmRelease
  decodeOptions: {values: Plain}
  attributes: [{name: chart, jsonPath: "{.release.chart}"}]`, `supported values: "Omit", "Redacted"`},
		{"attribute with both jsonPath and cel", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Pod}
  attributes: [{name: a, jsonPath: "{.a}", cel: "object.a"}]`, "exactly one of jsonPath or cel must be set"},
		{"attribute with neither jsonPath nor cel", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Pod}
  attributes: [{name: a}]`, "exactly one of jsonPath or cel must be set"},
		{"duplicate attribute names", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Pod}
  attributes: [{name: a, jsonPath: "{.a}"}, {name: a, cel: "1"}]`, "Duplicate value"},
		{"unknown attribute type", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Pod}
  attributes: [{name: a, jsonPath: "{.a}", type: date}]`, `supported values: "string", "int", "float", "bool", "list", "map", "object"`},
		{"attribute name with a dash", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Pod}
  attributes: [{name: my-attr, jsonPath: "{.a}"}]`, "spec.attributes[0].name"},
		{"profile without attributes", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Pod}
  attributes: []`, "set attributes, fullObject or both"},
		{"whole Secrets", `
kind: KollectProfile
spec:
  target: {version: v1, kind: Secret}
  fullObject: {}`, "fullObject cannot export Secrets"},
		{"full-object size limit too small", `
kind: KollectProfile
spec:
  target: {version: v1, kind: ConfigMap}
  fullObject: {maxBytes: 10}`, "spec.fullObject.maxBytes"},
		{"lower-case kind", `
kind: KollectProfile
spec:
  target: {version: v1, kind: pod}
  attributes: [{name: a, jsonPath: "{.a}"}]`, "spec.target.kind"},
		{"target without profileRef", `
kind: KollectTarget
spec: {}`, "spec.profileRef: Required value"},
		{"namespace both included and excluded", `
kind: KollectTarget
spec:
  profileRef: {name: p}
  namespaces: {include: [a, b], exclude: [b]}`, "a namespace cannot be both included and excluded"},
		{"inventory without targets", `
kind: KollectInventory
spec:
  sinks: {snapshot: [{name: s}]}`, "set targets or targetSelector"},
		{"debounce longer than maxDelay", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  debounce: 2m
  maxDelay: 1m`, "debounce must not exceed maxDelay"},
		{"debounce that is not a duration", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  debounce: five seconds`, "spec.debounce"},
		{"resyncInterval of 1ns with debounce 0s", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  debounce: 0s
  resyncInterval: 1ns`, "resyncInterval must be at least 10s"},
		{"resyncInterval below 10s", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  resyncInterval: 9s`, "resyncInterval must be at least 10s"},
		{"maxDelay of 1ns", `
kind: KollectInventory
spec:
  targets: [{name: t}]
  debounce: 0s
  maxDelay: 1ns`, "maxDelay must be at least 1s"},
		{"cluster inventory resyncInterval below 10s", `
kind: KollectClusterInventory
spec:
  targets: [{name: t}]
  resyncInterval: 100ms`, "resyncInterval must be at least 10s"},
		{"cluster inventory maxDelay below 1s", `
kind: KollectClusterInventory
spec:
  targets: [{name: t}]
  debounce: 0s
  maxDelay: 500ms`, "maxDelay must be at least 1s"},
		{"snapshot sink timeout below 1s", `
kind: KollectSnapshotSink
spec:
  type: git
  git: {url: "https://git.example.com/x.git"}
  timeout: 1ns`, "timeout must be at least 1s"},
		{"database sink timeout below 1s", `
kind: KollectDatabaseSink
spec:
  type: postgres
  postgres: {host: db, database: inv, secretRef: {name: s}}
  timeout: 500ms`, "timeout must be at least 1s"},
		{"postgres statementTimeout below 1s", `
kind: KollectDatabaseSink
spec:
  type: postgres
  postgres: {host: db, database: inv, secretRef: {name: s}, statementTimeout: 10ms}`, "statementTimeout must be at least 1s"},
		{"event sink timeout below 1s", `
kind: KollectEventSink
spec:
  type: nats
  nats: {servers: ["nats://n:4222"]}
  timeout: 999ms`, "timeout must be at least 1s"},
		{"cluster inventory naming a KollectTarget without namespace", `
kind: KollectClusterInventory
spec:
  targets: [{kind: KollectTarget, name: t}]`, "namespace is required for KollectTarget"},
		{"git sink without its git block", `
kind: KollectSnapshotSink
spec:
  type: git
  s3: {bucket: abc}`, "spec.git is required when type is git"},
		{"unknown snapshot sink type", `
kind: KollectSnapshotSink
spec:
  type: ftp`, `supported values: "git", "gitlab", "s3", "gcs", "azureblob"`},
		{"azureblob sink without its azureBlob block", `
kind: KollectSnapshotSink
spec:
  type: azureblob
  gcs: {bucket: abc}`, "spec.azureBlob is required when type is azureblob"},
		{"azureblob sink without secretRef", `
kind: KollectSnapshotSink
spec:
  type: azureblob
  azureBlob: {account: fleetlake, container: inventory}`, "spec.azureBlob.secretRef: Required value"},
		{"azureblob account with capitals", `
kind: KollectSnapshotSink
spec:
  type: azureblob
  azureBlob: {account: FleetLake, container: inventory, secretRef: {name: s}}`, "spec.azureBlob.account: Invalid value"},
		{"azureblob container with a double hyphen", `
kind: KollectSnapshotSink
spec:
  type: azureblob
  azureBlob: {account: fleetlake, container: "in--ventory", secretRef: {name: s}}`, "container names have no consecutive hyphens"},
		{"compression on a git sink", `
kind: KollectSnapshotSink
spec:
  type: git
  git: {url: "https://git.example.com/x.git"}
  serialization: {compression: gzip}`, "compression is only supported by s3, gcs and azureblob sinks"},
		{"path template without cluster", `
kind: KollectSnapshotSink
spec:
  type: s3
  s3: {bucket: abc}
  layout: {pathTemplate: "{inventory}.json"}`, "pathTemplate must contain {cluster}"},
		{"kms key without kms encryption", `
kind: KollectSnapshotSink
spec:
  type: s3
  s3: {bucket: abc, kmsKeyID: k, serverSideEncryption: AES256}`, "kmsKeyID requires serverSideEncryption aws:kms"},
		{"postgres sink without secretRef", `
kind: KollectDatabaseSink
spec:
  type: postgres
  postgres: {host: db, database: inv}`, "spec.postgres.secretRef: Required value"},
		{"mongodb type with a postgres block", `
kind: KollectDatabaseSink
spec:
  type: mongodb
  postgres: {host: db, database: inv, secretRef: {name: s}}`, "spec.mongodb is required when type is mongodb"},
		{"kafka sink without brokers", `
kind: KollectEventSink
spec:
  type: kafka
  kafka: {brokers: [], topic: t}`, "spec.kafka.brokers"},
		{"unknown SASL mechanism", `
kind: KollectEventSink
spec:
  type: kafka
  kafka: {brokers: ["k:9092"], topic: t, saslMechanism: GSSAPI}`, "spec.kafka.saslMechanism"},
		{"scope with unknown sink family", `
kind: KollectScope
spec:
  allowedSinks: [{family: files}]`, "spec.allowedSinks[0].family"},
		{"cluster target profileRef without namespace", `
kind: KollectClusterTarget
spec:
  profileRef: {name: p}`, "spec.profileRef.namespace: Required value"},
	}
	if len(cases) < 15 {
		t.Fatalf("keep at least 15 invalid cases, have %d", len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := mustParse(t, "apiVersion: kollect.dev/v1alpha1\n"+strings.TrimSpace(tc.doc))
			obj.SetName(fmt.Sprintf("invalid-%d", i))
			if isNamespaced(obj.GetKind()) {
				obj.SetNamespace("invalid")
			}
			err := cp.Client.Create(context.Background(), obj)
			if err == nil {
				t.Fatalf("accepted, want refusal containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with\n  %v\nwant a message containing\n  %q", err, tc.want)
			}
		})
	}
}
