package sinktest

import (
	"context"
	"fmt"

	"kollect.dev/agent/internal/sink"
)

// Secrets is a SecretGetter over a map of secret name → data; other names are not found.
func Secrets(m map[string]map[string][]byte) sink.SecretGetter {
	return func(_ context.Context, name string) (map[string][]byte, error) {
		if d, ok := m[name]; ok {
			return d, nil
		}
		return nil, fmt.Errorf("secret %s not found", name)
	}
}
