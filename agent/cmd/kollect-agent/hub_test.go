package main

import (
	"strings"
	"testing"
)

// The agent's own namespace holds its hub credentials: the flags refuse to open it to bundles,
// and objects that name no namespace go to one the admin listed.
func TestHubNamespaceFlags(t *testing.T) {
	for _, tc := range []struct {
		namespaces, def, want, err string
	}{
		{"", "", "", ""},
		{"fleet,team-a", "", "fleet", ""},
		{"*,team-a", "", "team-a", ""},
		{"*", "", "", ""},
		{"*", "team-b", "team-b", ""},
		{"fleet", "team-a", "", "--hub-default-namespace team-a is not one of --hub-namespaces (fleet)"},
		{"fleet,kollect-system", "", "", "--hub-namespaces lists kollect-system, the agent's own namespace"},
		{"*", "kollect-system", "", "--hub-default-namespace kollect-system is the agent's own namespace"},
	} {
		h := hubFlags{urls: urlList{"https://hub.example:8443"}, namespaces: tc.namespaces, defaultNamespace: tc.def, own: "kollect-system"}
		o, err := h.options()
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q/%q: err = %v, want %q", tc.namespaces, tc.def, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q/%q: %v", tc.namespaces, tc.def, err)
		case o.DefaultNamespace != tc.want:
			t.Errorf("%q/%q: default namespace %q, want %q", tc.namespaces, tc.def, o.DefaultNamespace, tc.want)
		}
	}
}
