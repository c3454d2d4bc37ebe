package sink

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/api/validation"
)

// InlineCredentialsMessage is what a refusal of InlineCredentials says.
const InlineCredentialsMessage = validation.InlineCredentialsMessage

// InlineCredentials returns the spec fields (such as spec.git.url) of a sink object whose
// URLs carry credentials; see validation.InlineCredentials, which the hub runs on the sinks of
// a bundle.
func InlineCredentials(obj Object) ([]*field.Path, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	return validation.InlineCredentials(field.NewPath("spec"), u["spec"]), nil
}
