package bundle

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const goodBundle = `# a comment-only document first
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata:
  name: deployments
  namespace: team-a
spec:
  target: {group: apps, version: v1, kind: Deployment}
  attributes:
    - name: replicas
      jsonPath: "{.spec.replicas}"
      type: int
    - name: images
      cel: "object.spec.template.spec.containers.map(c, c.image)"
      type: list
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata:
  name: deployments
spec:
  profileRef: {name: deployments}
  match: "object.spec.replicas > 0"
`

func newValidator(t *testing.T) *Validator {
	t.Helper()
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestValidBundle(t *testing.T) {
	refs, err := newValidator(t).Validate(context.Background(), goodBundle)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs[0].String() != "KollectProfile team-a/deployments" || refs[1].Kind != "KollectTarget" {
		t.Fatalf("refs: %+v", refs)
	}
}

// problems validates manifests and returns the problem lines, failing when it is accepted.
func problems(t *testing.T, v *Validator, manifests string) []string {
	t.Helper()
	_, err := v.Validate(context.Background(), manifests)
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("bundle accepted (err=%v):\n%s", err, manifests)
	}
	return inv.Problems
}

func TestBadCELNamesTheObject(t *testing.T) {
	v := newValidator(t)
	bad := strings.Replace(goodBundle, "c.image)", "c.image", 1)
	bad = strings.Replace(bad, `match: "object.spec.replicas > 0"`, `match: "object.metadata.name"`, 1)
	got := problems(t, v, bad)
	if len(got) != 1 || !strings.HasPrefix(got[0], "KollectProfile team-a/deployments: ") ||
		!strings.Contains(got[0], "spec.attributes[1] (images).cel: CEL compile error") {
		t.Fatalf("problems: %q", got)
	}
	got = problems(t, v, strings.Replace(goodBundle, `jsonPath: "{.spec.replicas}"`, `jsonPath: "{.spec.replicas[}"`, 1))
	if len(got) != 1 || !strings.Contains(got[0], "KollectProfile team-a/deployments: spec.attributes[0] (replicas).jsonPath: JSONPath parse error") {
		t.Fatalf("problems: %q", got)
	}
	// A match must be boolean; object.metadata.name is dyn, so it compiles — but a string
	// literal does not.
	got = problems(t, v, strings.Replace(goodBundle, `match: "object.spec.replicas > 0"`, `match: "'yes'"`, 1))
	if len(got) != 1 || !strings.Contains(got[0], "KollectTarget deployments: spec.match: CEL match must return bool") {
		t.Fatalf("problems: %q", got)
	}
}

func TestSchemaProblemsOnePerObject(t *testing.T) {
	v := newValidator(t)
	manifests := `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: both, namespace: ns}
spec:
  target: {version: v1, kind: Pod}
  attributes:
    - {name: x, jsonPath: "{.a}", cel: "object.a"}
  extra: true
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectThing
metadata: {name: x}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterScope
metadata: {name: cs, namespace: should-not-be}
spec: {}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: Bad_Name}
spec:
  target: {version: v1, kind: pod}
  attributes: []
`
	got := problems(t, v, manifests)
	t.Logf("problems:\n%s", strings.Join(got, "\n"))
	want := []string{
		"KollectProfile ns/both: ",
		"Deployment ns/web: apiVersion \"apps/v1\": only kollect.dev kinds",
		"KollectThing x: unknown kind",
		"KollectClusterScope should-not-be/cs: metadata.namespace must be empty",
		"KollectProfile Bad_Name: metadata.name",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
	for _, frag := range []string{"spec.extra: unknown field", "exactly one of jsonPath or cel"} {
		if !strings.Contains(got[0], frag) {
			t.Errorf("first problem %q lacks %q", got[0], frag)
		}
	}
	for _, frag := range []string{"spec.target.kind", "set attributes, fullObject or both"} {
		if !strings.Contains(got[4], frag) {
			t.Errorf("last problem %q lacks %q", got[4], frag)
		}
	}
}

func TestDuplicatesAndEmpty(t *testing.T) {
	v := newValidator(t)
	got := problems(t, v, goodBundle+"---\n"+strings.SplitN(goodBundle, "---\n", 3)[2])
	if len(got) != 1 || !strings.Contains(got[0], "KollectTarget deployments: appears more than once") {
		t.Fatalf("problems: %q", got)
	}
	if got := problems(t, v, "# nothing\n"); !strings.Contains(got[0], "no objects") {
		t.Fatalf("problems: %q", got)
	}
	if got := problems(t, v, "a: [1,\n"); !strings.Contains(got[0], "document 1") {
		t.Fatalf("problems: %q", got)
	}
}

func TestDigestAndDiff(t *testing.T) {
	if Digest("a", "{}") == Digest("a", `{"matchLabels":{"x":"y"}}`) || Digest("a", "{}") != Digest("a", "{}") {
		t.Fatal("digest must cover manifests and selector, and be stable")
	}
	d, err := Diff("base", 1, 2, "a: 1\nb: 2\n", "a: 1\nb: 3\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{"--- base@1", "+++ base@2", "-b: 2", "+b: 3", " a: 1"} {
		if !strings.Contains(d, frag) {
			t.Errorf("diff lacks %q:\n%s", frag, d)
		}
	}
	if d, _ := Diff("base", 1, 2, "same", "same"); d != "" {
		t.Errorf("diff of equal manifests: %q", d)
	}
}

// A sink whose URL carries credentials is refused before it is stored, with the words the
// agent's webhook uses, and without echoing the credential.
func TestInlineCredentialsRefused(t *testing.T) {
	got := problems(t, newValidator(t), `apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: repo, namespace: team-a}
spec:
  type: git
  git: {url: "https://bot:pl4nted@git.example.com/inv.git"}
`)
	if len(got) != 1 || !strings.Contains(got[0], "KollectSnapshotSink team-a/repo") ||
		!strings.Contains(got[0], "spec.git.url: credentials in URLs are refused") || strings.Contains(got[0], "pl4nted") {
		t.Fatalf("problems: %q", got)
	}
}

// A document that is not valid YAML does not hide the others: every document's problems are
// reported, numbered over the non-blank documents as the dashboard's editor counts them.
func TestEveryDocumentsProblems(t *testing.T) {
	got := problems(t, newValidator(t), `# only a comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: team-a}
data: {a: b}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata:
  name: broken
spec:
  target: {version: v1, kind: Pod
---

---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: t, namespace: team-a}
spec: {}
---
- a list
---
apiVersion: kollect.dev/v1alpha1
metadata: {name: kindless}
`)
	want := []string{
		`ConfigMap team-a/settings: apiVersion "v1": only kollect.dev kinds may be distributed`,
		"document 3: yaml: line 6: did not find expected ',' or '}'",
		"KollectTarget team-a/t: spec.profileRef: Required value",
		"document 5 is not an object: ",
		"document 6 kindless: unknown kind",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}
