package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every Kollect API type.
var GroupVersion = schema.GroupVersion{Group: "kollect.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the Kollect types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the Kollect types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// objectTypes collects every top-level type and its list; each *_types.go file registers its
// own in init, so adding a kind touches one file.
var objectTypes []runtime.Object

func register(objs ...runtime.Object) { objectTypes = append(objectTypes, objs...) }

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, objectTypes...)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
