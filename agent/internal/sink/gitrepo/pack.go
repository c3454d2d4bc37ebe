package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/storage/memory"
)

// A commit's new objects (blobs of the documents that changed, the trees above them, the
// commit) are staged in memory, packed once into a file beside the mirror, sent from that
// file and, once the remote took them, stored in the mirror from the same file. go-git's own
// push would instead walk the whole tree of the remote's tip to find what the remote lacks
// (every push, however small the change: a 500-cluster repository's tree at each of 50
// agents' rounds), then load every object to send into memory at once; here the remote lacks
// exactly the staged objects, since the commit is built on a tip it holds. Nothing is stored
// in the mirror before the remote accepts it, so a lost round leaves no garbage there.

// stagedBlob is a blob whose content is a rendered document's bytes, not a copy of them:
// staging 100k documents costs their headers, not another 30 MB.
type stagedBlob struct {
	hash plumbing.Hash
	data []byte
}

var _ plumbing.EncodedObject = (*stagedBlob)(nil)

func (b *stagedBlob) Hash() plumbing.Hash         { return b.hash }
func (b *stagedBlob) Type() plumbing.ObjectType   { return plumbing.BlobObject }
func (b *stagedBlob) SetType(plumbing.ObjectType) {}
func (b *stagedBlob) Size() int64                 { return int64(len(b.data)) }
func (b *stagedBlob) SetSize(int64)               {}
func (b *stagedBlob) Reader() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.data)), nil
}
func (b *stagedBlob) Writer() (io.WriteCloser, error) {
	return nil, errors.New("a staged document is read-only")
}

// stageBlob stages data, whose blob hash is h, without copying it.
func stageBlob(staging *memory.Storage, h plumbing.Hash, data []byte) error {
	if _, err := staging.SetEncodedObject(&stagedBlob{hash: h, data: data}); err != nil {
		return fmt.Errorf("staging blob %s: %w", h, err)
	}
	return nil
}

// writePack packs every staged object into a new file in dir, without deltas (see the pack
// window in openMirror). The caller removes the file.
func writePack(dir string, staging *memory.Storage) (string, error) {
	f, err := os.CreateTemp(dir, "push-*.pack")
	if err != nil {
		return "", fmt.Errorf("creating a pack in the git cache: %w", err)
	}
	hashes := make([]plumbing.Hash, 0, len(staging.Objects))
	for h := range staging.Objects {
		hashes = append(hashes, h)
	}
	_, err = packfile.NewEncoder(f, staging, false).Encode(hashes, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("packing %d objects: %w", len(hashes), err)
	}
	return f.Name(), nil
}

// storePackFile adds the pack at path to the mirror's objects (go-git indexes it).
func storePackFile(store storer.EncodedObjectStorer, path string) error {
	pw, ok := store.(storer.PackfileWriter)
	if !ok {
		return errors.New("the git cache cannot store packs")
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading the pushed pack: %w", err)
	}
	defer f.Close()
	w, err := pw.PackfileWriter()
	if err != nil {
		return fmt.Errorf("opening a pack in the git cache: %w", err)
	}
	if _, err := io.Copy(w, f); err != nil {
		_ = w.Close()
		return fmt.Errorf("storing the pushed pack in the git cache: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("storing the pushed pack in the git cache: %w", err)
	}
	return nil
}

// errMoved is a push not sent: the remote's ref is no longer the one the commit was built on.
var errMoved = errors.New("the remote ref moved")

// sendPack asks the remote to move ref from old (zero: create it) to new, sending the pack at
// path. The remote refuses when ref is no longer old (git's receive-pack checks it under the
// ref's lock, the agent's in-process server under the repository's), so concurrent agents
// never overwrite each other; a ref that already moved is not even sent to.
func (m *mirror) sendPack(ctx context.Context, ref plumbing.ReferenceName, old, new plumbing.Hash, path string) (err error) {
	ep, err := transport.NewEndpoint(m.url)
	if err != nil {
		return err
	}
	ep.InsecureSkipTLS, ep.CaBundle = m.creds.InsecureSkipVerify, m.creds.CABundle
	c, err := client.NewClient(ep)
	if err != nil {
		return err
	}
	s, err := c.NewReceivePackSession(ep, m.creds.Auth)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	adv, err := s.AdvertisedReferencesContext(ctx)
	if err != nil {
		return err
	}
	refs, err := adv.AllReferences()
	if err != nil {
		return err
	}
	var current plumbing.Hash
	if r, err := refs.Reference(ref); err == nil {
		current = r.Hash()
	}
	if current != old {
		return fmt.Errorf("%w: %s is %s, the commit was built on %s", errMoved, ref, current, old)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading the pack to push: %w", err)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(adv.Capabilities)
	req.Commands = []*packp.Command{{Name: ref, Old: old, New: new}}
	req.Packfile = f // closed by the session once sent
	report, err := s.ReceivePack(ctx, req)
	_ = f.Close()
	if err != nil {
		return err
	}
	if report != nil {
		return report.Error()
	}
	return nil
}
