package rollup

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"kollect.dev/agent/internal/export"
)

func row(t testing.TB, target, ns, name string, attrs map[string]any) export.Row {
	t.Helper()
	enc, err := export.EncodeAttributes(attrs)
	if err != nil {
		t.Fatal(err)
	}
	return export.Row{Origin: &export.Origin{Target: target, Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: ns, Name: name, UID: ns + "-" + name, Attributes: enc}
}

// summary renders rows as name → attributes for comparison.
func summary(rows []export.Row) map[string]string {
	out := map[string]string{}
	for _, r := range rows {
		out[r.Name] = string(r.Attributes)
	}
	return out
}

func TestGroupsCountsAndSums(t *testing.T) {
	rows := []export.Row{
		row(t, "a/web", "shop", "cart", map[string]any{"team": "pay", "replicas": 3}),
		row(t, "a/web", "shop", "front", map[string]any{"team": "web", "replicas": 2}),
		row(t, "a/web", "blog", "posts", map[string]any{"team": "web", "replicas": 1.5}),
		row(t, "a/other", "blog", "ignored", map[string]any{"team": "web", "replicas": 100}),
	}
	res, err := Compute(Spec{Name: "per-team", Targets: []string{"a/web"}, GroupBy: []string{"team"}, Sum: []string{"replicas"}}, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pay": `{"count":1,"group":{"team":"pay"},"sum":{"replicas":3}}`,
		"web": `{"count":2,"group":{"team":"web"},"sum":{"replicas":3.5}}`,
	}
	if got := summary(res.Rows); !equal(got, want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
	for _, r := range res.Rows {
		if r.Target != "per-team" || r.Group != "kollect.dev" || r.Version != "v1alpha1" || r.Kind != "Rollup" || len(r.UID) != 32 {
			t.Errorf("identity of %s: %+v", r.Name, r)
		}
	}
}

func TestListGroupByCountsEachElementOnce(t *testing.T) {
	rows := []export.Row{
		row(t, "t", "shop", "cart", map[string]any{"images": []any{"nginx:1", "envoy:2", "nginx:1"}}),
		row(t, "t", "shop", "front", map[string]any{"images": []any{"nginx:1"}}),
		row(t, "t", "blog", "posts", map[string]any{"images": []any{}}),
	}
	res, err := Compute(Spec{Name: "images", GroupBy: []string{".namespace", "images"}}, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"shop/nginx:1":    `{"count":2,"group":{"images":"nginx:1","namespace":"shop"}}`,
		"shop/envoy:2":    `{"count":1,"group":{"images":"envoy:2","namespace":"shop"}}`,
		"blog/" + NoValue: `{"count":1,"group":{"images":null,"namespace":"blog"}}`,
	}
	if got := summary(res.Rows); !equal(got, want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
	for _, r := range res.Rows {
		if r.Namespace == "" {
			t.Errorf("%s: a rollup grouped by .namespace carries the namespace in the row", r.Name)
		}
	}
}

func TestMissingAndNonNumericValuesAreSkippedAndCounted(t *testing.T) {
	rows := []export.Row{
		row(t, "t", "a", "one", map[string]any{"replicas": 2}),
		row(t, "t", "a", "two", map[string]any{"replicas": "three"}),
		row(t, "t", "a", "three", map[string]any{}),
		row(t, "t", "a", "four", map[string]any{"replicas": true}),
	}
	res, err := Compute(Spec{Name: "total", Sum: []string{"replicas"}}, rows)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 3 {
		t.Errorf("skipped = %d, want 3", res.Skipped)
	}
	want := map[string]string{"total": `{"count":4,"group":{},"sum":{"replicas":2}}`}
	if got := summary(res.Rows); !equal(got, want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
}

func TestMissingGroupValueIsNull(t *testing.T) {
	rows := []export.Row{row(t, "t", "a", "one", map[string]any{}), row(t, "t", "a", "two", map[string]any{"team": "x"})}
	res, err := Compute(Spec{Name: "r", GroupBy: []string{"team"}}, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{NoValue: `{"count":1,"group":{"team":null}}`, "x": `{"count":1,"group":{"team":"x"}}`}
	if got := summary(res.Rows); !equal(got, want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
}

func TestNoTargetsMeansNoRows(t *testing.T) {
	res, err := Compute(Spec{Name: "r", Targets: []string{}}, []export.Row{row(t, "t", "a", "one", nil)})
	if err != nil || len(res.Rows) != 0 {
		t.Fatalf("rows = %v, err = %v; want none", res.Rows, err)
	}
}

// TestDeterministic: the same rows in any order give the same canonical rows, identities
// included, so an unchanged total is an unchanged row and writes nothing.
func TestDeterministic(t *testing.T) {
	rows := benchRows(t, 2000)
	spec := Spec{Name: "r", GroupBy: []string{".namespace", "team", "images"}, Sum: []string{"replicas"}}
	first, err := Compute(spec, rows)
	if err != nil {
		t.Fatal(err)
	}
	rand.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	again, err := Compute(spec, rows)
	if err != nil {
		t.Fatal(err)
	}
	if export.NewSnapshot(first.Rows).Checksum != export.NewSnapshot(again.Rows).Checksum {
		t.Fatal("the same rows in another order give other rollup rows")
	}
	// Another rollup with the same groups has other identities.
	other, _ := Compute(Spec{Name: "s", GroupBy: spec.GroupBy, Sum: spec.Sum}, rows)
	if other.Rows[0].UID == first.Rows[0].UID {
		t.Error("two rollups share a row identity")
	}
}

func TestNumbersAreIntegersUntilAFloat(t *testing.T) {
	rows := []export.Row{
		{Origin: &export.Origin{Target: "t"}, Attributes: json.RawMessage(`{"n":9007199254740993}`)},
		{Origin: &export.Origin{Target: "t"}, Attributes: json.RawMessage(`{"n":1}`)},
	}
	res, err := Compute(Spec{Name: "r", Sum: []string{"n"}}, rows)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Rows[0].Attributes); got != `{"count":2,"group":{},"sum":{"n":9007199254740994}}` {
		t.Errorf("attributes = %s: integers must sum exactly", got)
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// benchRows are n Deployments over 50 namespaces and 20 teams, each with two of 200 images.
func benchRows(t testing.TB, n int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = row(t, "t", fmt.Sprintf("ns-%02d", i%50), fmt.Sprintf("d-%06d", i), map[string]any{
			"team": fmt.Sprintf("team-%02d", i%20), "replicas": i % 7,
			"images": []any{fmt.Sprintf("registry.example/app-%03d:1", i%200), "registry.example/sidecar:2"},
		})
	}
	slices.SortFunc(rows, func(a, b export.Row) int { return export.Compare(&a, &b) })
	return rows
}

// BenchmarkRollup100k is one build's rollup work at 100k rows: images per namespace (a list
// group-by) and replicas per team, as docs/rollups.md shows them.
func BenchmarkRollup100k(b *testing.B) {
	rows := benchRows(b, 100_000)
	specs := []Spec{
		{Name: "images-per-namespace", GroupBy: []string{".namespace", "images"}},
		{Name: "replicas-per-team", GroupBy: []string{"team"}, Sum: []string{"replicas"}},
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, s := range specs {
			if _, err := Compute(s, rows); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestValuesWithJSONPunctuation: values holding quotes, brackets and commas are read whole.
func TestValuesWithJSONPunctuation(t *testing.T) {
	rows := []export.Row{
		{Origin: &export.Origin{Target: "t"}, Attributes: json.RawMessage(`{"a":"x\",}]{","b":{"k":[1,"]"]},"c":[["p","q"],{"r":"}"}],"n":2}`)},
		{Origin: &export.Origin{Target: "t"}, Attributes: json.RawMessage(` { "c" : [ ["p","q"] ] , "n" : 3 } `)},
	}
	res, err := Compute(Spec{Name: "r", GroupBy: []string{"c"}, Sum: []string{"n"}}, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		`["p","q"]`: `{"count":2,"group":{"c":["p","q"]},"sum":{"n":5}}`,
		`{"r":"}"}`: `{"count":1,"group":{"c":{"r":"}"}},"sum":{"n":2}}`,
	}
	if got := summary(res.Rows); !equal(got, want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
	if _, err := Compute(Spec{Name: "r", Sum: []string{"n"}}, []export.Row{{Origin: &export.Origin{Target: "t"}, Attributes: json.RawMessage(`{"n":`)}}); err == nil {
		t.Error("truncated attributes were accepted")
	}
}

// FuzzFields: for any JSON object, fields finds each key's value as encoding/json does (the
// last one of a duplicated key wins in both), and never panics on other input.
func FuzzFields(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1,"b":[1,{"c":"]"}],"d":"x\"y"}`, ` { "a" : null , "a" : true } `, `{"a":`, `[1]`, `{"a":"\u005d"}`, `{"\u0061":1}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		keys := []string{"a", "b", "d"}
		out := make([][]byte, len(keys))
		err := fields([]byte(doc), keys, out)
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(doc), &want) != nil || want == nil {
			return // not an object (null decodes to no map): fields may say anything but must not panic
		}
		if err != nil {
			t.Fatalf("fields(%q): %v; encoding/json reads it", doc, err)
		}
		for i, k := range keys {
			if w, ok := want[k]; ok != (out[i] != nil) || ok && string(w) != string(out[i]) {
				t.Fatalf("fields(%q)[%s] = %q, encoding/json: %q (present %v)", doc, k, out[i], w, ok)
			}
		}
	})
}
