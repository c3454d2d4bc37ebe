package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotAsked: a preview answer came from a cluster the preview did not ask.
var ErrNotAsked = errors.New("cluster not asked by this preview")

// PreviewTTL is how long a preview and its answers are kept: an agent may answer after the
// requester stopped waiting, and GetPreview reads those late answers until then.
const PreviewTTL = 15 * time.Minute

// Preview is one request to evaluate manifests on selected clusters without applying them.
// Nothing of it is configuration: it never moves the config epoch.
type Preview struct {
	ID          string
	Bundle      string // optional, for the audit log and the dashboard
	RequestedBy string
	Manifests   string
	MaxSamples  int32
	// Clusters are the clusters asked (connected when the preview was made), sorted;
	// NotConnected those selected but not asked (offline, stale, pending or revoked).
	Clusters     []string
	NotConnected []string
	CreatedAt    time.Time
	// Deadline is when the requester stops waiting; ExpiresAt when the preview is deleted
	// (CreatedAt + PreviewTTL).
	Deadline  time.Time
	ExpiresAt time.Time
}

// PreviewAnswer is one cluster's answer to a preview: the agent's PreviewResult as protobuf
// JSON (the hub never receives rows; samples only from agents that opted in).
type PreviewAnswer struct {
	PreviewID  string
	Cluster    string
	Result     string
	ReceivedAt time.Time
}

// PreviewStore keeps previews and their answers. Every Store implements it.
type PreviewStore interface {
	// CreatePreview stores a new preview (ErrConflict for an ID in use). On a store shared
	// by replicas the others hear of it (PreviewWatcher).
	CreatePreview(ctx context.Context, p Preview) error
	// GetPreview returns a preview, expired or not (ErrNotFound once deleted); the caller
	// compares ExpiresAt with its clock.
	GetPreview(ctx context.Context, id string) (Preview, error)
	// RecordPreviewAnswer stores a cluster's answer, replacing an earlier one of the same
	// cluster: ErrNotFound for an unknown preview or one expired at a.ReceivedAt, ErrNotAsked
	// for a cluster the preview did not ask.
	RecordPreviewAnswer(ctx context.Context, a PreviewAnswer) error
	// PreviewAnswers lists a preview's answers sorted by cluster.
	PreviewAnswers(ctx context.Context, id string) ([]PreviewAnswer, error)
	// DeleteExpiredPreviews deletes previews expired at now, with their answers, and
	// returns how many.
	DeleteExpiredPreviews(ctx context.Context, now time.Time) (int64, error)
}

// PreviewEvent is what PreviewWatcher reports.
type PreviewEvent int

const (
	// PreviewCreated: a replica created a preview; deliver it to the asked clusters' streams.
	PreviewCreated PreviewEvent = iota + 1
	// PreviewAnswered: a replica recorded an answer; a requester waiting for it reads again.
	PreviewAnswered
)

// PreviewWatcher is implemented by a store that several replicas share: WatchPreviews calls
// event for every preview created and every answer recorded through any replica (this one
// included), reports the errors that interrupt it to onError, and returns when ctx ends. A
// store of one process returns at once: its one replica knows everything already.
type PreviewWatcher interface {
	WatchPreviews(ctx context.Context, event func(kind PreviewEvent, previewID string), onError func(error))
}
