package node

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"kollect.dev/testenv"
)

// previousRelease is the release an upgrade starts from. Until the first v* tag it is the last
// commit before the project built images (docs/upgrading.md): a platform team could install
// it only from source, which is what the test does with its charts and binaries. When a tag
// exists, set it to the latest tag's commit.
const previousRelease = "0aef8840bdfcc26076e202ba9ab2d6c004601fa2"

// previous is the previous release, checked out and built once per test process.
var previous struct {
	once sync.Once
	tree string // its source tree (charts/ from here)
	ref  map[string]testenv.ImageRef
	err  error
}

// previousBuild returns the previous release's source tree and its images (built for this
// machine's platform by today's image builder, hack/images.sh, from that release's source).
func previousBuild(t *testing.T) (tree, imagesDir string, refs map[string]testenv.ImageRef) {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "kollect-previous-"+previousRelease[:12])
	previous.once.Do(func() {
		previous.tree = filepath.Join(dir, "src")
		previous.ref, previous.err = buildPrevious(dir)
	})
	if previous.err != nil {
		t.Fatal(previous.err)
	}
	return previous.tree, filepath.Join(dir, "images"), previous.ref
}

func buildPrevious(dir string) (map[string]testenv.ImageRef, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	images := filepath.Join(dir, "images")
	if refs, err := testenv.ImageRefs(images); err == nil {
		return refs, nil // built by an earlier run: the same commit builds the same images
	}
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	// git archive: the release's files as a user's checkout has them, with no .git to describe.
	archive := exec.Command("git", "-C", root, "archive", previousRelease)
	extract := exec.Command("tar", "-x", "-C", src)
	var stderr bytes.Buffer
	archive.Stderr, extract.Stderr = &stderr, &stderr
	if extract.Stdin, err = archive.StdoutPipe(); err != nil {
		return nil, err
	}
	if err := extract.Start(); err != nil {
		return nil, err
	}
	if err := archive.Run(); err != nil {
		return nil, fmt.Errorf("git archive %s (the previous release must be in the clone's history): %w\n%s", previousRelease, err, stderr.String())
	}
	if err := extract.Wait(); err != nil {
		return nil, fmt.Errorf("extracting %s: %w\n%s", previousRelease, err, stderr.String())
	}
	// The hub embeds the dashboard, which is built, not committed: the previous hub gets
	// today's (the API it serves is what an upgrade must keep working, not its pages).
	dist := filepath.Join(root, "hub", "internal", "webui", "dist")
	if out, err := exec.Command("cp", "-r", dist+"/.", filepath.Join(src, "hub", "internal", "webui", "dist")).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copying the dashboard: %v: %s", err, out)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "images.sh"), images,
		"-root", src, "-revision", previousRelease, "-version", "v0.1.0-dev+g"+previousRelease[:7],
		"-platforms", "linux/"+goarch())
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(images)
		return nil, fmt.Errorf("building the previous release's images: %w\n%s", err, stderr.String())
	}
	return testenv.ImageRefs(images)
}

func goarch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		return "amd64"
	}
	return string(bytes.TrimSpace(out))
}
