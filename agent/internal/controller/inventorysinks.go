package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// sinkRetry is how soon an inventory retries building a sink that failed to build.
const sinkRetry = 30 * time.Second

// bindings builds (or reuses) the sinks of an inventory.
func (r *InventoryReconciler) bindings(ctx context.Context, key inventory.Key, o *inventoryObject) ([]inventory.SinkBinding, []string) {
	prior := map[inventory.SinkRef]kollectv1.SinkExportStatus{}
	for _, s := range o.status.Sinks {
		ns := s.Namespace
		if ns == "" {
			ns = key.Namespace
		}
		prior[inventory.SinkRef{Family: s.Family, Namespace: ns, Name: s.Name}] = s
	}
	var out []inventory.SinkBinding
	var problems []string
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.built == nil {
		r.built = map[string]builtSink{}
	}
	for _, ref := range o.sinks {
		cacheKey := key.String() + "|" + ref.String()
		// retired reuses the last binding while the inventory retires; true when it did.
		retired := func() bool {
			if c, ok := r.built[cacheKey]; ok && o.retire != "" && c.last != nil {
				out = append(out, *c.last)
				return true
			}
			return false
		}
		obj := newSinkObject(ref.Family)
		if err := r.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, obj); err != nil {
			if !retired() {
				problems = append(problems, fmt.Sprintf("%s sink %s/%s: %v", ref.Family, ref.Namespace, ref.Name, errMessage(err)))
			}
			continue
		}
		so := asSinkObject(obj)
		// Judged on every pass, not only at build: a scope that stops allowing the sink's
		// ambient credentials stops a sink already running, and new allowedDestinations
		// rebuild it with the narrower guard.
		policy, err := r.Sinks.policy(ctx, obj)
		if err != nil {
			if retired() {
				continue
			}
			delete(r.built, cacheKey)
			problems = append(problems, fmt.Sprintf("%s sink %s/%s: %v", ref.Family, ref.Namespace, ref.Name, err))
			continue
		}
		id := bindingID(obj)
		b, ok := r.built[cacheKey]
		// A rotated credential (the Secret fixed after a wrong password) needs a new client:
		// the sink is rebuilt, and its worker replaced, without anyone editing the sink.
		if !ok || b.id != id || b.policy != policy.key || (o.retire == "" && b.reads.rotated(ctx, time.Now())) {
			s, reads, err := r.Sinks.buildWatched(ctx, so, "inventory-"+key.String())
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if ok && b.id == id {
				logf.FromContext(ctx).Info("a Secret of the sink changed: rebuilt its client", "inventory", key.String(), "sink", ref.String())
			}
			b = builtSink{id: id, policy: policy.key, sink: s, reads: reads}
			r.built[cacheKey] = b
		}
		dest, err := sink.Destination(obj)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s sink %s/%s: %v", ref.Family, ref.Namespace, ref.Name, err))
			continue
		}
		p := prior[ref]
		// New scopes' destinations replace the worker like a rotated Secret does, keeping what
		// the sink accepted: the destination is the same, only the guard is narrower.
		binding := inventory.SinkBinding{Ref: ref, ID: id, Credentials: b.reads.digest() + policy.key, Destination: dest, Type: so.typ, Sink: b.sink, Timeout: so.timeout}
		// What the status remembers holds only for the destination it was accepted into: a
		// bucket, table, repository, path or format edited while the agent was down, or the
		// sink re-created under the same name, is a destination that holds nothing yet. A
		// status written before destinations were recorded (empty) is trusted, so an agent
		// upgrade rewrites nothing.
		if p.Destination == "" || p.Destination == dest {
			binding.Accepted, binding.AcceptedRows, binding.AcceptedCoverage = p.Checksum, int(p.Rows), p.Coverage
			if p.LastExportTime != nil {
				binding.AcceptedAt = p.LastExportTime.Time
			}
			if p.LastConfirmTime != nil {
				binding.ConfirmedAt = p.LastConfirmTime.Time
			}
		}
		b.last = &binding
		r.built[cacheKey] = b
		out = append(out, binding)
	}
	return out, problems
}

// destinations maps each bound sink to its destination digest, recorded beside the checksum.
func destinations(bindings []inventory.SinkBinding) map[inventory.SinkRef]string {
	out := make(map[inventory.SinkRef]string, len(bindings))
	for _, b := range bindings {
		out[b.Ref] = b.Destination
	}
	return out
}

func (r *InventoryReconciler) forget(key inventory.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.built {
		if strings.HasPrefix(k, key.String()+"|") {
			delete(r.built, k)
		}
	}
}
