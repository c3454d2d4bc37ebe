package sink

import (
	"context"

	"kollect.dev/api/v1alpha1"
)

// Factory builds one backend's sink from its sink object (of the backend's family). The
// object is handed over whole so that every backend, whatever part of the spec it reads, has
// the same constructor: each backend's New is a Factory, and a table of them is a plain map.
type Factory func(ctx context.Context, obj Object, env Env) (Sink, error)

// Factories is a table of backends by Key.
type Factories map[string]Factory

// Key is the table key of a backend: "family/type", for example "database/postgres".
func Key(family v1alpha1.SinkFamily, typ string) string { return string(family) + "/" + typ }
