package collector

import (
	"sync"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/agent/internal/helmrelease"
)

// item is what the store keeps of an object: identity and, for the profiles evaluated on it,
// the canonical attributes (or the extraction error). It is the one structure the agent holds
// per watched object, so its layout is what memory follows at scale (a million objects, or a
// kind shared by a hundred tenants' profiles): the common case — one profile evaluated, no
// labels kept, at most 64 targets with a match expression — fits in one 112-byte allocation
// with the strings it points to. Everything else (more profiles, labels, match errors, a Helm
// release) goes to rest, which most items never allocate.
//
// Profiles and targets are indexed by their position in the watch's projection. Items are
// immutable once the transform has built them: snapshots and informers share them.
type item struct {
	// namespace is interned (every object of a namespace shares one string); name and uid are
	// the object's own.
	namespace, name, uid string
	// first is the extraction of the first profile evaluated on the object; first.profile < 0
	// when none was (rest.attrs holds any others).
	first profileExtraction
	// matchBits holds, for the first 64 targets of the projection that need the whole object
	// (projection.targetIndex), whether each selects the object; rest.matches the others.
	matchBits uint64
	rest      *itemRest
}

// itemRest is the part of an item few objects need.
type itemRest struct {
	// attrs holds, in profile order, the extractions beyond first. Sparse because a kind's
	// watch is shared by every profile of the kind: with a profile per tenant, one slot per
	// profile on every object made memory grow with objects × tenants (4.7 KiB an object at
	// 100 tenants), while an object is nearly always selected by one profile.
	attrs []profileExtraction
	// labels are kept when a target selects on them in the agent (projection.keepLabels).
	labels map[string]string
	// matches holds the match results of object targets from the 65th on.
	matches []bool
	// matchErrs holds, by projection.targetIndex, why a target's match expression failed on
	// the object (a missing field, a result that is not a boolean); nil when none failed.
	matchErrs []error
	// release identifies a Helm release Secret when a profile decodes it (decode.go).
	release *helmrelease.Release
}

// profileExtraction is an extraction of the profile at position profile of the projection.
type profileExtraction struct {
	profile int32
	extraction
}

// extraction is one profile's result on one object: json, or err when extraction failed.
// Both are set when the object was exported cut to fullObject.maxBytes (a
// *profile.TruncatedError): a second error field would cost every object a word. json is a
// string of exactly the encoded length (the encoder's buffer is larger), read as bytes by
// attributes.
type extraction struct {
	json string
	err  error
	skip skipReason
}

// attributes returns the canonical JSON without copying it; nil when there is none. Callers
// must not modify it (rows treat Attributes as immutable).
func (e extraction) attributes() []byte {
	if e.json == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(e.json), len(e.json))
}

// newItem starts an item with an interned namespace and no extraction.
func newItem(namespace, name, uid string) *item {
	return &item{namespace: internNamespace(namespace), name: name, uid: uid, first: profileExtraction{profile: -1}}
}

// namespaces interns namespace names: a cluster has few, and each decoded object brings its own
// copy. Names of deleted namespaces stay, a few bytes each.
var namespaces = struct {
	sync.RWMutex
	names map[string]string
}{names: map[string]string{}}

func internNamespace(ns string) string {
	namespaces.RLock()
	v, ok := namespaces.names[ns]
	namespaces.RUnlock()
	if ok {
		return v
	}
	namespaces.Lock()
	defer namespaces.Unlock()
	if v, ok := namespaces.names[ns]; ok {
		return v
	}
	namespaces.names[ns] = ns
	return ns
}

func (i *item) more() *itemRest {
	if i.rest == nil {
		i.rest = &itemRest{}
	}
	return i.rest
}

// addAttr records the extraction of profile pi; profiles are added in increasing order.
func (i *item) addAttr(pi int, ex extraction) {
	if i.first.profile < 0 {
		i.first = profileExtraction{profile: int32(pi), extraction: ex}
		return
	}
	r := i.more()
	r.attrs = append(r.attrs, profileExtraction{profile: int32(pi), extraction: ex})
}

// attr returns the extraction of the profile at position pi: skip notSelected when the
// profile was not evaluated on the object.
func (i *item) attr(pi int) extraction {
	if int(i.first.profile) == pi {
		return i.first.extraction
	}
	if i.rest != nil {
		for _, a := range i.rest.attrs {
			if int(a.profile) == pi {
				return a.extraction
			}
		}
	}
	return extraction{skip: notSelected}
}

// attrCount is how many profiles have an extraction on the item.
func (i *item) attrCount() int {
	n := 0
	if i.first.profile >= 0 {
		n++
	}
	if i.rest != nil {
		n += len(i.rest.attrs)
	}
	return n
}

// setMatch records whether the object target at position oi selects the object.
func (i *item) setMatch(oi int, ok bool) {
	if oi < 64 {
		if ok {
			i.matchBits |= 1 << oi
		} else {
			i.matchBits &^= 1 << oi
		}
		return
	}
	r := i.more()
	for len(r.matches) <= oi-64 {
		r.matches = append(r.matches, false)
	}
	r.matches[oi-64] = ok
}

// matched reports whether the object target at position oi selects the object.
func (i *item) matched(oi int) bool {
	if oi < 64 {
		return i.matchBits&(1<<oi) != 0
	}
	return i.rest != nil && oi-64 < len(i.rest.matches) && i.rest.matches[oi-64]
}

// setMatchErr records why the match expression of the object target at oi failed; n is the
// number of object targets.
func (i *item) setMatchErr(oi, n int, err error) {
	r := i.more()
	if r.matchErrs == nil {
		r.matchErrs = make([]error, n)
	}
	r.matchErrs[oi] = err
}

// matchErr is why the match expression of the object target at oi failed, if it did.
func (i *item) matchErr(oi int) error {
	if i.rest == nil || oi >= len(i.rest.matchErrs) {
		return nil
	}
	return i.rest.matchErrs[oi]
}

// labelSet is the object's labels, when the projection keeps them.
func (i *item) labelSet() map[string]string {
	if i.rest == nil {
		return nil
	}
	return i.rest.labels
}

// release is the Helm release the object stores, when a profile decodes it.
func (i *item) release() *helmrelease.Release {
	if i.rest == nil {
		return nil
	}
	return i.rest.release
}

// item is a metav1.Object, so that the informer's key and index functions (meta.Accessor)
// read its namespace and name as they are: through GetObjectMeta, every object's keying
// built an ObjectMeta several times over (about 900 bytes of garbage an object at every
// list). Items are immutable: the setters do nothing, and what an item does not keep reads
// as empty.
var _ metav1.Object = (*item)(nil)

func (i *item) GetNamespace() string                                       { return i.namespace }
func (i *item) GetName() string                                            { return i.name }
func (i *item) GetUID() types.UID                                          { return types.UID(i.uid) }
func (i *item) GetLabels() map[string]string                               { return i.labelSet() }
func (i *item) GetGenerateName() string                                    { return "" }
func (i *item) GetResourceVersion() string                                 { return "" }
func (i *item) GetGeneration() int64                                       { return 0 }
func (i *item) GetSelfLink() string                                        { return "" }
func (i *item) GetCreationTimestamp() metav1.Time                          { return metav1.Time{} }
func (i *item) GetDeletionTimestamp() *metav1.Time                         { return nil }
func (i *item) GetDeletionGracePeriodSeconds() *int64                      { return nil }
func (i *item) GetAnnotations() map[string]string                          { return nil }
func (i *item) GetFinalizers() []string                                    { return nil }
func (i *item) GetOwnerReferences() []metav1.OwnerReference                { return nil }
func (i *item) GetManagedFields() []metav1.ManagedFieldsEntry              { return nil }
func (i *item) SetNamespace(string)                                        {}
func (i *item) SetName(string)                                             {}
func (i *item) SetGenerateName(string)                                     {}
func (i *item) SetUID(types.UID)                                           {}
func (i *item) SetResourceVersion(string)                                  {}
func (i *item) SetGeneration(int64)                                        {}
func (i *item) SetSelfLink(string)                                         {}
func (i *item) SetCreationTimestamp(metav1.Time)                           {}
func (i *item) SetDeletionTimestamp(*metav1.Time)                          {}
func (i *item) SetDeletionGracePeriodSeconds(*int64)                       {}
func (i *item) SetLabels(map[string]string)                                {}
func (i *item) SetAnnotations(map[string]string)                           {}
func (i *item) SetFinalizers([]string)                                     {}
func (i *item) SetOwnerReferences([]metav1.OwnerReference)                 {}
func (i *item) SetManagedFields(managedFields []metav1.ManagedFieldsEntry) {}

// DeepCopyObject and GetObjectKind make item a runtime.Object for the informer machinery;
// items are immutable once built, so a copy is the item itself.
func (i *item) DeepCopyObject() runtime.Object   { return i }
func (i *item) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
