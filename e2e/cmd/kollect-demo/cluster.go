package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"kollect.dev/e2e/testenv"
)

// applyYAML creates every object of a multi-document YAML stream.
func applyYAML(ctx context.Context, cp *testenv.ControlPlane, doc []byte, namespace string) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		if namespace != "" && u.GetNamespace() == "" {
			u.SetNamespace(namespace)
		}
		if err := cp.Client.Create(ctx, u); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
}
