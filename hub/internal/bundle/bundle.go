package bundle

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"kollect.dev/api/crds"
	kvalidation "kollect.dev/api/validation"
	"kollect.dev/expr"
)

// ObjectRef names one object of a bundle.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// String is "Kind namespace/name" (or "Kind name" when cluster-scoped), as used in messages.
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// InvalidError lists what is wrong with a bundle, one line per offending object.
type InvalidError struct {
	Problems []string
}

func (e *InvalidError) Error() string {
	return "invalid bundle:\n" + strings.Join(e.Problems, "\n")
}

// Validator checks bundles against the Kollect CRDs. It is built once and safe for concurrent
// use.
type Validator struct {
	kinds map[string]*kindSchema
}

// NewValidator loads the CRD schemas embedded in kollect.dev/api and the expression
// environment the agent compiles in (kollect.dev/expr).
func NewValidator() (*Validator, error) {
	kinds, err := loadSchemas(crds.FS)
	if err != nil {
		return nil, fmt.Errorf("loading Kollect CRD schemas: %w", err)
	}
	// Built once per process and shared; a failure here is a broken build, not a bad bundle.
	if _, err := expr.Env(); err != nil {
		return nil, err
	}
	return &Validator{kinds: kinds}, nil
}

// Validate parses multi-document YAML and checks every object. It returns the objects in
// document order, or an *InvalidError naming each offending object. A document that is not
// valid YAML does not hide the problems of the others: every document is checked.
func (v *Validator) Validate(ctx context.Context, manifests string) ([]ObjectRef, error) {
	docs, readErr := splitDocuments(manifests)
	var (
		refs     []ObjectRef
		problems []string
		seen     = map[ObjectRef]bool{}
	)
	for _, d := range docs {
		if d.err != nil {
			problems = append(problems, d.err.Error())
			continue
		}
		if d.obj == nil {
			continue // a document of only comments
		}
		ref, objProblems := v.checkObject(ctx, d.obj)
		if ref.Kind == "" {
			ref.Kind = fmt.Sprintf("document %d", d.n)
		}
		if ref.Name != "" && seen[ref] {
			objProblems = append(objProblems, "appears more than once in the bundle")
		}
		seen[ref] = true
		if len(objProblems) > 0 {
			problems = append(problems, ref.String()+": "+strings.Join(objProblems, "; "))
			continue
		}
		refs = append(refs, ref)
	}
	if readErr != nil {
		problems = append(problems, readErr.Error())
	}
	if len(problems) > 0 {
		return nil, &InvalidError{Problems: problems}
	}
	if len(refs) == 0 {
		return nil, &InvalidError{Problems: []string{"the bundle holds no objects"}}
	}
	return refs, nil
}

// checkObject validates one decoded document.
func (v *Validator) checkObject(ctx context.Context, obj map[string]any) (ObjectRef, []string) {
	u := unstructured.Unstructured{Object: obj}
	ref := ObjectRef{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
	gv := strings.SplitN(ref.APIVersion, "/", 2)
	if len(gv) != 2 || gv[0] != Group {
		return ref, []string{fmt.Sprintf("apiVersion %q: only %s kinds may be distributed", ref.APIVersion, Group)}
	}
	ks, ok := v.kinds[ref.Kind]
	if !ok {
		return ref, []string{fmt.Sprintf("unknown kind %q in %s", ref.Kind, Group)}
	}
	vs, ok := ks.versions[gv[1]]
	if !ok {
		return ref, []string{fmt.Sprintf("%s has no version %q", ref.Kind, gv[1])}
	}
	var problems []string
	if ref.Name == "" {
		problems = append(problems, "metadata.name is required")
	} else if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
		problems = append(problems, "metadata.name: "+strings.Join(errs, ", "))
	}
	// A namespaced object without a namespace goes to the agent's own namespace.
	switch {
	case ks.namespaced && ref.Namespace != "":
		if errs := validation.IsDNS1123Label(ref.Namespace); len(errs) > 0 {
			problems = append(problems, "metadata.namespace: "+strings.Join(errs, ", "))
		}
	case ref.Namespace != "":
		problems = append(problems, "metadata.namespace must be empty: "+ref.Kind+" is cluster-scoped")
	}
	problems = append(problems, vs.check(ctx, obj)...)
	problems = append(problems, checkExpressions(ref.Kind, obj)...)
	if strings.HasSuffix(ref.Kind, "Sink") {
		for _, p := range kvalidation.InlineCredentials(field.NewPath("spec"), obj["spec"]) {
			problems = append(problems, p.String()+": "+kvalidation.InlineCredentialsMessage)
		}
		spec, _ := obj["spec"].(map[string]any)
		for _, p := range kvalidation.PodFiles(field.NewPath("spec"), spec) {
			problems = append(problems, p.String()+": "+kvalidation.PodFilesMessage)
		}
	}
	return ref, problems
}

// document is one non-blank document of a bundle: its number, counted from 1 over the
// non-blank documents as the dashboard's editor counts them, and the object it decodes to (nil
// for a document of only comments) or why it does not decode.
type document struct {
	n   int
	obj map[string]any
	err error
}

// splitDocuments decodes multi-document YAML (or JSON) into objects, skipping empty documents.
// A document that does not decode keeps its error and the next ones are still read; only a
// malformed separator, past which the reader cannot go on, ends the list early, with an error.
func splitDocuments(manifests string) ([]document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifests)))
	var out []document
	for {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("document %d: %w", len(out)+1, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		d := document{n: len(out) + 1}
		js, err := yaml.YAMLToJSON(raw)
		switch {
		case err != nil:
			d.err = fmt.Errorf("document %d: %w", d.n, err)
		case bytes.Equal(bytes.TrimSpace(js), []byte("null")):
			// a document of only comments: no object
		default:
			if err := utiljson.Unmarshal(js, &d.obj); err != nil {
				d.err = fmt.Errorf("document %d is not an object: %w", d.n, err)
			}
		}
		out = append(out, d)
	}
}

// Digest identifies a revision's content: the manifests and the selector's canonical JSON.
func Digest(manifests, selectorJSON string) string {
	h := sha256.New()
	h.Write([]byte(selectorJSON))
	h.Write([]byte{0})
	h.Write([]byte(manifests))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
