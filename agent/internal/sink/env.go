package sink

import (
	"context"

	"github.com/go-logr/logr"
)

// SecretGetter returns the data of a Secret in the sink's own namespace. Sinks resolve their
// secretRefs through it when they are built; the agent never reads Secrets elsewhere.
type SecretGetter func(ctx context.Context, name string) (map[string][]byte, error)

// Env is what every sink constructor receives besides its own spec.
type Env struct {
	// Cluster is the agent's cluster name, stamped on rows and used in paths and subjects.
	Cluster string
	// Namespace of the sink object.
	Namespace string
	// Name of the sink object.
	Name string
	// Secrets reads Secrets in Namespace.
	Secrets SecretGetter
	// CacheDir is a private, persistent-for-the-process directory (git clones).
	CacheDir string
	// Log is the sink's logger.
	Log logr.Logger
}
