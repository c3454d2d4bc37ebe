package controller

import (
	"fmt"
	"strings"
	"time"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// An inventory's Ready, Synced and Degraded are computed together, here, from one
// inventoryState, so they cannot disagree. What each says (docs/operations.md, "Conditions"):
//
//   - Ready: a snapshot of every target exists (the snapshot);
//   - Synced: every sink the inventory names holds that snapshot, and it is current (the sinks);
//   - Degraded: something needs a person (a fault or a scope's decision), whatever clears by
//     itself or was asked for (a watch listing, an export on its way, suspend, deletion) does not.
//
// The rules that keep them from contradicting each other, which TestInventoryConditionsInvariants
// checks over every combination of problems:
//
//  1. Synced=True only with Ready=True: sinks cannot hold a complete snapshot that does not exist.
//  2. Synced=True only when no named sink is missing, denied by a scope, failing, or refusing this
//     agent's writes, no target's rows are unknown or behind, and no export is pending.
//  3. Ready=False or Synced=False with a reason that does not clear by itself (anything but
//     SnapshotPending, TargetsSyncing, ExportPending, WatchBehind, Suspended, Retiring) comes with
//     Degraded=True, and Degraded=True always names a problem.

// issue is one problem of a target or a sink: what it is about and why.
type issue struct {
	// subject names the target (namespace/name) or the sink; message is the whole sentence.
	subject, message string
}

// targetIssue is a target's own Degraded condition, carried over to its inventories.
type targetIssue struct {
	target, reason, message string
}

// inventoryState is everything an inventory's conditions depend on.
type inventoryState struct {
	// built: a snapshot exists. items and targets are its size, for the messages.
	built          bool
	items, targets int
	// retiring says what a deleted inventory waits for; "" while it lives or once it is done.
	retiring  string
	suspended bool

	// Targets whose rows are unknown: named but not found, forbidden, quarantined, or not
	// collected for another reason (a kind not served, a profile missing, a rollup at fault).
	missing, forbidden, quarantined, uncollected []issue
	// syncing are targets whose watch is listing, or that the agent has not taken up yet.
	syncing []issue
	// held: no earlier rows of the unknown targets exist, so the export waits for them.
	// carriedFrom: when the stored snapshot their rows come from was built (zero: from this
	// process's last snapshot).
	held        bool
	carriedFrom time.Time
	// behind are targets whose watch is behind its events.
	behind []issue
	// degradedTargets are targets collected in part (a match that fails on some objects, an
	// extraction that fails, objects exported cut).
	degradedTargets []targetIssue

	// denied are the scopes' decisions: targets left out, sinks not bound, cadence raised.
	denied []scopeProblem

	// Sinks: not there or not buildable, failing, contended, and behind the snapshot.
	invalidSinks, failingSinks []issue
	// conflicts are sinks another agent also writes; refused those where this agent's writes
	// are refused (a subset).
	conflicts, refused []issue
	pending            []issue
	sinks              int
}

// conditionValue is one condition's status, reason and message.
type conditionValue struct {
	status          bool
	reason, message string
}

// inventoryConditions computes Ready, Synced and Degraded from one state.
func inventoryConditions(s inventoryState) (ready, synced, degraded conditionValue) {
	return readyCondition(s), syncedCondition(s), degradedCondition(s)
}

// unknownTargets are the targets whose rows are unknown for a reason that does not clear by
// itself.
func (s inventoryState) unknownTargets() []issue {
	var out []issue
	for _, l := range [][]issue{s.missing, s.forbidden, s.quarantined, s.uncollected} {
		out = append(out, l...)
	}
	return out
}

// heldNote ends a target message when the export waits for a target's rows.
func (s inventoryState) heldNote() string {
	if !s.held {
		return ""
	}
	return "; the export waits: no earlier rows of them are known to this agent (its --cache-dir keeps none)"
}

// readyCondition: a snapshot of every target exists. Problems that need a person come first.
func readyCondition(s inventoryState) conditionValue {
	notFound := func(is []issue) string {
		return "not found: " + messages(is, ", ")
	}
	switch {
	case s.retiring != "":
		return conditionValue{false, kollectv1.ReasonRetiring, s.retiring}
	case len(s.missing) > 0:
		return conditionValue{false, kollectv1.ReasonTargetNotFound, notFound(s.missing) + s.heldNote()}
	case len(s.unknownTargets()) > 0:
		all := append(s.unknownTargets(), s.syncing...)
		return conditionValue{false, kollectv1.ReasonTargetsIncomplete, messages(all, "; ") + s.heldNote()}
	case len(s.syncing) > 0:
		return conditionValue{false, kollectv1.ReasonTargetsSyncing, messages(s.syncing, "; ")}
	case !s.built:
		return conditionValue{false, kollectv1.ReasonSnapshotPending, "no snapshot built yet"}
	}
	return conditionValue{true, kollectv1.ReasonSnapshotReady, fmt.Sprintf("%d items from %d targets", s.items, s.targets)}
}

// syncedCondition: every sink the inventory names holds the current, complete snapshot.
// What the user decided (deletion, suspend) comes first, then what needs a person, then what
// clears by itself.
func syncedCondition(s inventoryState) conditionValue {
	var deniedSink *scopeProblem
	for i := range s.denied {
		if s.denied[i].sink {
			deniedSink = &s.denied[i]
			break
		}
	}
	switch {
	case s.retiring != "":
		return conditionValue{false, kollectv1.ReasonRetiring, s.retiring}
	case s.suspended:
		return conditionValue{false, kollectv1.ReasonSuspended, "exports are suspended"}
	case len(s.unknownTargets()) > 0:
		// The sinks hold the target's last known rows at best, however they stand.
		msg := "rows of " + subjects(s.unknownTargets()) + " are unknown"
		switch {
		case s.held:
			msg += s.heldNote()
		case !s.carriedFrom.IsZero():
			msg += "; the sinks get their last rows, from the snapshot built " + s.carriedFrom.UTC().Truncate(time.Second).Format(time.RFC3339)
		default:
			msg += "; the sinks keep their last rows"
		}
		return conditionValue{false, kollectv1.ReasonTargetsIncomplete, msg}
	case deniedSink != nil:
		return conditionValue{false, deniedSink.reason, deniedSink.message}
	case len(s.invalidSinks) > 0:
		return conditionValue{false, kollectv1.ReasonSinkInvalid, "cannot hold the current snapshot: " + messages(s.invalidSinks, "; ")}
	case len(s.failingSinks) > 0:
		return conditionValue{false, kollectv1.ReasonExportFailed, messages(s.failingSinks, "; ")}
	case len(s.refused) > 0:
		// Not ExportPending: a refused sink does not catch up by itself.
		return conditionValue{false, kollectv1.ReasonWriterConflict, messages(s.refused, "; ")}
	case len(s.syncing) > 0:
		msg := "rows of " + subjects(s.syncing) + " are being listed"
		if s.built {
			msg += "; the sinks keep their last rows"
		} else {
			msg += "; the first export waits for them"
		}
		return conditionValue{false, kollectv1.ReasonTargetsSyncing, msg}
	case !s.built:
		return conditionValue{false, kollectv1.ReasonExportPending, "no snapshot built yet"}
	case len(s.behind) > 0:
		// The sinks may well hold the snapshot, but the snapshot is behind the cluster.
		return conditionValue{false, kollectv1.ReasonWatchBehind, messages(s.behind, "; ")}
	case len(s.pending) > 0:
		return conditionValue{false, kollectv1.ReasonExportPending, "exporting to " + subjects(s.pending)}
	}
	return conditionValue{true, kollectv1.ReasonExported, fmt.Sprintf("%d sinks hold the current snapshot", s.sinks)}
}

// degradedReasons orders the reasons of Degraded: with several problems, the first present
// gives the reason, and the message lists them all. A scope's decision comes before any
// fault: it is what the cluster admin chose, and the faults may follow from it.
var degradedReasons = []string{
	kollectv1.ReasonWriterConflict, kollectv1.ReasonExportFailed, kollectv1.ReasonSinkInvalid,
	kollectv1.ReasonForbidden, kollectv1.ReasonBudgetExceeded, kollectv1.ReasonTargetNotFound, kollectv1.ReasonTargetsIncomplete,
	kollectv1.ReasonMatchFailed, kollectv1.ReasonExtractionFailed, kollectv1.ReasonObjectsTruncated,
}

// degradedCondition: something needs a person. Scope problems lead; see degradedReasons.
func degradedCondition(s inventoryState) conditionValue {
	var msgs []string
	for _, p := range s.denied {
		msgs = append(msgs, p.message)
	}
	found := map[string][]string{
		kollectv1.ReasonBudgetExceeded:    messageList(s.quarantined),
		kollectv1.ReasonForbidden:         messageList(s.forbidden),
		kollectv1.ReasonSinkInvalid:       messageList(s.invalidSinks),
		kollectv1.ReasonExportFailed:      messageList(s.failingSinks),
		kollectv1.ReasonWriterConflict:    messageList(s.conflicts),
		kollectv1.ReasonTargetNotFound:    prefixed("not found: ", messageList(s.missing)),
		kollectv1.ReasonTargetsIncomplete: messageList(s.uncollected),
	}
	for _, t := range s.degradedTargets {
		found[t.reason] = append(found[t.reason], "target "+t.target+": "+t.message)
	}
	// The message keeps the order in which the problems were always listed: scopes, targets'
	// collection, sinks, then targets collected in part.
	for _, r := range []string{kollectv1.ReasonBudgetExceeded, kollectv1.ReasonForbidden, kollectv1.ReasonTargetNotFound,
		kollectv1.ReasonTargetsIncomplete, kollectv1.ReasonSinkInvalid, kollectv1.ReasonExportFailed, kollectv1.ReasonWriterConflict,
		kollectv1.ReasonMatchFailed, kollectv1.ReasonExtractionFailed, kollectv1.ReasonObjectsTruncated} {
		msgs = append(msgs, found[r]...)
	}
	if len(msgs) == 0 {
		return conditionValue{false, kollectv1.ReasonNoProblems, ""}
	}
	reason := ""
	if len(s.denied) > 0 {
		reason = s.denied[0].reason
	}
	for _, r := range degradedReasons {
		if reason == "" && len(found[r]) > 0 {
			reason = r
		}
	}
	return conditionValue{true, reason, strings.Join(msgs, "; ")}
}

func messageList(is []issue) []string {
	out := make([]string, 0, len(is))
	for _, i := range is {
		out = append(out, i.message)
	}
	return out
}

func messages(is []issue, sep string) string { return strings.Join(messageList(is), sep) }

func subjects(is []issue) string {
	out := make([]string, 0, len(is))
	for _, i := range is {
		out = append(out, i.subject)
	}
	return strings.Join(out, ", ")
}

func prefixed(prefix string, msgs []string) []string {
	for i := range msgs {
		msgs[i] = prefix + msgs[i]
	}
	return msgs
}
