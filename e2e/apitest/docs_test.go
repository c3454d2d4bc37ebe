package apitest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var yamlBlock = regexp.MustCompile("(?s)```ya?ml\n(.*?)```")

// TestDocsYAMLIsValid sends every Kollect object shown in a ```yaml block of docs/ (and the
// README) to the apiserver with a server-side dry run: a documented example that the API
// would refuse fails the build.
func TestDocsYAMLIsValid(t *testing.T) {
	var pages []string
	err := filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../../README.md")
	createNamespace(t, "docs")
	checked := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range yamlBlock.FindAllSubmatchIndex(raw, -1) {
			block := raw[m[2]:m[3]]
			line := 1 + bytes.Count(raw[:m[2]], []byte("\n"))
			if !bytes.Contains(block, []byte("apiVersion: kollect.dev/")) {
				continue
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(block), 4096)
			for {
				u := &unstructured.Unstructured{}
				if err := dec.Decode(&u.Object); err != nil {
					if errors.Is(err, io.EOF) {
						break
					}
					t.Errorf("%s:%d: not YAML: %v", page, line, err)
					break
				}
				if len(u.Object) == 0 || u.GetAPIVersion() != "kollect.dev/v1alpha1" {
					continue
				}
				if isNamespaced(u.GetKind()) {
					u.SetNamespace("docs")
				}
				if err := cp.Client.Create(context.Background(), u, client.DryRunAll); err != nil {
					t.Errorf("%s:%d: %s %s refused: %v", page, line, u.GetKind(), u.GetName(), err)
				}
				checked++
			}
		}
	}
	t.Logf("validated %d documented objects", checked)
}
