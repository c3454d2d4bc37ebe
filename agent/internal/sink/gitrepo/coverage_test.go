package gitrepo

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

func complete(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageComplete, Rows: rows}
}

func forbidden(target string, rows int64) export.Coverage {
	return export.Coverage{Target: target, State: v1alpha1.CoverageForbidden, Rows: rows,
		Reason: `cronjobs.batch is forbidden: User "system:serviceaccount:kollect:agent" cannot list resource "cronjobs"`}
}

// changedFiles lists the paths commit touches, as git show --stat reads them from the
// repository.
func changedFiles(t *testing.T, repo, commit string) []string {
	t.Helper()
	return strings.Fields(git(t, repo, "show", "--name-only", "--format=", commit))
}

// TestCoverageChangeCommitsOnlyTheCoverageFile, over file://: the first export commits the
// documents and the coverage file together; a batch that changes only the coverage (same
// checksum, empty diff) is a commit touching only the coverage file, whose body names the
// target that is not complete; the same batch again, and after a restart a full re-send,
// commit nothing (HEAD stays); a row and coverage change share one commit; a full export
// that prunes documents keeps the coverage file.
func TestCoverageChangeCommitsOnlyTheCoverageFile(t *testing.T) {
	ctx := context.Background()
	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "inv.git"))
	if err != nil {
		t.Fatal(err)
	}
	url := "file://" + repo
	e := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, nil),
		coverage: []export.Coverage{complete("apps/crons", 0), complete("apps/deploys", 2)}}
	rows := []export.Row{pod(t, "east", "shop", "web", 3), pod(t, "east", "ops", "probe", 1)}
	first := e.export(t, ctx, rows...)
	const coverage = "east/workloads.coverage.json"
	files := changedFiles(t, repo, first.Commit.String())
	if want := []string{coverage, "east/workloads/ops/Deployment/probe.yaml", "east/workloads/shop/Deployment/web.yaml"}; strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("first commit touches %v, want %v", files, want)
	}
	if got := git(t, repo, "show", "main:"+coverage); !strings.Contains(got, `{"target":"apps/deploys","state":"complete","rows":2,"extractionErrors":0}`) {
		t.Fatalf("coverage file:\n%s", got)
	}

	e.coverage = []export.Coverage{forbidden("apps/crons", 0), complete("apps/deploys", 2)}
	changed := e.export(t, ctx, rows...)
	if changed.Commit.IsZero() {
		t.Fatal("a coverage change made no commit")
	}
	stat := git(t, repo, "show", "--stat", "--format=", changed.Commit.String())
	if files := changedFiles(t, repo, changed.Commit.String()); len(files) != 1 || files[0] != coverage {
		t.Fatalf("the coverage-only commit touches %v:\n%s", files, stat)
	}
	body := git(t, repo, "log", "-1", "--format=%B", "main")
	for _, want := range []string{"Rows: 0 added, 0 changed, 0 removed (2 in all).", "Coverage: 1 of 2 targets complete.", "apps/crons: forbidden (cronjobs.batch is forbidden"} {
		if !strings.Contains(body, want) {
			t.Errorf("commit body lacks %q:\n%s", want, body)
		}
	}
	if got := git(t, repo, "show", "main:"+coverage); !strings.Contains(got, `"state":"forbidden"`) {
		t.Fatalf("coverage file after the change:\n%s", got)
	}

	head := git(t, repo, "rev-parse", "main")
	if again := e.export(t, ctx, rows...); !again.Commit.IsZero() {
		t.Fatalf("an unchanged batch committed %s", again.Commit)
	}
	restarted := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, nil), coverage: e.coverage}
	if again := restarted.export(t, ctx, rows...); !again.Commit.IsZero() {
		t.Fatalf("a full re-send of the same rows and coverage committed %s", again.Commit)
	}
	if now := git(t, repo, "rev-parse", "main"); now != head {
		t.Fatalf("HEAD moved from %s to %s without a change", head, now)
	}

	e.coverage = []export.Coverage{forbidden("apps/crons", 0), complete("apps/deploys", 1)}
	both := e.export(t, ctx, rows[0])
	if files := changedFiles(t, repo, both.Commit.String()); strings.Join(files, " ") != coverage+" east/workloads/ops/Deployment/probe.yaml" {
		t.Fatalf("a row removal with its coverage touches %v", files)
	}
	restarted.coverage = e.coverage
	restarted.prev = nil
	if again := restarted.export(t, ctx, rows[0]); !again.Commit.IsZero() {
		t.Fatalf("a full export that prunes nothing committed %s", again.Commit)
	}
	if got := git(t, repo, "ls-tree", "-r", "--name-only", "main"); got != coverage+"\neast/workloads/shop/Deployment/web.yaml" {
		t.Fatalf("tree after a full export:\n%s", got)
	}

	e.coverage = nil
	gone := e.export(t, ctx, rows[0])
	if files := changedFiles(t, repo, gone.Commit.String()); len(files) != 1 || files[0] != coverage {
		t.Fatalf("a batch without coverage touches %v, want the coverage file removed", files)
	}
	if got := git(t, repo, "ls-tree", "-r", "--name-only", "main"); got != "east/workloads/shop/Deployment/web.yaml" {
		t.Fatalf("tree after a batch without coverage:\n%s", got)
	}
}

// TestCoverageFileFollowsTheTemplate: the coverage file sits where the path template puts the
// inventory, and a template that would put a document there is refused, terminally.
func TestCoverageFileFollowsTheTemplate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ template, want string }{
		{"clusters/{cluster}/{inventory}/{namespace}/{kind}/{name}.{ext}", "clusters/east/workloads.coverage.json"},
		{"{cluster}/{namespace}/{inventory}/{name}.{ext}", "east/workloads.coverage.json"},
	} {
		repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "inv.git"))
		if err != nil {
			t.Fatal(err)
		}
		e := &exporter{sink: openTemplate(t, "file://"+repo, tc.template), coverage: []export.Coverage{complete("apps/deploys", 1)}}
		e.export(t, ctx, pod(t, "east", "shop", "web", 3))
		if got := git(t, repo, "ls-tree", "-r", "--name-only", "main"); !slices.Contains(strings.Fields(got), tc.want) {
			t.Errorf("template %s: tree\n%s\nlacks %s", tc.template, got, tc.want)
		}
	}

	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "clash.git"))
	if err != nil {
		t.Fatal(err)
	}
	s := openTemplate(t, "file://"+repo, "{cluster}/{inventory}{name}.json")
	rows := []export.Row{pod(t, "east", "shop", ".coverage", 1)}
	snap := export.NewSnapshot(rows)
	b := &sink.Batch{Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: "workloads",
		ItemCount: 1, Checksum: snap.Checksum, Rows: snap.Rows, Coverage: []export.Coverage{complete("apps/deploys", 1)}},
		Diff: export.Compute(nil, snap)}
	if err := s.Export(ctx, b); err == nil || sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "coverage file") {
		t.Fatalf("a document at the coverage file's path: %v, want a terminal error", err)
	}
}

func openTemplate(t *testing.T, url, template string) *Sink {
	t.Helper()
	env := sink.Env{Cluster: "east", Namespace: "kollect", Name: "repo", CacheDir: t.TempDir(), Log: logr.Discard()}
	s, err := Open(context.Background(), &v1alpha1.GitSinkConfig{URL: url, Branch: "main"},
		v1alpha1.Serialization{Format: v1alpha1.FormatJSON}, v1alpha1.Layout{Mode: v1alpha1.LayoutPerResource, PathTemplate: template}, env, "oauth2")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDocumentedCoverageRead runs the read docs/sinks/git.md documents, "which targets of
// cluster east are complete", in a clone of a repository the example's template wrote, over
// smart HTTP.
func TestDocumentedCoverageRead(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("coverage")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	url := gitServer.URL + "/" + name
	spec := &v1alpha1.GitSinkConfig{URL: url, Branch: "main", SecretRef: &v1alpha1.SecretReference{Name: "git-creds"}}
	env := sink.Env{Cluster: "east", Namespace: "kollect", Name: "repo", CacheDir: t.TempDir(), Log: logr.Discard(),
		Secrets: sinktest.Secrets(map[string]map[string][]byte{"git-creds": {"username": []byte(user), "password": []byte(pass)}})}
	s, err := Open(ctx, spec, v1alpha1.Serialization{}, v1alpha1.Layout{Mode: v1alpha1.LayoutPerResource,
		PathTemplate: "clusters/{cluster}/{inventory}/{namespace}/{kind}/{name}.{ext}"}, env, "oauth2")
	if err != nil {
		t.Fatal(err)
	}
	e := &exporter{sink: s, coverage: []export.Coverage{forbidden("apps/crons", 2), complete("ops/deploys", 1), complete("shop/deploys", 1)}}
	e.export(t, ctx, pod(t, "east", "shop", "web", 3), pod(t, "east", "ops", "probe", 1))

	dir := clone(t, strings.Replace(url, "http://", "http://"+user+":"+pass+"@", 1))
	line := sinktest.DocCommand(t, "git.md", "| jq")
	if got, want := sinktest.Shell(t, dir, nil, line), "ops/deploys\nshop/deploys\n"; got != want {
		t.Fatalf("%s\nprints %q, want %q", line, got, want)
	}
}
