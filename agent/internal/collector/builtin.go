package collector

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Builtin lists and watches the API server's built-in kinds in protobuf, the encoding the API
// server writes and client-go reads several times faster than JSON, and hands the transform
// each object converted to the unstructured form profiles read. A kind is built in when
// client-go's scheme knows it.
//
// Typed decoding keeps only the fields the compiled types know, so it is used only when the
// API server is no newer than the client-go the agent is built with: such a server sends no
// field those types lack (a newer one may, and then every kind is watched as JSON, which
// keeps every field). Custom resources are always JSON.
type Builtin struct {
	cfg  *rest.Config
	http *http.Client

	mu      sync.Mutex
	clients map[schema.GroupVersion]rest.Interface
}

// NewBuiltin returns the protobuf lister over cfg's API server, or nil when that server is
// newer than the agent's client-go (serverMinor is the server's minor version, as discovery
// reports it: "37" or "37+").
func NewBuiltin(cfg *rest.Config, serverMinor string) (*Builtin, error) {
	if !serverKnown(serverMinor, clientMinor()) {
		return nil, nil
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the HTTP client of protobuf watches: %w", err)
	}
	return &Builtin{cfg: cfg, http: hc, clients: map[schema.GroupVersion]rest.Interface{}}, nil
}

// serverKnown reports whether a server of minor version server is no newer than client.
func serverKnown(server string, client int) bool {
	s, err := strconv.Atoi(strings.TrimRight(server, "+"))
	return err == nil && client > 0 && s <= client
}

// clientGoMinor is the Kubernetes minor version of the client-go in the agent's go.mod
// (v0.37.x is Kubernetes 1.37): the newest API server whose fields its types all know.
// TestClientGoMinorFollowsGoMod fails when go.mod moves without it.
const clientGoMinor = 37

func clientMinor() int { return clientGoMinor }

// knows reports whether gvk is served by protobuf watches.
func (b *Builtin) knows(gvk schema.GroupVersionKind) bool {
	return b != nil && scheme.Scheme.Recognizes(gvk) && scheme.Scheme.Recognizes(gvk.GroupVersion().WithKind(gvk.Kind+"List"))
}

// client is the REST client of one group-version, built once.
func (b *Builtin) client(gv schema.GroupVersion) (rest.Interface, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.clients[gv]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(b.cfg)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.RESTClientForConfigAndClient(cfg, b.http)
	if err != nil {
		return nil, fmt.Errorf("building the protobuf client of %s: %w", gv, err)
	}
	b.clients[gv] = c
	return c, nil
}

// source lists and watches gvr's objects of kind gvk in ns ("" for all) as protobuf. ok is
// false when gvk is not a built-in kind b serves (b nil included): the caller watches it as
// JSON.
func (b *Builtin) source(gvk schema.GroupVersionKind, gvr schema.GroupVersionResource, ns string) (src source, ok bool) {
	if !b.knows(gvk) {
		return source{}, false
	}
	c, err := b.client(gvk.GroupVersion())
	if err != nil {
		return source{}, false
	}
	if src.obj, err = scheme.Scheme.New(gvk); err != nil {
		return source{}, false
	}
	request := func(o *metav1.ListOptions) *rest.Request {
		r := c.Get().NamespaceIfScoped(ns, ns != "").Resource(gvr.Resource).VersionedParams(o, scheme.ParameterCodec)
		if o.TimeoutSeconds != nil {
			r = r.Timeout(time.Duration(*o.TimeoutSeconds) * time.Second)
		}
		return r
	}
	src.list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return request(&o).Do(ctx).Get()
	}
	src.watch = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.Watch = true
		return request(&o).Watch(ctx)
	}
	return src, true
}

// toUnstructured converts a typed object of kind gvk into the unstructured form a JSON watch
// would have decoded: the same fields, with its apiVersion and kind, which objects decoded
// from protobuf lists do not carry.
//
// The object's metadata is converted field by field (objectMetaContent), and ConfigMaps and
// Secrets, the most numerous kinds of a cluster, entirely so: the generic converter reaches
// every field through reflection and every timestamp and managedFields entry through its JSON
// form, which made the conversion the largest cost of a list (issue 21). The transform owns
// obj (the informer hands it over and keeps only the item), so its metadata is taken off it.
func toUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	var content map[string]any
	var err error
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		content, err = configMapContent(o)
	case *corev1.Secret:
		content, err = secretContent(o)
	default:
		content, err = genericContent(obj)
	}
	if err != nil {
		return nil, fmt.Errorf("converting a %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// genericContent converts obj with the generic converter, but its metadata field by field.
func genericContent(obj runtime.Object) (map[string]any, error) {
	var md map[string]any
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if om, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			var err error
			if md, err = objectMetaContent(om); err != nil {
				return nil, err
			}
			*om = metav1.ObjectMeta{}
		}
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	if md != nil {
		content["metadata"] = md
	}
	return content, nil
}

// withMetadata returns an object's content holding only its metadata, converted.
func withMetadata(m *metav1.ObjectMeta) (map[string]any, error) {
	md, err := objectMetaContent(m)
	if err != nil {
		return nil, err
	}
	return map[string]any{"metadata": md}, nil
}

func configMapContent(o *corev1.ConfigMap) (map[string]any, error) {
	content, err := withMetadata(&o.ObjectMeta)
	if err != nil {
		return nil, err
	}
	if len(o.Data) > 0 {
		content["data"] = stringMapContent(o.Data)
	}
	if len(o.BinaryData) > 0 {
		content["binaryData"] = bytesMapContent(o.BinaryData)
	}
	if o.Immutable != nil {
		content["immutable"] = *o.Immutable
	}
	return content, nil
}

func secretContent(o *corev1.Secret) (map[string]any, error) {
	content, err := withMetadata(&o.ObjectMeta)
	if err != nil {
		return nil, err
	}
	if o.Immutable != nil {
		content["immutable"] = *o.Immutable
	}
	if len(o.Data) > 0 {
		content["data"] = bytesMapContent(o.Data)
	}
	if len(o.StringData) > 0 {
		content["stringData"] = stringMapContent(o.StringData)
	}
	if o.Type != "" {
		content["type"] = string(o.Type)
	}
	return content, nil
}

// objectMetaContent is m as JSON decoding gives it: the fields its JSON tags do not omit.
func objectMetaContent(m *metav1.ObjectMeta) (map[string]any, error) {
	out := make(map[string]any, 8)
	for _, f := range [...]struct{ key, value string }{{"name", m.Name}, {"generateName", m.GenerateName},
		{"namespace", m.Namespace}, {"selfLink", m.SelfLink}, {"uid", string(m.UID)}, {"resourceVersion", m.ResourceVersion}} {
		if f.value != "" {
			out[f.key] = f.value
		}
	}
	if m.Generation != 0 {
		out["generation"] = m.Generation
	}
	// A struct, so never omitted: a zero time is null, as its JSON form is.
	out["creationTimestamp"] = m.CreationTimestamp.ToUnstructured()
	if m.DeletionTimestamp != nil {
		out["deletionTimestamp"] = m.DeletionTimestamp.ToUnstructured()
	}
	if m.DeletionGracePeriodSeconds != nil {
		out["deletionGracePeriodSeconds"] = *m.DeletionGracePeriodSeconds
	}
	if len(m.Labels) > 0 {
		out["labels"] = stringMapContent(m.Labels)
	}
	if len(m.Annotations) > 0 {
		out["annotations"] = stringMapContent(m.Annotations)
	}
	if len(m.OwnerReferences) > 0 {
		refs := make([]any, len(m.OwnerReferences))
		for i, r := range m.OwnerReferences {
			ref := map[string]any{"apiVersion": r.APIVersion, "kind": r.Kind, "name": r.Name, "uid": string(r.UID)}
			if r.Controller != nil {
				ref["controller"] = *r.Controller
			}
			if r.BlockOwnerDeletion != nil {
				ref["blockOwnerDeletion"] = *r.BlockOwnerDeletion
			}
			refs[i] = ref
		}
		out["ownerReferences"] = refs
	}
	if len(m.Finalizers) > 0 {
		fin := make([]any, len(m.Finalizers))
		for i, f := range m.Finalizers {
			fin[i] = f
		}
		out["finalizers"] = fin
	}
	if len(m.ManagedFields) > 0 {
		entries, err := managedFieldsContent(m.ManagedFields)
		if err != nil {
			return nil, fmt.Errorf("converting the managedFields: %w", err)
		}
		out["managedFields"] = entries
	}
	return out, nil
}

func stringMapContent(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// bytesMapContent encodes each value in base64, as JSON carries []byte.
func bytesMapContent(m map[string][]byte) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = base64.StdEncoding.EncodeToString(v)
	}
	return out
}

// managedFieldsContent is managed as JSON decoding gives it: the fields the entries' JSON
// tags do not omit, each entry's fieldsV1 decoded once.
func managedFieldsContent(managed []metav1.ManagedFieldsEntry) ([]any, error) {
	out := make([]any, len(managed))
	for i, e := range managed {
		m := make(map[string]any, 6)
		if e.Manager != "" {
			m["manager"] = e.Manager
		}
		if e.Operation != "" {
			m["operation"] = string(e.Operation)
		}
		if e.APIVersion != "" {
			m["apiVersion"] = e.APIVersion
		}
		if e.Time != nil {
			m["time"] = e.Time.ToUnstructured()
		}
		if e.FieldsType != "" {
			m["fieldsType"] = e.FieldsType
		}
		if e.FieldsV1 != nil {
			var fields any
			if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
				return nil, err
			}
			m["fieldsV1"] = fields
		}
		if e.Subresource != "" {
			m["subresource"] = e.Subresource
		}
		out[i] = m
	}
	return out, nil
}
