package git

import (
	"context"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/gitrepo"
)

// tokenUser is the basic-auth user sent with a bare token; most forges accept any name with a
// token as the password.
const tokenUser = "oauth2"

// New is the git backend's entry in the sink table: it builds the sink from a
// KollectSnapshotSink of type git.
func New(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
	spec, err := sink.SnapshotSpec(obj)
	if err != nil {
		return nil, err
	}
	if spec.Git == nil {
		return nil, sink.Terminalf("spec.git is required for a git sink")
	}
	s, err := gitrepo.Open(ctx, spec.Git, spec.Serialization, spec.Layout, env, tokenUser)
	if err != nil {
		return nil, err // never a nil *Sink in a non-nil interface
	}
	return s, nil
}
