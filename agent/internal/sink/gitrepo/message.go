package gitrepo

import (
	"fmt"
	"strconv"
	"strings"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// DefaultMessage is the subject template when the spec sets none.
const DefaultMessage = "kollect: {cluster}/{inventory} ({itemCount} items, {checksumShort})"

// maxListed bounds the rows named in a commit body; counts are always complete.
const maxListed = 20

// Subject expands the message template.
func Subject(template, cluster, inventory, itemCount, checksumShort string) string {
	if template == "" {
		template = DefaultMessage
	}
	return strings.NewReplacer("{cluster}", cluster, "{inventory}", inventory,
		"{itemCount}", itemCount, "{checksumShort}", checksumShort).Replace(template)
}

// docChanges is what a commit did to documents, for the body when the diff is unknown.
type docChanges struct{ added, changed, removed []string }

// Message is the full commit message: the subject, a body summarising rows added, changed
// and removed (from the batch's diff, or from the documents written when the diff is full),
// and trailers that let a reader match the commit to the export and name the agent that wrote
// it (Kollect-Agent-Version, Kollect-Agent-Instance; left out when the batch names no writer).
// The writer is in the message only, never in a document: an upgraded agent's export of the
// same snapshot leaves the tree as it is, hence makes no commit.
func Message(template string, b *sink.Batch, docs docChanges) string {
	e := &b.Envelope
	var sb strings.Builder
	sb.WriteString(Subject(template, e.Cluster, e.Inventory, strconv.Itoa(e.ItemCount), export.ShortChecksum(e.Checksum)))
	sb.WriteString("\n\n")
	if b.Diff.Full {
		fmt.Fprintf(&sb, "Full export of %d rows: %d documents added, %d changed, %d removed.\n",
			e.ItemCount, len(docs.added), len(docs.changed), len(docs.removed))
		list(&sb, "Added", docs.added)
		list(&sb, "Changed", docs.changed)
		list(&sb, "Removed", docs.removed)
	} else {
		fmt.Fprintf(&sb, "Rows: %d added, %d changed, %d removed (%d in all).\n",
			len(b.Diff.Added), len(b.Diff.Changed), len(b.Diff.Deleted), e.ItemCount)
		list(&sb, "Added", names(b.Diff.Added))
		list(&sb, "Changed", names(b.Diff.Changed))
		list(&sb, "Removed", names(b.Diff.Deleted))
	}
	fmt.Fprintf(&sb, "\nKollect-Cluster: %s\nKollect-Inventory: %s\nKollect-Checksum: %s\nKollect-Generation: %d\n",
		e.Cluster, e.Inventory, e.Checksum, e.Generation)
	if e.Writer.Version != "" {
		fmt.Fprintf(&sb, "Kollect-Agent-Version: %s\n", e.Writer.Version)
	}
	if e.Writer.Instance != "" {
		fmt.Fprintf(&sb, "Kollect-Agent-Instance: %s\n", e.Writer.Instance)
	}
	return sb.String()
}

func names(rows []export.Row) []string {
	out := make([]string, 0, min(len(rows), maxListed+1))
	for i := range rows {
		if len(out) > maxListed {
			break
		}
		r := &rows[i]
		id := r.Name
		if r.Namespace != "" {
			id = r.Namespace + "/" + r.Name
		}
		out = append(out, r.Kind+" "+id)
	}
	return out
}

func list(sb *strings.Builder, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(sb, "\n%s:\n", title)
	for i, it := range items {
		if i == maxListed {
			sb.WriteString("  …\n")
			break
		}
		fmt.Fprintf(sb, "  %s\n", it)
	}
}
