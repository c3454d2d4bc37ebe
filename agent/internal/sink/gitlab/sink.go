package gitlab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/gitrepo"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// tokenUser is the user name GitLab expects with a token over git's HTTP basic auth.
const tokenUser = "oauth2"

// Sink is a git sink on GitLab with an optional merge-request mode.
type Sink struct {
	cfg v1alpha1.GitLabSinkConfig
	git *gitrepo.Sink
	api *api
	env sink.Env
}

var _ sink.Sink = (*Sink)(nil)

// New is the gitlab backend's entry in the sink table: it builds the sink from a
// KollectSnapshotSink of type gitlab.
func New(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
	spec, err := sink.SnapshotSpec(obj)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, spec, env)
	if err != nil {
		return nil, err // never a nil *Sink in a non-nil interface
	}
	return s, nil
}

// open builds a GitLab sink from a KollectSnapshotSink spec of type gitlab.
func open(ctx context.Context, spec *v1alpha1.KollectSnapshotSinkSpec, env sink.Env) (*Sink, error) {
	if spec.GitLab == nil {
		return nil, sink.Terminalf("spec.gitlab is required for a gitlab sink")
	}
	cfg := *spec.GitLab
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://gitlab.com"
	}
	if cfg.Mode == "" {
		cfg.Mode = v1alpha1.GitLabPush
	}
	if cfg.Project == "" {
		return nil, sink.Terminalf("spec.gitlab.project is required")
	}
	var token string
	if cfg.SecretRef != nil && env.Secrets != nil {
		data, err := env.Secrets(ctx, cfg.SecretRef.Name)
		if err != nil {
			return nil, fmt.Errorf("reading secret %s: %w", cfg.SecretRef.Name, err)
		}
		token = strings.TrimSpace(string(data[gitrepo.KeyToken]))
	}
	if token == "" && cfg.Mode == v1alpha1.GitLabMergeRequest {
		return nil, sink.Terminalf("mergeRequest mode needs a GitLab token under %q in spec.gitlab.secretRef", gitrepo.KeyToken)
	}
	g, err := gitrepo.Open(ctx, &cfg.GitSinkConfig, spec.Serialization, spec.Layout, env, tokenUser)
	if err != nil {
		return nil, err
	}
	if err := env.Guard().CheckURL(cfg.BaseURL); err != nil {
		return nil, sink.TerminalError(err)
	}
	client, err := httpClient(ctx, env, cfg.TLS)
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, git: g, env: env, api: &api{base: cfg.BaseURL, project: cfg.Project, token: token, http: client}}, nil
}

func httpClient(ctx context.Context, env sink.Env, t *v1alpha1.TLSConfig) (*http.Client, error) {
	guard := env.Guard()
	c := &http.Client{Timeout: 30 * time.Second, Transport: guard.Transport()}
	if t == nil {
		return c, nil
	}
	tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, for tests
	if ref := t.CASecretRef; ref != nil {
		data, err := env.Secrets(ctx, ref.Name)
		if err != nil {
			return nil, fmt.Errorf("reading secret %s: %w", ref.Name, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(data[ref.Key]) {
			return nil, sink.Terminalf("secret %s key %s holds no PEM certificate", ref.Name, ref.Key)
		}
		tc.RootCAs = pool
	}
	tr := guard.Transport()
	tr.TLSClientConfig = tc
	c.Transport = tr
	return c, nil
}

// MergeRequestBranch is the stable source branch of an inventory's merge request.
func MergeRequestBranch(cluster, inventory string) string {
	return "kollect/" + cluster + "/" + inventory
}

// Export pushes to the branch (push mode), or commits to the inventory's merge-request branch
// and keeps its merge request open and current (mergeRequest mode).
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	if s.cfg.Mode != v1alpha1.GitLabMergeRequest {
		return s.git.Export(ctx, b)
	}
	source := MergeRequestBranch(b.Envelope.Cluster, b.Envelope.Inventory)
	target := s.git.Branch()
	res, err := s.git.Publish(ctx, b, source, target)
	// A contended export succeeded (the branch holds the batch): keep the merge request
	// current, then report the other agent.
	contended := err
	if err != nil && !errors.Is(err, sink.ErrContended) {
		return err
	}
	mr, err := s.api.OpenMergeRequest(ctx, source, target)
	if err != nil {
		return err
	}
	description := fmt.Sprintf("Inventory **%s** of cluster **%s**: %d items, checksum `%s`.\n\nThis merge request is kept up to date by Kollect: each export with changes adds a commit to `%s`.",
		b.Envelope.Inventory, b.Envelope.Cluster, b.Envelope.ItemCount, b.Envelope.Checksum, source) + coverageNote(b.Envelope.Coverage)
	switch {
	case mr == nil:
		// Also after a retry whose push succeeded but whose API call failed: the branch
		// is current, only the merge request is missing.
		mr, err = s.api.CreateMergeRequest(ctx, source, target, res.Subject, description)
		if err != nil {
			return err
		}
		s.env.Log.Info("opened merge request", "iid", mr.IID, "url", mr.WebURL)
	case mr.Title != res.Subject || mr.Description != description:
		if err := s.api.UpdateMergeRequest(ctx, mr.IID, res.Subject, description); err != nil {
			return err
		}
	}
	return contended
}

// coverageNote tells a reviewer which targets' rows are not complete (kept from earlier, or
// removed by a scope). It is part of the description so that a change of coverage alone,
// which commits only the coverage file, also updates the merge request.
func coverageNote(cov []export.Coverage) string {
	if len(cov) == 0 {
		return ""
	}
	complete, others := gitrepo.CoverageCounts(cov)
	note := fmt.Sprintf("\n\nCoverage: %d of %d targets complete.", complete, len(cov))
	for i, o := range others {
		if i == maxNotComplete {
			note += "\n- …"
			break
		}
		note += "\n- " + o
	}
	return note
}

// maxNotComplete bounds the targets a description names; the coverage file lists them all.
const maxNotComplete = 20

// Probe checks the repository over git and the project over the API.
func (s *Sink) Probe(ctx context.Context) error {
	if err := s.git.Probe(ctx); err != nil {
		return err
	}
	if s.api.token == "" {
		return nil // push mode without a token: the git check is all there is
	}
	return s.api.Project(ctx)
}

// Preview describes the destination and the commit message; in mergeRequest mode the
// destination names the merge-request branch.
func (s *Sink) Preview(ctx context.Context, cluster, inventory string) (sink.Preview, error) {
	p, err := s.git.Preview(ctx, cluster, inventory)
	if err != nil {
		return p, err
	}
	p.Destination = fmt.Sprintf("GitLab project %s on %s: %s", s.cfg.Project, s.cfg.BaseURL, p.Destination)
	if s.cfg.Mode == v1alpha1.GitLabMergeRequest {
		p.Destination += fmt.Sprintf(" through a merge request from %s", MergeRequestBranch(cluster, inventory))
	}
	return p, nil
}

// Close releases the git sink.
func (s *Sink) Close() error { return s.git.Close() }
