package offline

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// PageSize is how many objects one list request asks for.
const PageSize = 500

// MapperResolver resolves kinds with a RESTMapper. A kind the cluster does not serve fails
// with the mapper's error, which satisfies meta.IsNoMatchError.
func MapperResolver(m apimeta.RESTMapper) Resolver {
	return func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
		mp, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return schema.GroupVersionResource{}, false, err
		}
		return mp.Resource, mp.Scope.Name() == apimeta.RESTScopeNameNamespace, nil
	}
}

// ListPages lists every object of a resource in every namespace, pageSize at a time (PageSize
// when 0), and hands each page to fn; no page is kept once fn returns.
func ListPages(ctx context.Context, ri dynamic.ResourceInterface, pageSize int64, fn func([]*unstructured.Unstructured)) error {
	if pageSize <= 0 {
		pageSize = PageSize
	}
	opts := metav1.ListOptions{Limit: pageSize}
	page := make([]*unstructured.Unstructured, 0, pageSize)
	for {
		l, err := ri.List(ctx, opts)
		if err != nil {
			return err
		}
		page = page[:0]
		for i := range l.Items {
			page = append(page, &l.Items[i])
		}
		fn(page)
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

// List lists each kind the stream needs from the cluster, page by page, and adds the pages to
// the stream. step, when set, is told which resource is listed. A kind that fails to list is
// reported in the map (partly added when a later page failed) and the others are still listed.
func (s *Stream) List(ctx context.Context, dyn dynamic.Interface, pageSize int64, step func(schema.GroupVersionResource)) map[schema.GroupVersionKind]error {
	errs := map[schema.GroupVersionKind]error{}
	for _, k := range s.kinds {
		if step != nil {
			step(k.Resource)
		}
		err := ListPages(ctx, dyn.Resource(k.Resource), pageSize, func(page []*unstructured.Unstructured) { s.Add(k.GVK, page) })
		if err != nil {
			errs[k.GVK] = err
		}
	}
	return errs
}

// NamespaceLabels lists the cluster's namespaces for namespaces.selector. Callers that may not
// list namespaces get the error and may go on with every namespace unlabelled, as the CLI does.
func NamespaceLabels(ctx context.Context, dyn dynamic.Interface) (func(string) (labels.Set, bool), error) {
	byName := map[string]labels.Set{}
	err := ListPages(ctx, dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")), 0, func(page []*unstructured.Unstructured) {
		for _, n := range page {
			byName[n.GetName()] = n.GetLabels()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return func(ns string) (labels.Set, bool) { l, ok := byName[ns]; return l, ok }, nil
}
