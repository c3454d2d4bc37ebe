package schema

import (
	"context"
	"fmt"
	"io/fs"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"kollect.dev/api/crds"
)

// version is one served version of one CRD, compiled.
type version struct {
	namespaced bool
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// Validator checks objects of the Kollect kinds.
type Validator struct {
	versions map[schema.GroupVersionKind]*version
}

// New compiles the embedded CRDs.
func New() (*Validator, error) {
	entries, err := fs.ReadDir(crds.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("reading embedded CRDs: %w", err)
	}
	v := &Validator{versions: map[schema.GroupVersionKind]*version{}}
	for _, e := range entries {
		raw, err := fs.ReadFile(crds.FS, e.Name())
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", e.Name(), err)
		}
		for _, ver := range crd.Spec.Versions {
			if ver.Schema == nil || ver.Schema.OpenAPIV3Schema == nil {
				continue
			}
			internal := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(ver.Schema.OpenAPIV3Schema, internal, nil); err != nil {
				return nil, fmt.Errorf("%s %s: %w", crd.Name, ver.Name, err)
			}
			st, err := structuralschema.NewStructural(internal)
			if err != nil {
				return nil, fmt.Errorf("%s %s: structural schema: %w", crd.Name, ver.Name, err)
			}
			sv, _, err := apiservervalidation.NewSchemaValidator(internal)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", crd.Name, ver.Name, err)
			}
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: ver.Name, Kind: crd.Spec.Names.Kind}
			v.versions[gvk] = &version{namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped, structural: st, validator: sv,
				cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}
		}
	}
	return v, nil
}

// Known reports whether gvk is a kind of the embedded CRDs.
func (v *Validator) Known(gvk schema.GroupVersionKind) bool { return v.versions[gvk] != nil }

// Validate checks obj and returns what the API server would refuse. obj is defaulted in place
// (as the API server would store it) so later checks see the same values.
func (v *Validator) Validate(ctx context.Context, obj *unstructured.Unstructured) field.ErrorList {
	ver := v.versions[obj.GroupVersionKind()]
	if ver == nil {
		return field.ErrorList{field.NotSupported[string](field.NewPath("kind"), obj.GetKind(), nil)}
	}
	var errs field.ErrorList
	for _, p := range pruning.PruneWithOptions(obj.Object, ver.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		errs = append(errs, field.Forbidden(field.NewPath(p), "unknown field"))
	}
	structuraldefaulting.Default(obj.Object, ver.structural)
	errs = append(errs, validateMeta(obj, ver.namespaced)...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj.Object, ver.validator)...)
	if len(errs) > 0 {
		return errs // CEL rules assume a schema-valid object
	}
	celErrs, _ := ver.cel.Validate(ctx, nil, ver.structural, obj.Object, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

func validateMeta(obj *unstructured.Unstructured, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if obj.GetName() == "" {
		errs = append(errs, field.Required(meta.Child("name"), "every object needs a name"))
	} else {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(obj.GetName(), false) {
			errs = append(errs, field.Invalid(meta.Child("name"), obj.GetName(), msg))
		}
	}
	if !namespaced && obj.GetNamespace() != "" {
		errs = append(errs, field.Invalid(meta.Child("namespace"), obj.GetNamespace(), obj.GetKind()+" is cluster-scoped"))
	}
	return errs
}
