package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/egress"
)

// sinkPolicy is what the scopes of a sink's namespace decide for it, beyond its spec.
type sinkPolicy struct {
	// guard checks every connection of the sink: the agent's egress policy narrowed by the
	// scopes' allowedDestinations.
	guard *egress.Guard
	// key changes whenever the decision does, so a built sink is rebuilt under new scopes.
	key string
}

// policy refuses, before any client is made, a sink whose URLs carry credentials or whose
// client would read the agent pod's own files or identity, and one
// that would authenticate as the agent itself or skip certificate verification where no
// KollectClusterScope allows it; it returns the guard the sink's connections go through.
func (b *SinkBuilder) policy(ctx context.Context, obj client.Object) (sinkPolicy, error) {
	creds, err := sink.Inspect(obj)
	if err != nil {
		return sinkPolicy{}, err
	}
	if len(creds.Inline) > 0 {
		return sinkPolicy{}, sink.Terminalf("%s: %s", strings.Join(sink.Strings(creds.Inline), ", "), sink.InlineCredentialsMessage)
	}
	if len(creds.PodFiles) > 0 {
		return sinkPolicy{}, sink.Terminalf("%s: %s", strings.Join(sink.Strings(creds.PodFiles), ", "), sink.PodFilesMessage)
	}
	rules, err := b.scopes.Rules(ctx, obj.GetNamespace())
	if err != nil {
		return sinkPolicy{}, fmt.Errorf("reading the scopes of namespace %s: %w", obj.GetNamespace(), err)
	}
	if len(creds.Ambient) > 0 || len(creds.Insecure) > 0 {
		if d := rules.SinkCredentials(sink.Strings(creds.Ambient), sink.Strings(creds.Insecure)); !d.Allowed {
			return sinkPolicy{}, sink.TerminalError(d.Err())
		}
	}
	var lists []egress.Allowlist
	var key strings.Builder
	for _, d := range rules.Destinations() {
		list := egress.Allowlist{Source: d.Source, Hosts: d.Hosts}
		for _, c := range d.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return sinkPolicy{}, sink.Terminalf("%s: allowedDestinations.cidrs: %q is not an address range: %v", d.Source, c, err)
			}
			list.Prefixes = append(list.Prefixes, p.Masked())
		}
		lists = append(lists, list)
		fmt.Fprintf(&key, "%s:%v:%v;", d.Source, d.Hosts, list.Prefixes)
	}
	return sinkPolicy{guard: b.egress.Restrict(lists...), key: key.String()}, nil
}
