package snapshot

import (
	"encoding/json"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// FuzzRenderEveryFormat renders rows with arbitrary names and attribute JSON in every format
// and layout: rendering succeeds or fails with a message, never panics, and is deterministic
// (the same snapshot renders to the same bytes, which is what makes unchanged data write
// nothing). The seeds run with every `go test`.
func FuzzRenderEveryFormat(f *testing.F) {
	for _, s := range [][3]string{
		{"shop", "web", `{"replicas":3,"image":"web:1.2"}`},
		{"", "n1", `{"cpu":4.5,"labels":{"a":"b"}}`},
		{"ops", "a,b \"quoted\"\nline", `{"note":"x\ny","list":[1,"2",null,true]}`},
		{"ns/with/slashes", "../../etc/passwd", `{}`},
		{"ü", "{{.Name}}", `{"":"","\u0000":"\u2028"}`},
		{"shop", "deep", `{"a":{"b":{"c":{"d":[[[[1]]]]}}}}`},
	} {
		f.Add(s[0], s[1], s[2])
	}
	var opts []Options
	for _, format := range []v1alpha1.Format{v1alpha1.FormatYAML, v1alpha1.FormatJSON, v1alpha1.FormatNDJSON, v1alpha1.FormatCSV, v1alpha1.FormatParquet} {
		for _, mode := range []v1alpha1.LayoutMode{v1alpha1.LayoutDocument, v1alpha1.LayoutByNamespace, v1alpha1.LayoutByKind, v1alpha1.LayoutPerResource} {
			for _, comp := range []v1alpha1.Compression{v1alpha1.CompressionNone, v1alpha1.CompressionGzip} {
				o, err := NewOptions(v1alpha1.Serialization{Format: format, Compression: comp}, v1alpha1.Layout{Mode: mode}, v1alpha1.FormatYAML, true)
				if err != nil {
					f.Fatalf("%s/%s/%s: %v", format, mode, comp, err)
				}
				opts = append(opts, o)
			}
		}
	}
	f.Fuzz(func(t *testing.T, ns, name, attrs string) {
		var v map[string]any
		if json.Unmarshal([]byte(attrs), &v) != nil {
			return
		}
		raw, err := export.EncodeAttributes(v)
		if err != nil {
			return
		}
		r := export.Row{Origin: &export.Origin{Cluster: "east", Inventory: "inv", Target: "t", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: ns, Name: name, UID: "u-1", Attributes: raw}
		other := r
		other.Name, other.UID = name+"-2", "u-2"
		s := export.NewSnapshot([]export.Row{r, other})
		env := &export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: "inv", Generation: 1,
			ExportedAt: time.Unix(1700000000, 0), ItemCount: s.Len(), Checksum: s.Checksum, Rows: s.Rows}
		for _, o := range opts {
			a, errA := o.Render(env)
			b, errB := o.Render(env)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("%+v: rendering twice gave %v, then %v", o, errA, errB)
			}
			if errA != nil {
				if errA.Error() == "" {
					t.Fatalf("%+v: an error without a message", o)
				}
				continue
			}
			fa, fb := a.Files(), b.Files()
			if len(fa) != len(fb) {
				t.Fatalf("%+v: %d files, then %d", o, len(fa), len(fb))
			}
			for i := range fa {
				if fa[i].Path != fb[i].Path || fa[i].SHA256 != fb[i].SHA256 {
					t.Fatalf("%+v: file %d rendered as %s %s, then %s %s", o, i, fa[i].Path, fa[i].SHA256, fb[i].Path, fb[i].SHA256)
				}
			}
		}
	})
}
