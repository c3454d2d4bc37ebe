package agent

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink/backends"
	"kollect.dev/agent/internal/sink/snapshot"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestRenamedReferenceKeepsTheTargetsRows is issue 43 point 4: renaming an inventory's
// target reference to a name that does not exist is not a removal. Through the real agent and
// a real git repository: the renamed target's rows stay in the repository exactly as they
// were (same blob ids, in every commit) while another target's change is exported, the
// repository's coverage file says the target is failed (unknown, not empty), and the status
// names the missing reference; fixing the name back rewrites none of the rows; removing the
// reference deletes them.
func TestRenamedReferenceKeepsTheTargetsRows(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "renamed-ref")
	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "inv.git"))
	if err != nil {
		t.Fatal(err)
	}
	objs := configMapInventory(ns, 200*time.Millisecond, time.Second)
	inv := objs[3].(*kollectv1.KollectInventory)
	inv.Spec.Targets = append(inv.Spec.Targets, kollectv1.LocalObjectReference{Name: "other"})
	inv.Spec.Sinks = kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "repo"}}}
	other := &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Spec: kollectv1.KollectTargetSpec{
		ProfileRef:      kollectv1.LocalObjectReference{Name: "cm"},
		TargetSelection: kollectv1.TargetSelection{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}},
	}}
	otherMap := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "other"}}}
	}
	create(t, &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo"}, Spec: kollectv1.KollectSnapshotSinkSpec{
		Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file://" + repo, Branch: "main"},
		Layout: kollectv1.Layout{Mode: kollectv1.LayoutPerResource}}})
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", nil), otherMap("o1"))
	create(t, objs[0], objs[1], other, inv)
	startAgentWith(t, nil, "c-renamed", ns, backends.Factories(prometheus.NewRegistry()))

	// blobs maps each row file of a commit to its blob id: the repository's own marker of a
	// file's content, unchanged unless the agent rewrites the row.
	blobs := func(rev string) map[string]string {
		out := map[string]string{}
		for line := range strings.SplitSeq(gitOut(t, repo, "ls-tree", "-r", rev), "\n") {
			meta, path, ok := strings.Cut(line, "\t")
			if f := strings.Fields(meta); ok && len(f) == 3 && strings.HasSuffix(path, ".yaml") {
				out[filepath.Base(path)] = f[2]
			}
		}
		return out
	}
	names := func(rev string) string {
		var n []string
		for f := range blobs(rev) {
			n = append(n, strings.TrimSuffix(f, ".yaml"))
		}
		slices.Sort(n)
		return strings.Join(n, ",")
	}
	// coverage reads the coverage files of rev. A read can fail while the agent writes to the
	// repository (the listing and the file are read by separate git commands); that is an
	// error to wait out, not a coverage: callers poll.
	coverage := func(rev string) (map[string]kollectv1.TargetCoverage, error) {
		out := map[string]kollectv1.TargetCoverage{}
		// One commit for the listing and the reads: the agent may push between them, and a
		// file listed at one main may be gone from the next.
		commit := gitOut(t, repo, "rev-parse", rev)
		if commit == "" {
			return nil, fmt.Errorf("git rev-parse %s failed", rev)
		}
		for path := range strings.SplitSeq(gitOut(t, repo, "ls-tree", "-r", "--name-only", commit), "\n") {
			if !strings.HasSuffix(path, ".coverage.json") {
				continue
			}
			raw, err := exec.Command("git", "--git-dir", repo, "show", commit+":"+path).Output()
			if err != nil {
				return nil, fmt.Errorf("git show %s:%s: %w", commit, path, err)
			}
			var doc snapshot.CoverageDocument
			if err := json.Unmarshal(raw, &doc); err != nil {
				// Not a read to wait out: the commit holds a file that is not a coverage
				// document.
				t.Fatalf("coverage file %s at %s: %v: %q", path, commit, err, raw)
			}
			for _, c := range doc.Coverage {
				out[c.Target] = c
			}
		}
		return out, nil
	}
	// coverageOf waits until rev's coverage files can be read.
	coverageOf := func(rev string) map[string]kollectv1.TargetCoverage {
		t.Helper()
		var cov map[string]kollectv1.TargetCoverage
		eventually(t, 10*time.Second, "the coverage files of "+rev, func() (bool, string) {
			var err error
			cov, err = coverage(rev)
			return err == nil, fmt.Sprint(err)
		})
		return cov
	}
	head := func() string { return gitOut(t, repo, "rev-parse", "main") }
	eventually(t, 60*time.Second, "a, b and o1 in the repository", func() (bool, string) { return names("main") == "a,b,o1", names("main") })
	base := head()
	rowsOfCM := blobs(base)
	edit := func(change func(*kollectv1.KollectInventory)) {
		t.Helper()
		cur := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
		updateObject(t, cur, func() { change(cur) })
	}
	conditionIs := func(typ string, status metav1.ConditionStatus, reason string, want ...string) {
		t.Helper()
		got := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
		scopeCondition(t, got, func() []metav1.Condition { return got.Status.Conditions }, typ, status, reason, want...)
	}
	// sameRows fails unless every commit after from (up to to) holds a and b with the blob
	// ids of the first export: no export in between deleted or rewrote them.
	sameRows := func(from, to, step string) {
		t.Helper()
		for rev := range strings.SplitSeq(gitOut(t, repo, "rev-list", from+".."+to), "\n") {
			if rev == "" {
				continue
			}
			got := blobs(rev)
			for _, f := range []string{"a.yaml", "b.yaml"} {
				if got[f] != rowsOfCM[f] {
					t.Fatalf("%s: commit %s holds %s as blob %q, the first export had %q (files %s)", step, rev, f, got[f], rowsOfCM[f], names(rev))
				}
			}
		}
	}

	// The reference to cm is renamed to a name no target has. The status names it, and says
	// the sinks keep cm's rows.
	edit(func(i *kollectv1.KollectInventory) { i.Spec.Targets[0].Name = "cm-typo" })
	conditionIs(kollectv1.ConditionReady, metav1.ConditionFalse, kollectv1.ReasonTargetNotFound, "KollectTarget "+ns+"/cm-typo")
	conditionIs(kollectv1.ConditionSynced, metav1.ConditionFalse, kollectv1.ReasonTargetsIncomplete, ns+"/cm-typo", "the sinks keep their last rows")
	// Positive control: a change of the other target is exported, so the exports after the
	// rename are in the repository; none of them dropped or rewrote a and b.
	create(t, otherMap("o2"))
	eventually(t, 30*time.Second, "o2 exported", func() (bool, string) {
		return slices.Contains(strings.Split(names("main"), ","), "o2"), names("main")
	})
	held := head()
	sameRows(base, held, "after the rename")
	cov := coverageOf(held)
	if c := cov[ns+"/cm"]; c.State != kollectv1.CoverageFailed || c.Rows != 2 || !strings.Contains(c.Reason, ns+"/cm-typo") {
		t.Fatalf("coverage of the renamed target %s/cm: %+v, want failed with its 2 rows naming %s/cm-typo", ns, c, ns)
	}
	if c := cov[ns+"/cm-typo"]; c.State != kollectv1.CoverageFailed || c.Rows != 0 || !strings.Contains(c.Reason, "not found") {
		t.Fatalf("coverage of the missing reference %s/cm-typo: %+v", ns, c)
	}
	if c := cov[ns+"/other"]; c.State != kollectv1.CoverageComplete || c.Rows != 2 {
		t.Fatalf("coverage of %s/other: %+v", ns, c)
	}
	// The status says what the repository shows: cm's rows are unknown and kept. It names the
	// missing reference at once, and cm once the build that holds its rows has reported.
	got := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	eventually(t, 20*time.Second, "Synced naming "+ns+"/cm among the unknown targets whose rows the sinks keep", func() (bool, string) {
		synced := condition(t, got, func() []metav1.Condition { return got.Status.Conditions }, kollectv1.ConditionSynced)
		if synced == nil {
			return false, "no Synced condition"
		}
		unknown, _, _ := strings.Cut(strings.TrimPrefix(synced.Message, "rows of "), " are unknown")
		return slices.Contains(strings.Split(unknown, ", "), ns+"/cm"), synced.Message
	})

	// The name is fixed: cm is complete again, and no row is rewritten (only the coverage
	// file changes, and the writer file that every commit changing data rewrites).
	edit(func(i *kollectv1.KollectInventory) { i.Spec.Targets[0].Name = "cm" })
	eventually(t, 30*time.Second, "cm complete again in the repository", func() (bool, string) {
		c, err := coverage("main")
		return err == nil && c[ns+"/cm"].State == kollectv1.CoverageComplete && len(c) == 2, fmt.Sprint(err, gitOut(t, repo, "log", "--oneline", "main"))
	})
	conditionIs(kollectv1.ConditionReady, metav1.ConditionTrue, kollectv1.ReasonSnapshotReady)
	fixed := head()
	sameRows(held, fixed, "after the fix")
	for f := range strings.SplitSeq(gitOut(t, repo, "diff", "--name-only", held, fixed), "\n") {
		if !strings.HasSuffix(f, ".coverage.json") && !strings.HasSuffix(f, ".writer.json") {
			t.Fatalf("fixing the reference changed %s", f)
		}
	}

	// Removing the reference is the way to delete a target's rows.
	edit(func(i *kollectv1.KollectInventory) {
		i.Spec.Targets = []kollectv1.LocalObjectReference{{Name: "other"}}
	})
	eventually(t, 30*time.Second, "a and b deleted", func() (bool, string) { return names("main") == "o1,o2", names("main") })
	conditionIs(kollectv1.ConditionReady, metav1.ConditionTrue, kollectv1.ReasonSnapshotReady)
	if c := coverageOf("main"); len(c) != 1 || c[ns+"/other"].State != kollectv1.CoverageComplete {
		t.Fatalf("coverage after the removal: %+v", c)
	}
}
