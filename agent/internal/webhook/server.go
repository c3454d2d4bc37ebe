package webhook

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// Path is the URL path of a kind's validating webhook.
func Path(kindName string) string {
	return "/validate-kollect-dev-v1alpha1-" + strings.ToLower(kindName)
}

// Register adds one validating webhook per Kollect kind (kollectv1.Kinds) to srv.
func Register(srv webhook.Server, scheme *runtime.Scheme, l Lookup) {
	for _, k := range kollectv1.Kinds {
		v := &validator{kind: k, scheme: scheme, lookup: l}
		srv.Register(Path(k.Kind), admission.WithValidator[*unstructured.Unstructured](scheme, v).WithRecoverPanic(true))
	}
}

// validator adapts Validate to controller-runtime's admission.Validator. The admission
// decoder needs a concrete type to decode into, and the kinds come from a list rather than
// from Go types, so requests are decoded as unstructured and converted to the kind's typed
// object through the scheme.
type validator struct {
	kind   kollectv1.KindInfo
	scheme *runtime.Scheme
	lookup Lookup
}

func (v *validator) gk() schema.GroupKind {
	return schema.GroupKind{Group: kollectv1.GroupVersion.Group, Kind: v.kind.Kind}
}

// typed converts a decoded request object to the kind's Go type.
func (v *validator) typed(u *unstructured.Unstructured) (client.Object, error) {
	obj, err := v.scheme.New(kollectv1.GroupVersion.WithKind(v.kind.Kind))
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("kind %s is not in the agent's scheme: %w", v.kind.Kind, err))
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), obj); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding %s %s: %v", v.kind.Kind, u.GetName(), err))
	}
	co, ok := obj.(client.Object)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("kind %s is not a client.Object", v.kind.Kind))
	}
	return co, nil
}

func (v *validator) ValidateCreate(ctx context.Context, u *unstructured.Unstructured) (admission.Warnings, error) {
	obj, err := v.typed(u)
	if err != nil {
		return nil, err
	}
	return v.validate(ctx, obj)
}

// ValidateUpdate skips the checks when the spec did not change: labels, finalizers or an
// owner reference must stay editable on an object a tightened scope now degrades.
func (v *validator) ValidateUpdate(ctx context.Context, oldU, newU *unstructured.Unstructured) (admission.Warnings, error) {
	oldObj, err := v.typed(oldU)
	if err != nil {
		return nil, err
	}
	newObj, err := v.typed(newU)
	if err != nil {
		return nil, err
	}
	if sameSpec(oldObj, newObj) {
		return nil, nil
	}
	return v.validate(ctx, newObj)
}

func (v *validator) ValidateDelete(context.Context, *unstructured.Unstructured) (admission.Warnings, error) {
	return nil, nil
}

func (v *validator) validate(ctx context.Context, obj client.Object) (admission.Warnings, error) {
	res, err := Validate(ctx, obj, v.lookup)
	if err != nil {
		// Not a verdict on the object: the API server reports it and the client may retry.
		return nil, apierrors.NewInternalError(fmt.Errorf("validating %s %s: %w", v.kind.Kind, obj.GetName(), err))
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
	for _, k := range kollectv1.Kinds {
		s := svc
		p := Path(k.Kind)
		s.Path = &p
		scopeType := admissionregistrationv1.NamespacedScope
		if !k.Namespaced {
			scopeType = admissionregistrationv1.ClusterScope
		}
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name:                    strings.ToLower(k.Kind) + ".kollect.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &s, CABundle: caBundle},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			MatchPolicy:             &equivalent,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{kollectv1.GroupVersion.Group}, APIVersions: []string{kollectv1.GroupVersion.Version},
					Resources: []string{k.Resource}, Scope: &scopeType},
			}},
		})
	}
	return cfg
}
