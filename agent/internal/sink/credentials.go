package sink

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/api/validation"
)

// InlineCredentialsMessage is what a refusal of InlineCredentials says.
const InlineCredentialsMessage = validation.InlineCredentialsMessage

// PodFilesMessage is what a refusal of Credentials.PodFiles says.
const PodFilesMessage = validation.PodFilesMessage

// InlineCredentials returns the spec fields (such as spec.git.url) of a sink object whose
// URLs carry credentials; see validation.InlineCredentials, which the hub runs on the sinks of
// a bundle.
func InlineCredentials(obj Object) ([]*field.Path, error) {
	c, err := Inspect(obj)
	return c.Inline, err
}

// Credentials is how a sink object authenticates, as far as policy cares.
type Credentials struct {
	// Inline are URL fields that carry credentials: always refused.
	Inline []*field.Path
	// PodFiles are settings under which the client would read the agent pod's own files or
	// identity (a MongoDB tlsCAFile, MONGODB-OIDC): always refused.
	PodFiles []*field.Path
	// Ambient are unset secretRef fields that make the client authenticate as the agent.
	Ambient []*field.Path
	// Insecure are settings under which the sink would not verify its server:
	// insecureSkipVerify, a postgres sslMode that does not verify, mongodb uri options.
	Insecure []validation.Unverified
}

// Inspect reads a sink object's credential fields (see package validation).
func Inspect(obj Object) (Credentials, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return Credentials{}, fmt.Errorf("converting %T: %w", obj, err)
	}
	spec, _ := u["spec"].(map[string]any)
	path := field.NewPath("spec")
	return Credentials{
		Inline:   validation.InlineCredentials(path, spec),
		PodFiles: validation.PodFiles(path, spec),
		Ambient:  validation.AmbientCredentials(path, spec),
		Insecure: validation.InsecureTLS(path, spec),
	}, nil
}

// Strings renders field paths, or unverified settings, for a message.
func Strings[T fmt.Stringer](items []T) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.String()
	}
	return out
}
