package gitrepo

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// A refused agent leaves a contender mark, so that the holder reports the conflict too (a
// *sink.ContendedError at its next commit). The mark is not a commit on the branch: the
// refused agent retries every confirm interval, and a commit per retry would fill the
// history with noise and make the holder's pushes race the contender's. It is a ref outside
// refs/heads, refs/kollect/contenders/<cluster>/<inventory>, force-updated to a parentless
// commit with the empty tree whose trailers name the contender and the time; each retry
// replaces it (the replaced commit is garbage the server collects). Branch protection and
// receive.denyNonFastForwards apply to branches, not to such refs. A server that refuses the
// ref costs only the holder's report: the refusal stands, and the sink logs the failed mark.

// markPrefix is where contender marks live on the remote and in the mirror.
const markPrefix = "refs/kollect/contenders/"

// contenderMark is who tried to write a cluster's inventory while another agent held it.
type contenderMark struct {
	Contender export.Writer
	At        time.Time
}

// markRef is the ref of the contender mark of cluster's inventory; ok is false when the
// names do not make a valid ref name, and the inventory then has no mark.
func markRef(cluster, inventory string) (plumbing.ReferenceName, bool) {
	ref := plumbing.ReferenceName(markPrefix + cluster + "/" + inventory)
	if strings.ContainsAny(cluster+inventory, "/*") || ref.Validate() != nil {
		return "", false
	}
	return ref, true
}

const (
	trailerContenderVersion  = "Kollect-Contender-Version"
	trailerContenderInstance = "Kollect-Contender-Instance"
	trailerContendedAt       = "Kollect-Contended-At"
)

// markCommit stages the mark commit of check's refused writer, with the empty tree.
func markCommit(c sink.WriterCheck, author object.Signature) (plumbing.Hash, *memory.Storage, error) {
	staging := memory.NewStorage()
	emptyTree := staging.NewEncodedObject()
	if err := (&object.Tree{}).Encode(emptyTree); err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("encoding the empty tree: %w", err)
	}
	tree, err := staging.SetEncodedObject(emptyTree)
	if err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("staging the empty tree: %w", err)
	}
	msg := fmt.Sprintf("kollect: contender for %s/%s\n\nAgent %s was refused: %s holds this inventory.\n\n"+
		"Kollect-Cluster: %s\nKollect-Inventory: %s\n%s: %s\n%s: %s\n%s: %s\n",
		c.Cluster, c.Inventory, c.Self.Instance, c.Holder.Instance, c.Cluster, c.Inventory,
		trailerContenderVersion, c.Self.Version, trailerContenderInstance, c.Self.Instance,
		trailerContendedAt, c.Now.UTC().Format(time.RFC3339Nano))
	author.When = c.Now
	commit := &object.Commit{Author: author, Committer: author, Message: msg, TreeHash: tree}
	obj := staging.NewEncodedObject()
	if err := commit.Encode(obj); err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("encoding the contender mark: %w", err)
	}
	h, err := staging.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, nil, fmt.Errorf("staging the contender mark: %w", err)
	}
	return h, staging, nil
}

// readMark parses the mark commit; nil when it is not a mark of cluster's inventory (a ref
// written by hand).
func (m *mirror) readMark(h plumbing.Hash, cluster, inventory string) (*contenderMark, error) {
	c, err := object.GetCommit(m.repo.Storer, h)
	if err != nil {
		return nil, fmt.Errorf("reading the contender mark %s: %w", h, err)
	}
	t := trailers(c.Message)
	if t["Kollect-Cluster"] != cluster || t["Kollect-Inventory"] != inventory || t[trailerContenderInstance] == "" {
		return nil, nil
	}
	at, err := time.Parse(time.RFC3339Nano, t[trailerContendedAt])
	if err != nil {
		return nil, nil
	}
	return &contenderMark{Contender: export.Writer{Version: t[trailerContenderVersion], Instance: t[trailerContenderInstance]}, At: at}, nil
}

// trailers reads "Key: value" lines of a commit message; later lines win.
func trailers(msg string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(msg))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok && !strings.ContainsAny(k, " \t") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// markContender replaces the mark at ref, which is at old (zero: none), with the refused
// writer's. Failing to is logged, not returned: the refusal is what the caller must see.
func (s *Sink) markContender(ctx context.Context, c sink.WriterCheck, ref plumbing.ReferenceName, old plumbing.Hash) {
	if ref == "" {
		return
	}
	err := func() error {
		h, staging, err := markCommit(c, object.Signature{Name: s.cfg.AuthorName, Email: s.cfg.AuthorEmail})
		if err != nil {
			return err
		}
		return s.mirror.pushMark(ctx, ref, old, h, staging)
	}()
	if err != nil {
		s.env.Log.Info("could not leave the contender mark on the remote", "ref", ref.String(), "error", err.Error())
	}
}

// noteTakeover logs a takeover of another instance's inventory.
func (s *Sink) noteTakeover(c sink.WriterCheck) {
	if c.TakesOver() {
		s.env.Log.Info("taking over an inventory whose previous agent has not committed for the conflict window",
			"cluster", c.Cluster, "inventory", c.Inventory, "previous", c.Holder.Instance, "previousLastWrite", c.HolderLastWrite, "window", c.Window)
	}
}
