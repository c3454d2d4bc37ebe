package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
)

// go-git serves file:// remotes by running git-upload-pack and git-receive-pack, which the
// agent's image does not have (and a minimal image should not). The agent serves them in
// process with go-git's own server instead. That server's receive-pack sets each ref without
// checking its old value, so two agents pushing to one shared repository at once could each
// "succeed" and one commit be lost: every push here is a compare-and-swap under an exclusive
// lock on the repository directory, as git's own receive-pack is under its ref locks. A
// fetch holds a shared lock for its session: go-git's storage lists the pack files once, so a
// fetch that read a ref a push had just moved would miss the push's new pack.
var installFile sync.Once

func useLocalTransport() {
	installFile.Do(func() { client.InstallProtocol("file", localTransport{server.NewClient(server.DefaultLoader)}) })
}

type localTransport struct{ transport.Transport }

func (t localTransport) NewUploadPackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, error) {
	dir, err := lockRepo(ep, syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	s, err := t.Transport.NewUploadPackSession(ep, auth)
	if err != nil {
		dir.Close()
		return nil, err
	}
	st, err := server.DefaultLoader.Load(ep)
	if err != nil {
		s.Close()
		dir.Close()
		return nil, err
	}
	return &lockedUploadSession{UploadPackSession: s, dir: dir, objects: st}, nil
}

// lockedUploadSession holds the shared lock until the session is closed.
type lockedUploadSession struct {
	transport.UploadPackSession
	dir     *os.File
	objects storer.EncodedObjectStorer
}

// UploadPack drops the commits the fetcher has that the repository does not (a commit whose
// push was refused): go-git's server walks every "have" and fails with "object not found"
// on one it lacks, where git's upload-pack ignores it.
func (s *lockedUploadSession) UploadPack(ctx context.Context, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	known := req.Haves[:0:0]
	for _, h := range req.Haves {
		if s.objects.HasEncodedObject(h) == nil {
			known = append(known, h)
		}
	}
	req.Haves = known
	return s.UploadPackSession.UploadPack(ctx, req)
}

func (s *lockedUploadSession) Close() error {
	err := s.UploadPackSession.Close()
	s.dir.Close() // closing the directory releases the lock
	return err
}

// lockRepo opens the repository's directory and locks it (LOCK_SH or LOCK_EX); closing the
// file releases the lock.
func lockRepo(ep *transport.Endpoint, how int) (*os.File, error) {
	dir, err := os.Open(ep.Path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, transport.ErrRepositoryNotFound
		}
		return nil, fmt.Errorf("opening %s: %w", ep.Path, err)
	}
	if err := syscall.Flock(int(dir.Fd()), how); err != nil {
		dir.Close()
		return nil, fmt.Errorf("locking %s: %w", ep.Path, err)
	}
	return dir, nil
}

func (t localTransport) NewReceivePackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.ReceivePackSession, error) {
	s, err := t.Transport.NewReceivePackSession(ep, auth)
	if err != nil {
		return nil, err
	}
	return &casSession{ReceivePackSession: s, ep: ep}, nil
}

// errRefMoved is a push refused because a ref is no longer what the pusher read: the sink
// fetches, re-applies and pushes again.
var errRefMoved = errors.New("the remote ref moved")

type casSession struct {
	transport.ReceivePackSession
	ep *transport.Endpoint
}

func (s *casSession) ReceivePack(ctx context.Context, req *packp.ReferenceUpdateRequest) (*packp.ReportStatus, error) {
	refuse := func(err error) (*packp.ReportStatus, error) {
		if req.Packfile != nil {
			req.Packfile.Close() // ends the client's pack encoder, which writes into a pipe
		}
		return nil, err
	}
	dir, err := lockRepo(s.ep, syscall.LOCK_EX)
	if err != nil {
		return refuse(err)
	}
	defer dir.Close()
	// A fresh storer reads the refs as they are on disk now, under the lock.
	st, err := server.DefaultLoader.Load(s.ep)
	if err != nil {
		return refuse(err)
	}
	for _, cmd := range req.Commands {
		var have plumbing.Hash
		switch ref, err := st.Reference(cmd.Name); {
		case errors.Is(err, plumbing.ErrReferenceNotFound):
		case err != nil:
			return refuse(fmt.Errorf("reading %s: %w", cmd.Name, err))
		default:
			have = ref.Hash()
		}
		if have != cmd.Old {
			return refuse(fmt.Errorf("%w: %s is %s, the push expected %s", errRefMoved, cmd.Name, have, cmd.Old))
		}
	}
	return s.ReceivePackSession.ReceivePack(ctx, req)
}
