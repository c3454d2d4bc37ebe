package webhook

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/profile"
	"kollect.dev/agent/internal/scope"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Lookup answers what validation needs to know about other objects. The webhook answers from
// the API server; `kollect validate` from the files it was given.
type Lookup interface {
	// Profile returns a KollectProfile, or nil when it does not exist.
	Profile(ctx context.Context, namespace, name string) (*kollectv1.KollectProfile, error)
	// SinkFamilies returns the families that have a sink of that name in the namespace.
	SinkFamilies(ctx context.Context, namespace, name string) ([]kollectv1.SinkFamily, error)
	// Scopes returns every scope and the tenant mode.
	Scopes(ctx context.Context) (scope.Set, error)
	// NamespaceLabels returns a namespace's labels (nil when unknown).
	NamespaceLabels(ctx context.Context, namespace string) (labels.Set, error)
	// Namespaced reports whether a kind is namespaced; known is false when the kind is not
	// served (yet), in which case namespaced kinds are assumed.
	Namespaced(gk schema.GroupKind) (namespaced, known bool)
}

// Result is the outcome of validating one object.
type Result struct {
	Errors   field.ErrorList
	Warnings []string
}

// Validate runs every check the CRD schema cannot express on a Kollect object. Unknown kinds
// pass. It is used by the admission webhooks and by `kollect validate`.
func Validate(ctx context.Context, obj runtime.Object, l Lookup) (Result, error) {
	var r Result
	var err error
	switch o := obj.(type) {
	case *kollectv1.KollectProfile:
		r.Errors = validateProfile(&o.Spec)
	case *kollectv1.KollectTarget:
		err = validateTarget(ctx, &r, l, o.Namespace, o.Name, o.Namespace, o.Spec.ProfileRef.Name, o.Spec.TargetSelection)
	case *kollectv1.KollectClusterTarget:
		err = validateTarget(ctx, &r, l, "", o.Name, o.Spec.ProfileRef.Namespace, o.Spec.ProfileRef.Name, o.Spec.TargetSelection)
	case *kollectv1.KollectInventory:
		err = validateInventory(ctx, &r, l, o.Namespace, localSinks(o.Namespace, o.Spec.Sinks), o.Spec.ExportTiming)
	case *kollectv1.KollectClusterInventory:
		err = validateInventory(ctx, &r, l, "", clusterSinks(o.Spec.Sinks), o.Spec.ExportTiming)
	case *kollectv1.KollectScope:
		r.Errors = validateScopeSpec(field.NewPath("spec"), &o.Spec)
	case *kollectv1.KollectClusterScope:
		r.Errors = validateScopeSpec(field.NewPath("spec"), &o.Spec.KollectScopeSpec)
		if o.Spec.NamespaceSelector != nil {
			if _, e := metav1.LabelSelectorAsSelector(o.Spec.NamespaceSelector); e != nil {
				r.Errors = append(r.Errors, field.Invalid(field.NewPath("spec", "namespaceSelector"), o.Spec.NamespaceSelector, e.Error()))
			}
		}
	case *kollectv1.KollectSnapshotSink, *kollectv1.KollectDatabaseSink, *kollectv1.KollectEventSink:
		if r.Errors, err = validateSecretRefs(obj); err == nil {
			var inline field.ErrorList
			inline, err = validateNoInlineCredentials(obj.(sink.Object))
			r.Errors = append(r.Errors, inline...)
		}
		if es, ok := obj.(*kollectv1.KollectEventSink); ok {
			r.Errors = append(r.Errors, validateKafkaTopic(&es.Spec, l)...)
		}
		if ss, ok := obj.(*kollectv1.KollectSnapshotSink); ok {
			r.Errors = append(r.Errors, validateAzureContainer(&ss.Spec, l)...)
		}
	}
	return r, err
}

// validateProfile compiles each attribute on its own so every error carries its field path
// and the compiler's line:column.
func validateProfile(spec *kollectv1.KollectProfileSpec) field.ErrorList {
	var errs field.ErrorList
	attrs := field.NewPath("spec", "attributes")
	for i, a := range spec.Attributes {
		p := attrs.Index(i)
		one := &kollectv1.KollectProfile{Spec: kollectv1.KollectProfileSpec{Target: spec.Target, Attributes: []kollectv1.Attribute{a}}}
		if _, err := profile.Compile(one); err != nil {
			switch {
			case a.CEL != "" && a.JSONPath == "":
				errs = append(errs, field.Invalid(p.Child("cel"), a.CEL, stripAttr(err.Error(), a.Name)))
			case a.JSONPath != "" && a.CEL == "":
				errs = append(errs, field.Invalid(p.Child("jsonPath"), a.JSONPath, stripAttr(err.Error(), a.Name)))
			default:
				errs = append(errs, field.Invalid(p, a.Name, stripAttr(err.Error(), a.Name)))
			}
		}
	}
	return errs
}

// stripAttr drops the "attribute x: " prefix the compiler adds; the field path says it.
func stripAttr(msg, name string) string {
	return strings.TrimPrefix(strings.TrimPrefix(msg, "attribute "+name+": "), "CEL: ")
}

func validateTarget(ctx context.Context, r *Result, l Lookup, ns, name, profileNS, profileName string, sel kollectv1.TargetSelection) error {
	spec := field.NewPath("spec")
	key := collector.TargetKey{Namespace: ns, Name: name}
	if _, err := collector.NewTarget(key, sel, schema.GroupVersionKind{}, schema.GroupVersionResource{}, true, collector.ProfileRef{}, nil); err != nil {
		r.Errors = append(r.Errors, selectionError(spec, sel, err))
	}
	prof, err := l.Profile(ctx, profileNS, profileName)
	if err != nil {
		return err
	}
	if prof == nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("KollectProfile %s/%s does not exist (yet): its kind is checked against scopes when it does", profileNS, profileName))
		return nil
	}
	rules, err := rulesFor(ctx, l, ns)
	if err != nil {
		return err
	}
	gk := schema.GroupKind{Group: prof.Spec.Target.Group, Kind: prof.Spec.Target.Kind}
	namespaced, _ := l.Namespaced(gk)
	if d := rules.Target(gk, namespaced, scope.TargetReach(ns, sel)); !d.Allowed {
		p := spec.Child("profileRef")
		if d.Reason == kollectv1.ReasonScopeNamespaceDenied {
			p = spec.Child("namespaces")
		}
		r.Errors = append(r.Errors, field.Forbidden(p, d.String()))
	}
	return nil
}

// selectionError points a selection compile error at its field.
func selectionError(spec *field.Path, sel kollectv1.TargetSelection, err error) *field.Error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "match: "):
		return field.Invalid(spec.Child("match"), sel.Match, strings.TrimPrefix(msg, "match: "))
	case strings.HasPrefix(msg, "labelSelector: "):
		return field.Invalid(spec.Child("labelSelector"), sel.LabelSelector, strings.TrimPrefix(msg, "labelSelector: "))
	case strings.HasPrefix(msg, "fieldSelector: "):
		return field.Invalid(spec.Child("fieldSelector"), sel.FieldSelector, strings.TrimPrefix(msg, "fieldSelector: "))
	case strings.HasPrefix(msg, "name pattern"):
		return field.Invalid(spec.Child("names"), sel.Names, msg)
	default:
		return field.Invalid(spec.Child("namespaces"), sel.Namespaces, msg)
	}
}

// sinkRef is one sink reference with its field path.
type sinkRef struct {
	path *field.Path
	ref  scope.SinkRef
}

func localSinks(ns string, s kollectv1.SinkReferences) []sinkRef {
	var out []sinkRef
	base := field.NewPath("spec", "sinks")
	add := func(fam kollectv1.SinkFamily, refs []kollectv1.LocalObjectReference) {
		for i, r := range refs {
			out = append(out, sinkRef{path: base.Child(string(fam)).Index(i), ref: scope.SinkRef{Family: fam, Namespace: ns, Name: r.Name}})
		}
	}
	add(kollectv1.SinkFamilySnapshot, s.Snapshot)
	add(kollectv1.SinkFamilyDatabase, s.Database)
	add(kollectv1.SinkFamilyEvent, s.Event)
	return out
}

func clusterSinks(s kollectv1.ClusterSinkReferences) []sinkRef {
	var out []sinkRef
	base := field.NewPath("spec", "sinks")
	add := func(fam kollectv1.SinkFamily, refs []kollectv1.NamespacedObjectReference) {
		for i, r := range refs {
			out = append(out, sinkRef{path: base.Child(string(fam)).Index(i), ref: scope.SinkRef{Family: fam, Namespace: r.Namespace, Name: r.Name}})
		}
	}
	add(kollectv1.SinkFamilySnapshot, s.Snapshot)
	add(kollectv1.SinkFamilyDatabase, s.Database)
	add(kollectv1.SinkFamilyEvent, s.Event)
	return out
}

var sinkKinds = map[kollectv1.SinkFamily]string{
	kollectv1.SinkFamilySnapshot: "KollectSnapshotSink",
	kollectv1.SinkFamilyDatabase: "KollectDatabaseSink",
	kollectv1.SinkFamilyEvent:    "KollectEventSink",
}

func validateInventory(ctx context.Context, r *Result, l Lookup, ns string, sinks []sinkRef, timing kollectv1.ExportTiming) error {
	rules, err := rulesFor(ctx, l, ns)
	if err != nil {
		return err
	}
	for _, s := range sinks {
		fams, err := l.SinkFamilies(ctx, s.ref.Namespace, s.ref.Name)
		if err != nil {
			return err
		}
		if !hasFamily(fams, s.ref.Family) {
			if len(fams) > 0 {
				r.Errors = append(r.Errors, field.Invalid(s.path, s.ref.Name, fmt.Sprintf("%s is a %s (%s family), not a %s: list it under sinks.%s",
					s.ref.Name, sinkKinds[fams[0]], fams[0], sinkKinds[s.ref.Family], fams[0])))
			} else {
				r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %s %s/%s does not exist (yet)", s.path, sinkKinds[s.ref.Family], s.ref.Namespace, s.ref.Name))
			}
		}
		ref := s.ref
		if ns != "" {
			ref.Namespace = "" // scopes of a namespace match sink names
		}
		if d := rules.Sink(ref); !d.Allowed {
			r.Errors = append(r.Errors, field.Forbidden(s.path, d.String()))
		}
	}
	if d := rules.Cadence(timing); !d.Allowed {
		p := field.NewPath("spec", "debounce")
		if strings.HasPrefix(d.Message, "resyncInterval") {
			p = field.NewPath("spec", "resyncInterval")
		}
		r.Errors = append(r.Errors, field.Forbidden(p, d.String()))
	}
	return nil
}

func hasFamily(fams []kollectv1.SinkFamily, f kollectv1.SinkFamily) bool {
	for _, x := range fams {
		if x == f {
			return true
		}
	}
	return false
}

func rulesFor(ctx context.Context, l Lookup, ns string) (scope.Rules, error) {
	set, err := l.Scopes(ctx)
	if err != nil {
		return scope.Rules{}, err
	}
	if ns == "" {
		return set.ForCluster(), nil
	}
	nsLabels, err := l.NamespaceLabels(ctx, ns)
	if err != nil {
		return scope.Rules{}, err
	}
	return set.ForNamespace(ns, nsLabels), nil
}

// validateScopeSpec checks the glob patterns, which the schema cannot.
func validateScopeSpec(p *field.Path, s *kollectv1.KollectScopeSpec) field.ErrorList {
	var errs field.ErrorList
	for i, ns := range s.AllowedNamespaces {
		if _, err := path.Match(ns, ""); err != nil {
			errs = append(errs, field.Invalid(p.Child("allowedNamespaces").Index(i), ns, err.Error()))
		}
	}
	for i, sr := range s.AllowedSinks {
		for j, n := range sr.Names {
			if _, err := path.Match(n, ""); err != nil {
				errs = append(errs, field.Invalid(p.Child("allowedSinks").Index(i).Child("names").Index(j), n, err.Error()))
			}
		}
	}
	return errs
}

// validateNoInlineCredentials refuses URLs that carry credentials, and settings that would
// read the agent pod's own files or identity. The field's value is not echoed: the message
// would show the credential to whoever reads the refusal.
func validateNoInlineCredentials(obj sink.Object) (field.ErrorList, error) {
	creds, err := sink.Inspect(obj)
	if err != nil {
		return nil, err
	}
	var errs field.ErrorList
	for _, p := range creds.Inline {
		errs = append(errs, field.Forbidden(p, sink.InlineCredentialsMessage))
	}
	for _, p := range creds.PodFiles {
		errs = append(errs, field.Forbidden(p, sink.PodFilesMessage))
	}
	return errs, nil
}

// validateSecretRefs refuses secret references that try to leave the sink's namespace: the API
// carries only a name, and the agent reads Secrets of the sink's own namespace only, so a
// "namespace/name" value would silently never resolve.
func validateSecretRefs(obj runtime.Object) (field.ErrorList, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	spec, _ := u["spec"].(map[string]any)
	var errs field.ErrorList
	walkSecretRefs(field.NewPath("spec"), spec, &errs)
	sort.Slice(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	return errs, nil
}

func walkSecretRefs(p *field.Path, v any, errs *field.ErrorList) {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			cp := p.Child(k)
			if m, ok := child.(map[string]any); ok && strings.HasSuffix(strings.ToLower(k), "secretref") {
				name, _ := m["name"].(string)
				if strings.Contains(name, "/") {
					*errs = append(*errs, field.Invalid(cp.Child("name"), name,
						"secrets are read from the sink's own namespace only: give the Secret's name, not namespace/name"))
				} else if msgs := validation.IsDNS1123Subdomain(name); name != "" && len(msgs) > 0 {
					*errs = append(*errs, field.Invalid(cp.Child("name"), name, strings.Join(msgs, "; ")))
				}
			}
			walkSecretRefs(cp, child, errs)
		}
	case []any:
		for i, child := range x {
			walkSecretRefs(p.Index(i), child, errs)
		}
	}
}
