package sink

import (
	"context"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink/egress"
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
	// Egress guards every connection the sink makes; see Guard.
	Egress *egress.Guard
}

// Guard returns the egress guard every connection of the sink must go through. The agent
// always sets Env.Egress from its flags; without it (a sink package's own tests) local
// destinations are allowed, and the rules that always hold (no link-local or metadata
// address) still do.
func (e Env) Guard() *egress.Guard {
	if e.Egress != nil {
		return e.Egress
	}
	return egress.New(egress.Policy{AllowLocal: true})
}
