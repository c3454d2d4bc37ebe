package charts

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
)

// writeSchemas writes one standalone JSON schema per kind the API server serves, generated from
// its OpenAPI v3 documents, into dir, named as kubeconform's -schema-location template
// schemaTemplate expects. This is how kubeconform validates offline: the schemas are those of
// the exact apiserver version the tests run (with the CRDs installed, their schemas too), never
// downloaded. Object schemas are made strict (additionalProperties: false) unless they
// preserve unknown fields, so a misspelt field fails here as it would be pruned or refused there.
// Only kinds in want (lower-case kind names) are written, since each file carries the whole
// group-version's definitions.
func writeSchemas(cfg *rest.Config, dir string, want map[string]bool) (int, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	get := func(path string) (map[string]any, error) {
		resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + path)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
		}
		out := map[string]any{}
		return out, json.NewDecoder(resp.Body).Decode(&out)
	}
	index, err := get("/openapi/v3")
	if err != nil {
		return 0, err
	}
	paths, _ := index["paths"].(map[string]any)
	written := 0
	for _, p := range paths {
		url, _ := p.(map[string]any)["serverRelativeURL"].(string)
		if url == "" {
			continue
		}
		doc, err := get(url)
		if err != nil {
			return written, err
		}
		comps, _ := doc["components"].(map[string]any)
		schemas, _ := comps["schemas"].(map[string]any)
		if len(schemas) == 0 {
			continue
		}
		// Draft 4 (kubeconform's default) resolves refs into "definitions".
		defs := rewriteRefs(strictify(schemas)).(map[string]any)
		for name, s := range schemas {
			gvks, _ := s.(map[string]any)["x-kubernetes-group-version-kind"].([]any)
			for _, g := range gvks {
				gvk, _ := g.(map[string]any)
				group, _ := gvk["group"].(string)
				version, _ := gvk["version"].(string)
				kind, _ := gvk["kind"].(string)
				if !want[strings.ToLower(kind)] {
					continue
				}
				// Schemas of several group-versions may carry a kind (e.g. meta/v1 types); the
				// document of the kind's own group-version is the one whose URL names it.
				gv := "api/" + version
				if group != "" {
					gv = "apis/" + group + "/" + version
				}
				if !strings.HasPrefix(url, "/openapi/v3/"+gv+"?") {
					continue
				}
				file := filepath.Join(dir, schemaFile(kind, group, version))
				raw, err := json.Marshal(map[string]any{
					"$schema":     "http://json-schema.org/draft-04/schema#",
					"allOf":       []any{map[string]any{"$ref": "#/definitions/" + name}},
					"definitions": defs,
				})
				if err != nil {
					return written, err
				}
				if err := os.WriteFile(file, raw, 0o644); err != nil {
					return written, err
				}
				written++
			}
		}
	}
	return written, nil
}

// schemaTemplate is kubeconform's -schema-location for the files writeSchemas names.
const schemaTemplate = "{{ .ResourceKind }}-{{ .Group }}-{{ .ResourceAPIVersion }}.json"

// schemaFile follows kubeconform's template data: for a core kind ("v1") the group part is the
// version itself.
func schemaFile(kind, group, version string) string {
	if group == "" {
		group = version
	}
	return fmt.Sprintf("%s-%s-%s.json", strings.ToLower(kind), group, version)
}

// strictify returns a copy of v in which every object schema listing properties refuses others.
func strictify(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t)+1)
		for k, x := range t {
			if k == "properties" {
				// Keys of properties are field names, not schemas: recurse into each value.
				props := map[string]any{}
				for pk, pv := range x.(map[string]any) {
					props[pk] = strictify(pv)
				}
				out[k] = props
				continue
			}
			out[k] = strictify(x)
		}
		_, hasProps := t["properties"]
		_, hasAdditional := t["additionalProperties"]
		preserve, _ := t["x-kubernetes-preserve-unknown-fields"].(bool)
		if hasProps && !hasAdditional && !preserve {
			out["additionalProperties"] = false
		}
		// OpenAPI's nullable is not JSON Schema; a null where the API allows it must validate.
		if n, _ := t["nullable"].(bool); n {
			if typ, ok := t["type"].(string); ok {
				out["type"] = []any{typ, "null"}
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = strictify(x)
		}
		return out
	}
	return v
}

// rewriteRefs points OpenAPI component refs at the draft-4 definitions section.
func rewriteRefs(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "$ref" {
				t[k] = strings.Replace(s, "#/components/schemas/", "#/definitions/", 1)
				continue
			}
			t[k] = rewriteRefs(x)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = rewriteRefs(x)
		}
		return t
	}
	return v
}
