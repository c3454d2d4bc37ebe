package gitlab

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

func covered(states ...v1alpha1.CoverageState) []export.Coverage {
	targets := []string{"apps/crons", "shop/deploys"}
	out := make([]export.Coverage, len(states))
	for i, s := range states {
		out[i] = export.Coverage{Target: targets[i], State: s, Rows: int64(i)}
		if s != v1alpha1.CoverageComplete {
			out[i].Reason = "the cluster does not serve batch/v1beta1 CronJob"
		}
	}
	return out
}

// cloneMR clones the merge-request branch with the git command line.
func cloneMR(t *testing.T, repo string) string {
	t.Helper()
	dir := t.TempDir()
	url := strings.Replace(gitServer.URL, "http://", "http://"+tokenUser+":"+token+"@", 1) + "/" + repo
	if out, err := exec.Command("git", "clone", "-q", "-b", "kollect/east/workloads", url, dir).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	return dir
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestMergeRequestCoverageChangeCommitsOnlyTheCoverageFile: in merge-request mode the coverage
// file travels on the merge-request branch with the documents; a batch that changes only the
// coverage is one commit there touching only that file (git show, from the real git server)
// and an update of the merge request, whose description names the target not complete; the same batch again pushes nothing and writes nothing
// to the API.
func TestMergeRequestCoverageChangeCommitsOnlyTheCoverageFile(t *testing.T) {
	ctx := context.Background()
	fake := NewFakeGitLab("g/p")
	defer fake.Close()
	repo := uniqueRepo("coverage")
	if _, err := gitServer.InitBareRepo(repo); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, fake, repo, "g/p", v1alpha1.GitLabMergeRequest, token)
	rows := []export.Row{row(t, "web", 1), row(t, "api", 2)}
	b, snap := batch(nil, rows...)
	b.Envelope.Coverage = covered(v1alpha1.CoverageComplete, v1alpha1.CoverageComplete)
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	const coverage = "east/workloads.coverage.json"
	dir := cloneMR(t, repo)
	if files := gitOut(t, dir, "show", "--name-only", "--format=", "HEAD"); !strings.Contains(files, coverage) || !strings.Contains(files, "Deployment/web.yaml") {
		t.Fatalf("the first commit touches:\n%s", files)
	}

	branch := "refs/heads/kollect/east/workloads"
	first, writes := lsRemote(t, repo)[branch], fake.writes
	b, _ = batch(snap, rows...)
	b.PreviousChecksum = snap.Checksum
	b.Envelope.Coverage = covered(v1alpha1.CoverageKindNotServed, v1alpha1.CoverageComplete)
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	second := lsRemote(t, repo)[branch]
	if second == first || fake.writes == writes {
		t.Fatalf("a coverage change: branch %s -> %s, API writes %d -> %d", first, second, writes, fake.writes)
	}
	if mrs := fake.openMRs(); len(mrs) != 1 || !strings.Contains(mrs[0].Description, "Coverage: 1 of 2 targets complete.\n- apps/crons: kindNotServed") {
		t.Fatalf("merge requests after a coverage change: %+v", mrs)
	}
	gitOut(t, dir, "pull", "-q", "--ff-only")
	if got := gitOut(t, dir, "rev-parse", "HEAD~1"); got != first {
		t.Fatalf("the coverage commit's parent is %s, want the previous tip %s", got, first)
	}
	if files := gitOut(t, dir, "show", "--stat", "--format=", "HEAD"); !strings.HasPrefix(files, coverage+" ") || strings.Count(files, "\n") != 1 {
		t.Fatalf("the coverage-only commit touches more than the coverage file:\n%s", files)
	}

	writes = fake.writes
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	restarted := newSink(t, fake, repo, "g/p", v1alpha1.GitLabMergeRequest, token)
	again, _ := batch(nil, rows...)
	again.Envelope.Coverage = b.Envelope.Coverage
	if err := restarted.Export(ctx, again); err != nil {
		t.Fatal(err)
	}
	if lsRemote(t, repo)[branch] != second || fake.writes != writes {
		t.Fatal("an unchanged batch pushed or wrote to the API")
	}
}

// TestDocumentedCoverageRead runs the read docs/sinks/gitlab.md documents, "which targets of
// cluster east are complete", in a clone of the project's repository after a merge-request
// export.
func TestDocumentedCoverageRead(t *testing.T) {
	ctx := context.Background()
	fake := NewFakeGitLab("g/p")
	defer fake.Close()
	repo := uniqueRepo("coverage-doc")
	if _, err := gitServer.InitBareRepo(repo); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, fake, repo, "g/p", v1alpha1.GitLabMergeRequest, token)
	b, _ := batch(nil, row(t, "web", 1))
	b.Envelope.Coverage = covered(v1alpha1.CoverageForbidden, v1alpha1.CoverageComplete)
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	line := sinktest.DocCommand(t, "gitlab.md", "| jq")
	if got, want := sinktest.Shell(t, cloneMR(t, repo), nil, line), "shop/deploys\n"; got != want {
		t.Fatalf("%s\nprints %q, want %q", line, got, want)
	}
}
