package git

import (
	"context"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/gitrepo"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// tokenUser is the basic-auth user sent with a bare token; most forges accept any name with a
// token as the password.
const tokenUser = "oauth2"

// New builds a git sink from a KollectSnapshotSink spec of type git.
func New(ctx context.Context, spec *v1alpha1.KollectSnapshotSinkSpec, env sink.Env) (*gitrepo.Sink, error) {
	if spec.Git == nil {
		return nil, sink.Terminalf("spec.git is required for a git sink")
	}
	return gitrepo.Open(ctx, spec.Git, spec.Serialization, spec.Layout, env, tokenUser)
}
