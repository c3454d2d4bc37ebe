package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// credentialDue says when the credential an agent presented expires and whether the agent
// should rotate it now: past half its life, without an expiry (issued by an older hub), or
// the previous credential of a rotation the agent did not finish (it could not store the new
// one).
func (a *agentService) credentialDue(c store.Cluster, presented string, now time.Time) (*timestamppb.Timestamp, bool) {
	if presented != c.CredentialHash {
		return timestamppb.New(c.PreviousExpiresAt), true
	}
	if c.CredentialExpiresAt.IsZero() {
		return nil, true
	}
	return timestamppb.New(c.CredentialExpiresAt), c.CredentialExpiresAt.Sub(now) < a.s.cfg.AgentCredentialTTL/2
}

// RotateCredential implements AgentService.
func (a *agentService) RotateCredential(ctx context.Context, _ *connect.Request[fleetv1.RotateCredentialRequest]) (*connect.Response[fleetv1.RotateCredentialResponse], error) {
	agent, ok := auth.AgentFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no agent identity"))
	}
	now := a.s.cfg.Now()
	presented := auth.PresentedCredential(ctx)
	// Only when asked: a credential in the wrong hands cannot turn rotation into a stream of
	// writes, nor rotate the real agent out before its credential is due.
	if _, due := a.credentialDue(agent, presented, now); !due {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the credential of cluster %s is not due for rotation "+
			"before %s", agent.Name, agent.CredentialExpiresAt.Add(-a.s.cfg.AgentCredentialTTL/2).UTC().Format(time.RFC3339)))
	}
	secret, hash, err := auth.NewSecret(auth.PrefixAgent)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	// The replaced credential works for the grace period, never longer than it would have.
	until := now.Add(a.s.cfg.AgentCredentialGrace)
	if exp := agent.CredentialExpiresAt; !exp.IsZero() && exp.Before(until) {
		until = exp
	}
	c, err := a.s.store.RotateCredential(ctx, store.Rotation{Cluster: agent.Name, PresentedHash: presented, NewHash: hash,
		NewExpiresAt: now.Add(a.s.cfg.AgentCredentialTTL), PreviousUntil: until})
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("agent credential of cluster %s revoked or replaced", agent.Name))
	}
	if err != nil {
		return nil, storeError(err)
	}
	if err := a.s.store.AppendAudit(ctx, store.AuditEvent{Actor: "cluster:" + agent.Name, Action: "RotateCredential",
		Target: "cluster/" + agent.Name, Detail: fmt.Sprintf("expires=%s previous_valid_until=%s",
			c.CredentialExpiresAt.Format(time.RFC3339), c.PreviousExpiresAt.Format(time.RFC3339))}); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	a.s.log.InfoContext(ctx, "agent credential rotated", "cluster", agent.Name, "expires", c.CredentialExpiresAt,
		"previousValidUntil", c.PreviousExpiresAt)
	return connect.NewResponse(&fleetv1.RotateCredentialResponse{Credential: secret, ExpiresAt: timestamppb.New(c.CredentialExpiresAt),
		PreviousValidUntil: timestamppb.New(c.PreviousExpiresAt)}), nil
}
