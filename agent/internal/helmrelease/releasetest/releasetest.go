package releasetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Fixture is the path of the release Secret (JSON) helm wrote for release demo, revision 2.
func Fixture() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "sh.helm.release.v1.demo.v2.json")
}

// Secret returns the fixture's Secret in namespace ns ("" keeps the fixture's), without the
// fields the API server sets, so that it can be created.
func Secret(t testing.TB, ns string) *corev1.Secret {
	t.Helper()
	raw, err := os.ReadFile(Fixture())
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if ns != "" {
		s.Namespace = ns
	}
	s.ResourceVersion, s.UID = "", ""
	return &s
}
