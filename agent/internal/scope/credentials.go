package scope

import (
	"fmt"
	"strings"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// SinkCredentials decides whether a sink of the rules' namespace may authenticate as the
// agent itself (ambient lists the unset secretRef fields that would make it do so) and skip
// verifying its server (insecure describes the settings that would make it do so, such as
// insecureSkipVerify or a plaintext postgres sslMode: validation.Unverified). Both are
// powers of the agent, not of the sink's author, so only KollectClusterScopes grant them:
// at least one must select the namespace, and every one that does must allow it. Tenant
// mode's missing KollectScope does not enter into it: sinks are shared, their users are
// judged by their own scopes.
func (r Rules) SinkCredentials(ambient, insecure []string) Decision {
	if len(ambient) > 0 {
		if d := r.clusterGrant(func(c *kollectv1.KollectClusterScopeSpec) bool { return c.AllowAmbientCredentials },
			"allowAmbientCredentials", fmt.Sprintf("%s unset: the sink would authenticate as the agent itself", strings.Join(ambient, ", "))); !d.Allowed {
			return d
		}
	}
	if len(insecure) > 0 {
		if d := r.clusterGrant(func(c *kollectv1.KollectClusterScopeSpec) bool { return c.AllowInsecureSkipVerify },
			"allowInsecureSkipVerify", strings.Join(insecure, "; ")); !d.Allowed {
			return d
		}
	}
	return Allow
}

func (r Rules) clusterGrant(allows func(*kollectv1.KollectClusterScopeSpec) bool, field, what string) Decision {
	governed := false
	for _, ru := range r.rules {
		if ru.cluster == nil {
			continue
		}
		governed = true
		if !allows(ru.cluster) {
			return deny(kollectv1.ReasonScopeCredentialsDenied, "%s, and %s does not set %s", what, ru.name, field)
		}
	}
	if !governed {
		return deny(kollectv1.ReasonScopeCredentialsDenied, "%s, and no KollectClusterScope with %s selects the namespace", what, field)
	}
	return Allow
}

// DestinationList is one governing scope's allowedDestinations.
type DestinationList struct {
	// Source names the scope: "KollectScope team-a/limits".
	Source       string
	Hosts, CIDRs []string
}

// Destinations returns the allowedDestinations of the scopes that govern the rules'
// namespace, in evaluation order; a sink there must satisfy every one. Scopes without the
// field do not restrict destinations.
func (r Rules) Destinations() []DestinationList {
	var out []DestinationList
	for _, ru := range r.rules {
		if d := ru.spec.AllowedDestinations; d != nil {
			out = append(out, DestinationList{Source: ru.name, Hosts: d.Hosts, CIDRs: d.CIDRs})
		}
	}
	return out
}
