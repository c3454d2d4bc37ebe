// Package hubclient connects an agent to a Kollect hub, when one is configured. It registers
// with a bootstrap token and keeps the credential it receives in a Secret, holds the hub's
// WatchConfig stream (reconnecting with backoff), applies the bundles it receives with
// server-side apply as field manager kollect-hub (retrying the objects whose apply failed, see
// retry.go), prunes hub-managed objects the bundles no
// longer hold, reverts local edits of hub-managed objects, and sends a heartbeat with the
// agent's state. Only kollect.dev kinds in allowed namespaces are applied; the hub never sends
// and the agent never needs sink credentials. When the hub is unreachable the agent keeps its
// last applied configuration and keeps exporting. It reaches the hub through hubdial, as the
// kollect CLI does, and takes the list of kinds it may manage from kollect.dev/api/v1alpha1.Kinds.
// A bundle preview on the stream is evaluated with package preview, one at a time and off the
// stream, and answered with ReportPreview; a preview never applies anything.
package hubclient
