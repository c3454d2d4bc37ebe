package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// Doc is one object read from a file.
type Doc struct {
	File   string
	Line   int
	Object *unstructured.Unstructured
	node   *yaml.Node
}

// Where is "file:line" of the object.
func (d *Doc) Where() string { return fmt.Sprintf("%s:%d", d.File, d.Line) }

// WhereField is "file:line" of a field given as a field path (spec.attributes[1].cel); the
// object's line when the field is not in the file.
func (d *Doc) WhereField(path string) string {
	return fmt.Sprintf("%s:%d", d.File, d.LineOf(path))
}

var segment = regexp.MustCompile(`([^.\[\]]+)|\[(\d+)\]`)

// LineOf returns the line of the deepest part of path present in the document.
func (d *Doc) LineOf(path string) int {
	n, line := d.node, d.Line
	for _, m := range segment.FindAllStringSubmatch(path, -1) {
		if n == nil {
			break
		}
		var next *yaml.Node
		switch {
		case m[1] != "" && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == m[1] {
					line, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
		case m[2] != "" && n.Kind == yaml.SequenceNode:
			if i, _ := strconv.Atoi(m[2]); i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		}
		n = next
	}
	return line
}

// Load reads every object of the given files; directories contribute their *.yaml, *.yml and
// *.json files (not recursively); "-" reads stdin.
func Load(paths []string, stdin io.Reader) ([]*Doc, error) {
	var out []*Doc
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			var data []byte
			if f == "-" {
				data, err = io.ReadAll(stdin)
			} else {
				data, err = os.ReadFile(f)
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", f, err)
			}
			docs, err := Parse(f, data)
			if err != nil {
				return nil, err
			}
			out = append(out, docs...)
		}
	}
	return out, nil
}

func expand(p string) ([]string, error) {
	if p == "-" {
		return []string{p}, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	var out []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Parse reads the documents of one file's content.
func Parse(file string, data []byte) ([]*Doc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*Doc
	for {
		var root yaml.Node
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
			continue // empty document or comments only
		}
		doc, err := newDoc(file, root.Content[0])
		if err != nil {
			return nil, err
		}
		if doc.Object.IsList() {
			items, err := listItems(file, root.Content[0])
			if err != nil {
				return nil, err
			}
			out = append(out, items...)
			continue
		}
		out = append(out, doc)
	}
}

func newDoc(file string, n *yaml.Node) (*Doc, error) {
	raw, err := yaml.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: %w", file, n.Line, err)
	}
	js, err := sigsyaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: %w", file, n.Line, err)
	}
	obj := map[string]any{}
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", file, n.Line, err)
	}
	return &Doc{File: file, Line: n.Line, Object: &unstructured.Unstructured{Object: obj}, node: n}, nil
}

func listItems(file string, n *yaml.Node) ([]*Doc, error) {
	var out []*Doc
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "items" || n.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, item := range n.Content[i+1].Content {
			if item.Kind != yaml.MappingNode {
				continue
			}
			d, err := newDoc(file, item)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}
