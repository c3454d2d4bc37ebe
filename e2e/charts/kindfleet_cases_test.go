package charts

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The values e2e/kind-fleet/run.sh installs the charts with, plus what the script sets on the
// command line, go through the same rendering, validation and dry-run as every case: the kind
// scenario cannot run here, but its chart inputs are checked.
func init() {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "e2e", "kind-fleet", name))
		if err != nil {
			panic("e2e/kind-fleet values: " + err.Error())
		}
		return string(b)
	}
	cases = append(cases,
		renderCase{name: "kind-fleet-agent", chart: "agent", values: read("agent-values.yaml") + `
clusterName: kollect-2
hub:
  url: https://172.18.0.2:30443
  caFingerprint: ` + fingerprint + `
  bootstrapToken: {token: kbt_0123456789}
`, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			hasArg(t, objs, "--cluster-labels=env=kind")
			hasArg(t, objs, "--hub-url=https://172.18.0.2:30443")
			d := one(t, objs, "Deployment")
			vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
			found := false
			for _, v := range vols {
				if v.(map[string]any)["name"] == "fleet-git" {
					found = true
				}
			}
			if !found {
				t.Error("the shared repository volume is not mounted")
			}
		}},
		renderCase{name: "kind-fleet-hub", chart: "hub", values: read("hub-values.yaml") + "tls: {hosts: [172.18.0.2]}\n",
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				svc := one(t, objs, "Service")
				if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "NodePort" {
					t.Errorf("hub Service type %q", typ)
				}
				hasArg(t, objs, "--hosts=kollect-hub,kollect-hub.kollect-system,kollect-hub.kollect-system.svc,kollect-hub.kollect-system.svc.cluster.local,172.18.0.2")
			}},
	)
}
