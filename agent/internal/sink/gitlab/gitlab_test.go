package gitlab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

const token = "glpat-test-token"

var gitServer *testenv.GitHTTP

func TestMain(m *testing.M) {
	var err error
	// GitLab takes a token as the password of user oauth2 over git's HTTP basic auth: the
	// real git server checks exactly that.
	gitServer, err = testenv.StartGitHTTP(tokenUser, token)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	gitServer.Stop()
	os.Exit(code)
}

// FakeGitLab is a fake of GitLab's REST API v4, because no GitLab server can run here (no
// Docker, no package). It follows the documented endpoints the sink calls — GET
// /projects/:id, GET/POST /projects/:id/merge_requests, PUT
// /projects/:id/merge_requests/:iid — with PRIVATE-TOKEN authentication, the URL-encoded
// project path as :id, GitLab's JSON field names, 401 {"message":"401 Unauthorized"} and
// 404 {"message":"404 Project Not Found"} answers, and 409 when a second open merge request
// for the same branches is created, as GitLab refuses it. The git side of the tests uses a
// real git server.
type FakeGitLab struct {
	*httptest.Server
	project string
	mu      sync.Mutex
	mrs     []*MergeRequest
	writes  int
	fail    int // answer the next requests with 500
}

func NewFakeGitLab(project string) *FakeGitLab {
	f := &FakeGitLab{project: project}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

func (f *FakeGitLab) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answer := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	if f.fail > 0 {
		f.fail--
		answer(http.StatusInternalServerError, map[string]string{"message": "500 Internal Server Error"})
		return
	}
	if r.Header.Get("PRIVATE-TOKEN") != token {
		answer(http.StatusUnauthorized, map[string]string{"message": "401 Unauthorized"})
		return
	}
	prefix := "/api/v4/projects/" + strings.ReplaceAll(f.project, "/", "%2F")
	if !strings.HasPrefix(r.URL.EscapedPath(), prefix) {
		answer(http.StatusNotFound, map[string]string{"message": "404 Project Not Found"})
		return
	}
	rest := strings.TrimPrefix(r.URL.EscapedPath(), prefix)
	switch {
	case rest == "" && r.Method == http.MethodGet:
		answer(http.StatusOK, map[string]any{"id": 42, "path_with_namespace": f.project})
	case rest == "/merge_requests" && r.Method == http.MethodGet:
		q := r.URL.Query()
		out := []*MergeRequest{}
		for _, mr := range f.mrs {
			if (q.Get("state") == "" || q.Get("state") == mr.State) && (q.Get("source_branch") == "" || q.Get("source_branch") == mr.SourceBranch) &&
				(q.Get("target_branch") == "" || q.Get("target_branch") == mr.TargetBranch) {
				out = append(out, mr)
			}
		}
		answer(http.StatusOK, out)
	case rest == "/merge_requests" && r.Method == http.MethodPost:
		var in MergeRequest
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SourceBranch == "" || in.TargetBranch == "" || in.Title == "" {
			answer(http.StatusBadRequest, map[string]string{"message": "400 Bad request"})
			return
		}
		for _, mr := range f.mrs {
			if mr.State == "opened" && mr.SourceBranch == in.SourceBranch && mr.TargetBranch == in.TargetBranch {
				answer(http.StatusConflict, map[string]any{"message": []string{"Another open merge request already exists for this source branch"}})
				return
			}
		}
		f.writes++
		in.IID, in.State = len(f.mrs)+1, "opened"
		in.WebURL = fmt.Sprintf("%s/%s/-/merge_requests/%d", f.URL, f.project, in.IID)
		f.mrs = append(f.mrs, &in)
		answer(http.StatusCreated, in)
	case strings.HasPrefix(rest, "/merge_requests/") && r.Method == http.MethodPut:
		iid, _ := strconv.Atoi(strings.TrimPrefix(rest, "/merge_requests/"))
		if iid < 1 || iid > len(f.mrs) {
			answer(http.StatusNotFound, map[string]string{"message": "404 Not found"})
			return
		}
		var in MergeRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		mr := f.mrs[iid-1]
		f.writes++
		mr.Title, mr.Description = in.Title, in.Description
		answer(http.StatusOK, mr)
	default:
		answer(http.StatusNotFound, map[string]string{"message": "404 Not Found"})
	}
}

func (f *FakeGitLab) openMRs() []MergeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []MergeRequest
	for _, mr := range f.mrs {
		if mr.State == "opened" {
			out = append(out, *mr)
		}
	}
	return out
}

func newSink(t testing.TB, fake *FakeGitLab, repo, project string, mode v1alpha1.GitLabMode, secretToken string) *Sink {
	t.Helper()
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGitLab,
		GitLab: &v1alpha1.GitLabSinkConfig{
			GitSinkConfig: v1alpha1.GitSinkConfig{URL: gitServer.URL + "/" + repo, Branch: "main",
				SecretRef: &v1alpha1.SecretReference{Name: "gitlab-token"}},
			BaseURL: fake.URL, Project: project, Mode: mode},
		Layout: v1alpha1.Layout{Mode: v1alpha1.LayoutPerResource}}
	env := sink.Env{Cluster: "east", Namespace: "kollect", Name: "gitlab", CacheDir: t.TempDir(), Log: logr.Discard(),
		Secrets: func(context.Context, string) (map[string][]byte, error) {
			return map[string][]byte{"token": []byte(secretToken)}, nil
		}}
	s, err := open(context.Background(), spec, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func row(t testing.TB, name string, replicas int) export.Row {
	raw, err := export.EncodeAttributes(map[string]any{"replicas": replicas})
	if err != nil {
		t.Fatal(err)
	}
	return export.Row{Origin: &export.Origin{Cluster: "east", Inventory: "workloads", Target: "deploys", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "shop", Name: name, UID: "u-" + name, Attributes: raw}
}

func batch(prev *export.Snapshot, rows ...export.Row) (*sink.Batch, *export.Snapshot) {
	snap := export.NewSnapshot(append([]export.Row(nil), rows...))
	return &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: "east", Inventory: "workloads",
			ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows},
		Diff: export.Compute(prev, snap),
	}, snap
}

func lsRemote(t testing.TB, repo string) map[string]string {
	url := strings.Replace(gitServer.URL, "http://", "http://"+tokenUser+":"+token+"@", 1) + "/" + repo
	out, err := exec.Command("git", "ls-remote", url).CombinedOutput()
	if err != nil {
		t.Fatalf("ls-remote: %v: %s", err, out)
	}
	refs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			refs[f[1]] = f[0]
		}
	}
	return refs
}

func TestMergeRequestModeKeepsOneMergeRequestUpToDate(t *testing.T) {
	ctx := context.Background()
	fake := NewFakeGitLab("platform/inventory")
	defer fake.Close()
	mrRepo := uniqueRepo("mr")
	if _, err := gitServer.InitBareRepo(mrRepo); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, fake, mrRepo, "platform/inventory", v1alpha1.GitLabMergeRequest, token)
	mainBefore := lsRemote(t, mrRepo)["refs/heads/main"]

	b, snap := batch(nil, row(t, "web", 1), row(t, "api", 2))
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	refs := lsRemote(t, mrRepo)
	if refs["refs/heads/main"] != mainBefore || refs["refs/heads/kollect/east/workloads"] == "" {
		t.Fatalf("refs after the first export: %v", refs)
	}
	mrs := fake.openMRs()
	if len(mrs) != 1 || mrs[0].SourceBranch != "kollect/east/workloads" || mrs[0].TargetBranch != "main" ||
		!strings.HasPrefix(mrs[0].Title, "kollect: east/workloads (2 items, ") {
		t.Fatalf("merge requests %+v", mrs)
	}
	first := refs["refs/heads/kollect/east/workloads"]

	// Unchanged: no commit, no API write.
	writes := fake.writes
	b, _ = batch(snap, row(t, "web", 1), row(t, "api", 2))
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if lsRemote(t, mrRepo)["refs/heads/kollect/east/workloads"] != first || fake.writes != writes {
		t.Fatal("an unchanged export pushed or wrote to the API")
	}

	// Changed: one commit on top of the branch, the same merge request updated in place.
	b, _ = batch(snap, row(t, "web", 3), row(t, "api", 2))
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	second := lsRemote(t, mrRepo)["refs/heads/kollect/east/workloads"]
	dir := t.TempDir()
	url := strings.Replace(gitServer.URL, "http://", "http://"+tokenUser+":"+token+"@", 1) + "/" + mrRepo
	if out, err := exec.Command("git", "clone", "-q", "-b", "kollect/east/workloads", url, dir).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	if parent, _ := exec.Command("git", "-C", dir, "rev-parse", "HEAD~1").Output(); strings.TrimSpace(string(parent)) != first {
		t.Fatalf("the new commit %s is not on top of %s", second, first)
	}
	mrs = fake.openMRs()
	if len(mrs) != 1 || mrs[0].IID != 1 || !strings.Contains(mrs[0].Title, "(2 items, ") {
		t.Fatalf("merge requests after an update %+v", mrs)
	}
	if !strings.Contains(mrs[0].Description, b.Envelope.Checksum) {
		t.Errorf("description does not carry the new checksum: %s", mrs[0].Description)
	}

	// Merged by a reviewer: the next change opens a new merge request from the same branch.
	fake.mu.Lock()
	fake.mrs[0].State = "merged"
	fake.mu.Unlock()
	b, _ = batch(snap, row(t, "web", 4))
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if mrs := fake.openMRs(); len(mrs) != 1 || mrs[0].IID != 2 {
		t.Fatalf("after merge: %+v", mrs)
	}

	// A failing API is transient, and the retry completes the export.
	fake.mu.Lock()
	fake.fail = 1
	fake.mrs[1].State = "closed"
	fake.mu.Unlock()
	if err := s.Export(ctx, b); err == nil || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("API outage: %v", err)
	}
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if mrs := fake.openMRs(); len(mrs) != 1 || mrs[0].IID != 3 {
		t.Fatalf("after the retry: %+v", mrs)
	}
}

func TestPushModeCommitsToTheBranch(t *testing.T) {
	fake := NewFakeGitLab("g/p")
	defer fake.Close()
	pushRepo := uniqueRepo("push")
	if _, err := gitServer.InitBareRepo(pushRepo); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, fake, pushRepo, "g/p", v1alpha1.GitLabPush, token)
	before := lsRemote(t, pushRepo)["refs/heads/main"]
	b, _ := batch(nil, row(t, "web", 1))
	if err := s.Export(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if after := lsRemote(t, pushRepo); after["refs/heads/main"] == before || len(after) != 2 { // HEAD and main
		t.Fatalf("refs %v", after)
	}
	if len(fake.openMRs()) != 0 {
		t.Fatal("push mode opened a merge request")
	}
}

func TestProbeAndPreview(t *testing.T) {
	ctx := context.Background()
	fake := NewFakeGitLab("g/p")
	defer fake.Close()
	probeRepo := uniqueRepo("probe")
	if _, err := gitServer.InitBareRepo(probeRepo); err != nil {
		t.Fatal(err)
	}
	if err := newSink(t, fake, probeRepo, "g/p", v1alpha1.GitLabMergeRequest, token).Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	for name, s := range map[string]*Sink{
		"wrong token":     newSink(t, fake, probeRepo, "g/p", v1alpha1.GitLabMergeRequest, "wrong"),
		"unknown project": newSink(t, fake, probeRepo, "g/other", v1alpha1.GitLabMergeRequest, token),
		"missing repo":    newSink(t, fake, "missing.git", "g/p", v1alpha1.GitLabMergeRequest, token),
	} {
		if err := s.Probe(ctx); err == nil || sink.ClassOf(err) != sink.Terminal {
			t.Errorf("%s: want terminal, got %v", name, err)
		}
	}
	s := newSink(t, fake, probeRepo, "g/p", v1alpha1.GitLabMergeRequest, token)
	fake.mu.Lock()
	fake.fail = 1
	fake.mu.Unlock()
	if err := s.Probe(ctx); err == nil || sink.ClassOf(err) != sink.Transient {
		t.Errorf("API outage: want transient, got %v", err)
	}
	p, err := s.Preview(ctx, "east", "workloads")
	if err != nil {
		t.Fatal(err)
	}
	want := "GitLab project g/p on " + fake.URL + ": " + gitServer.URL + "/" + probeRepo + " branch main through a merge request from kollect/east/workloads"
	if p.Destination != want || p.Message != "kollect: east/workloads (<itemCount> items, <checksumShort>)" {
		t.Errorf("preview %+v\nwant destination %s", p, want)
	}
	_, err = open(ctx, &v1alpha1.KollectSnapshotSinkSpec{GitLab: &v1alpha1.GitLabSinkConfig{Project: "g/p", Mode: v1alpha1.GitLabMergeRequest,
		GitSinkConfig: v1alpha1.GitSinkConfig{URL: "https://gitlab.example/g/p.git"}}}, sink.Env{CacheDir: t.TempDir()})
	if sink.ClassOf(err) != sink.Terminal {
		t.Errorf("mergeRequest mode without a token: %v", err)
	}
}

var repoCount atomic.Int64

// uniqueRepo names a fresh repository on the shared server, so tests can run repeatedly.
func uniqueRepo(base string) string {
	return fmt.Sprintf("%s-%d.git", base, repoCount.Add(1))
}
