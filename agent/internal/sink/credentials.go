package sink

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"kollect.dev/api/validation"
)

// InlineCredentialsMessage is what a refusal of InlineCredentials says.
const InlineCredentialsMessage = validation.InlineCredentialsMessage

// InlineCredentials returns the spec fields (as paths such as spec.git.url) of a sink object
// whose URLs carry credentials; see validation.InlineCredentials, which the hub runs on the
// sinks of a bundle.
func InlineCredentials(obj Object) ([]string, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	return validation.InlineCredentials("spec", u["spec"]), nil
}
