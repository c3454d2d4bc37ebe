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

// docChanges is what a commit did to documents, for the body when the diff is unknown, and
// whether it changed the coverage file.
type docChanges struct {
	added, changed, removed []string
	coverage                bool
}

// Message is the full commit message: the subject, a body summarising rows added, changed
// and removed (from the batch's diff, or from the documents written when the diff is full),
// a coverage summary when the coverage file changed, and trailers that let a reader match the commit to the export and name the agent that wrote
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
	if docs.coverage {
		coverageSummary(&sb, e.Coverage)
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

// coverageSummary counts complete targets and names the others with their state and reason,
// so a reader of the log sees why rows were kept without opening the coverage file.
func coverageSummary(sb *strings.Builder, cov []export.Coverage) {
	if len(cov) == 0 {
		sb.WriteString("\nCoverage: none recorded.\n")
		return
	}
	complete, others := CoverageCounts(cov)
	fmt.Fprintf(sb, "\nCoverage: %d of %d targets complete.\n", complete, len(cov))
	list(sb, "Not complete", others)
}

// CoverageCounts counts the complete targets and describes the others as "target: state
// (reason)", for commit bodies and merge-request descriptions.
func CoverageCounts(cov []export.Coverage) (complete int, others []string) {
	for i := range cov {
		c := &cov[i]
		if c.State.Known() {
			complete++
			continue
		}
		item := c.Target + ": " + string(c.State)
		if c.Reason != "" {
			item += " (" + firstLine(c.Reason) + ")"
		}
		others = append(others, item)
	}
	return complete, others
}

// firstLine keeps a reason to one line of a commit body.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
