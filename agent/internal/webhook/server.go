package webhook

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// kind is one Kollect kind the webhooks validate.
type kind struct {
	name, plural string
	clusterScope bool
	handler      func(*runtime.Scheme, *validator) *admission.Webhook
}

// typed adapts validator to admission.Validator[T]: the decoder needs the concrete type.
type typed[T client.Object] struct{ v *validator }

func (t typed[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	return t.v.ValidateCreate(ctx, obj)
}

func (t typed[T]) ValidateUpdate(ctx context.Context, oldObj, newObj T) (admission.Warnings, error) {
	return t.v.ValidateUpdate(ctx, oldObj, newObj)
}

func (t typed[T]) ValidateDelete(ctx context.Context, obj T) (admission.Warnings, error) {
	return t.v.ValidateDelete(ctx, obj)
}

func handlerFor[T client.Object]() func(*runtime.Scheme, *validator) *admission.Webhook {
	return func(s *runtime.Scheme, v *validator) *admission.Webhook {
		return admission.WithValidator[T](s, typed[T]{v: v})
	}
}

// Kinds lists every Kollect kind with a validating webhook.
var kinds = []kind{
	{"KollectProfile", "kollectprofiles", false, handlerFor[*kollectv1.KollectProfile]()},
	{"KollectTarget", "kollecttargets", false, handlerFor[*kollectv1.KollectTarget]()},
	{"KollectClusterTarget", "kollectclustertargets", true, handlerFor[*kollectv1.KollectClusterTarget]()},
	{"KollectInventory", "kollectinventories", false, handlerFor[*kollectv1.KollectInventory]()},
	{"KollectClusterInventory", "kollectclusterinventories", true, handlerFor[*kollectv1.KollectClusterInventory]()},
	{"KollectSnapshotSink", "kollectsnapshotsinks", false, handlerFor[*kollectv1.KollectSnapshotSink]()},
	{"KollectDatabaseSink", "kollectdatabasesinks", false, handlerFor[*kollectv1.KollectDatabaseSink]()},
	{"KollectEventSink", "kollecteventsinks", false, handlerFor[*kollectv1.KollectEventSink]()},
	{"KollectScope", "kollectscopes", false, handlerFor[*kollectv1.KollectScope]()},
	{"KollectClusterScope", "kollectclusterscopes", true, handlerFor[*kollectv1.KollectClusterScope]()},
}

// Path is the URL path of a kind's validating webhook.
func Path(kindName string) string {
	return "/validate-kollect-dev-v1alpha1-" + strings.ToLower(kindName)
}

// Register adds one validating webhook per Kollect kind to srv.
func Register(srv webhook.Server, scheme *runtime.Scheme, l Lookup) {
	for _, k := range kinds {
		srv.Register(Path(k.name), k.handler(scheme, &validator{kind: k, lookup: l}).WithRecoverPanic(true))
	}
}

// validator adapts Validate to controller-runtime's admission.Validator.
type validator struct {
	kind   kind
	lookup Lookup
}

func (v *validator) gk() schema.GroupKind {
	return schema.GroupKind{Group: kollectv1.GroupVersion.Group, Kind: v.kind.name}
}

func (v *validator) ValidateCreate(ctx context.Context, obj client.Object) (admission.Warnings, error) {
	return v.validate(ctx, obj)
}

// ValidateUpdate skips the checks when the spec did not change: labels, finalizers or an
// owner reference must stay editable on an object a tightened scope now degrades.
func (v *validator) ValidateUpdate(ctx context.Context, oldObj, newObj client.Object) (admission.Warnings, error) {
	if sameSpec(oldObj, newObj) {
		return nil, nil
	}
	return v.validate(ctx, newObj)
}

func (v *validator) ValidateDelete(context.Context, client.Object) (admission.Warnings, error) {
	return nil, nil
}

func (v *validator) validate(ctx context.Context, obj client.Object) (admission.Warnings, error) {
	res, err := Validate(ctx, obj, v.lookup)
	if err != nil {
		// Not a verdict on the object: the API server reports it and the client may retry.
		return nil, apierrors.NewInternalError(fmt.Errorf("validating %s %s: %w", v.kind.name, obj.GetName(), err))
	}
	if len(res.Errors) > 0 {
		return res.Warnings, apierrors.NewInvalid(v.gk(), obj.GetName(), res.Errors)
	}
	return res.Warnings, nil
}

func sameSpec(a, b client.Object) bool {
	ua, errA := runtime.DefaultUnstructuredConverter.ToUnstructured(a)
	ub, errB := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	return errA == nil && errB == nil && equality.Semantic.DeepEqual(ua["spec"], ub["spec"])
}

// Configuration returns the ValidatingWebhookConfiguration for every Kollect kind. Each webhook
// fails closed (failurePolicy Fail) but matches only the kollect.dev group and never the
// status subresource, so the agent's own status writes and everything else in the cluster go
// on while the webhook is down. svc is where the API server reaches the agent; its Path is
// replaced per kind.
func Configuration(name string, svc admissionregistrationv1.ServiceReference, caBundle []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	timeout := int32(5)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
	for _, k := range kinds {
		s := svc
		p := Path(k.name)
		s.Path = &p
		scopeType := admissionregistrationv1.NamespacedScope
		if k.clusterScope {
			scopeType = admissionregistrationv1.ClusterScope
		}
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name:                    strings.ToLower(k.name) + ".kollect.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &s, CABundle: caBundle},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			MatchPolicy:             &equivalent,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{kollectv1.GroupVersion.Group}, APIVersions: []string{kollectv1.GroupVersion.Version},
					Resources: []string{k.plural}, Scope: &scopeType},
			}},
		})
	}
	return cfg
}
