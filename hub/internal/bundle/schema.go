package bundle

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"kollect.dev/api/crds"
)

// Group is the only API group a bundle may hold.
const Group = "kollect.dev"

// kindSchema is what validating one kind needs, built once from its CRD.
type kindSchema struct {
	namespaced bool
	versions   map[string]*versionSchema
}

type versionSchema struct {
	structural *structuralschema.Structural
	openAPI    validation.SchemaValidator
	cel        *schemacel.Validator // nil when the version has no x-kubernetes-validations
}

// loadSchemas builds the validators of every kind from the CRDs embedded in kollect.dev/api.
func loadSchemas(files fs.FS) (map[string]*kindSchema, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing CRDs: %w", err)
	}
	kinds := map[string]*kindSchema{}
	for _, name := range names {
		raw, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, fmt.Errorf("reading CRD %s: %w", name, err)
		}
		var v1crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &v1crd); err != nil {
			return nil, fmt.Errorf("decoding CRD %s: %w", name, err)
		}
		if v1crd.Spec.Group != Group {
			continue
		}
		var crd apiextensions.CustomResourceDefinition
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1crd, &crd, nil); err != nil {
			return nil, fmt.Errorf("converting CRD %s: %w", name, err)
		}
		ks := &kindSchema{namespaced: crd.Spec.Scope == apiextensions.NamespaceScoped, versions: map[string]*versionSchema{}}
		for _, v := range crd.Spec.Versions {
			// The internal form hoists a schema shared by every version to spec.validation.
			schema := v.Schema
			if schema == nil {
				schema = crd.Spec.Validation
			}
			if !v.Served || schema == nil || schema.OpenAPIV3Schema == nil {
				continue
			}
			vs, err := newVersionSchema(schema.OpenAPIV3Schema)
			if err != nil {
				return nil, fmt.Errorf("CRD %s version %s: %w", name, v.Name, err)
			}
			ks.versions[v.Name] = vs
		}
		kinds[crd.Spec.Names.Kind] = ks
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("no %s CRDs embedded", Group)
	}
	return kinds, nil
}

func newVersionSchema(props *apiextensions.JSONSchemaProps) (*versionSchema, error) {
	structural, err := structuralschema.NewStructural(props)
	if err != nil {
		return nil, fmt.Errorf("structural schema: %w", err)
	}
	openAPI, _, err := validation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("OpenAPI validator: %w", err)
	}
	return &versionSchema{
		structural: structural,
		openAPI:    openAPI,
		cel:        schemacel.NewValidator(structural, true, celconfig.PerCallLimit),
	}, nil
}

// check validates one object the way the API server would on create: unknown fields are
// errors (the API server would drop them silently, which hides typos), defaults are applied,
// then the OpenAPI schema and the CEL rules of the CRD run.
func (vs *versionSchema) check(ctx context.Context, obj map[string]any) []string {
	var problems []string
	work := runtime.DeepCopyJSON(obj)
	unknown := pruning.PruneWithOptions(work, vs.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, path := range unknown {
		problems = append(problems, fmt.Sprintf("%s: unknown field", path))
	}
	defaulting.Default(work, vs.structural)
	errs := validation.ValidateCustomResource(nil, work, vs.openAPI)
	celErrs, _ := vs.cel.Validate(ctx, nil, vs.structural, work, nil, celconfig.RuntimeCELCostBudget)
	errs = append(errs, celErrs...)
	problems = append(problems, fieldErrors(errs)...)
	return problems
}

func fieldErrors(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, strings.TrimSpace(e.Error()))
	}
	return out
}

var _ fs.FS = crds.FS
