package release

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"kollect.dev/testenv"
)

func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := testenv.Tool(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestReleaseBuildIsReproducible runs the release pipeline's build step (hack/release.sh build,
// what .github/workflows/release.yml runs on a tag) from the same commit as `make images` and
// expects the same image digests and the same SBOMs; then checks the charts it packaged name
// those images.
func TestReleaseBuildIsReproducible(t *testing.T) {
	root := repoRoot(t)
	made := imagesDir(t)
	version, err := testenv.Version()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), "build", "ghcr.io/kollect-dev", version)
	cmd.Env = append(os.Environ(), "RELEASE_OUT="+out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	listing, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/release.sh build: %v\n%s", err, stderr.String())
	}
	want, err := os.ReadFile(filepath.Join(made, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(listing) != string(want) {
		t.Fatalf("the second build's digests differ from make images':\n%s\nwant\n%s", listing, want)
	}
	for _, f := range []string{"images.txt", "sboms.txt"} {
		sameFile(t, filepath.Join(made, f), filepath.Join(out, "images", f))
	}
	sboms, _ := filepath.Glob(filepath.Join(made, "sbom", "*.spdx.json"))
	if len(sboms) != len(components)*len(platforms) {
		t.Errorf("make images wrote %d SBOMs, want %d", len(sboms), len(components)*len(platforms))
	}
	for _, s := range sboms {
		sameFile(t, s, filepath.Join(out, "images", "sbom", filepath.Base(s)))
	}

	// The packaged charts: version and appVersion from the release's version, and a default
	// image that is exactly what was built.
	refs, err := testenv.ImageRefs(made)
	if err != nil {
		t.Fatal(err)
	}
	helm := tool(t, "helm")
	for name, chart := range map[string]string{"agent": "kollect-agent", "hub": "kollect-hub"} {
		pkg := filepath.Join(out, "charts", chart+"-"+strings.TrimPrefix(version, "v")+".tgz")
		meta := run(t, helm, "show", "chart", pkg)
		if !strings.Contains(meta, "appVersion: "+refs[name].Tag) {
			t.Errorf("%s: appVersion is not the image tag %s:\n%s", chart, refs[name].Tag, meta)
		}
		manifest := run(t, helm, "template", "r", pkg, "--namespace", "kollect", "--set", "clusterName=c1")
		if !strings.Contains(manifest, "image: \""+refs[name].Ref()+"\"") {
			t.Errorf("%s: the packaged chart does not run %s by default", chart, refs[name].Ref())
		}
	}
}

// TestChartsPinImageByDigest: image.digest pins the image by value, and anything but a sha256
// digest is refused with a message.
func TestChartsPinImageByDigest(t *testing.T) {
	root := repoRoot(t)
	helm := tool(t, "helm")
	refs, err := testenv.ImageRefs(imagesDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, chart := range map[string]string{"agent": "charts/agent", "hub": "charts/hub"} {
		digest := refs[name].Digest
		manifest := run(t, helm, "template", "r", filepath.Join(root, chart), "--set", "clusterName=c1", "--set", "image.digest="+digest)
		want := "image: \"ghcr.io/kollect-dev/" + name + "@" + digest + "\""
		if !strings.Contains(manifest, want) {
			t.Errorf("%s with image.digest: want %s in\n%s", chart, want, grep(manifest, "image:"))
		}
		cmd := exec.Command(helm, "template", "r", filepath.Join(root, chart), "--set", "clusterName=c1", "--set", "image.digest=latest")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), `image.digest "latest" is not a sha256 digest`) {
			t.Errorf("%s with image.digest=latest: err %v, output:\n%s", chart, err, out)
		}
	}
}

// TestReleaseWorkflowLints runs actionlint (built from its Go module, with shellcheck on the
// run: scripts) over the workflows, and over a copy of the release workflow with a mistake in
// it, which it must refuse: a lint that passes everything proves nothing.
func TestReleaseWorkflowLints(t *testing.T) {
	root := repoRoot(t)
	actionlint := tool(t, "actionlint")
	shellcheck := tool(t, "shellcheck")
	workflows, _ := filepath.Glob(filepath.Join(root, ".github", "workflows", "*.yml"))
	if len(workflows) == 0 {
		t.Fatal("no workflow in .github/workflows")
	}
	args := append([]string{"-shellcheck", shellcheck, "-no-color"}, workflows...)
	if out, err := exec.Command(actionlint, args...).CombinedOutput(); err != nil {
		t.Fatalf("actionlint: %v\n%s", err, out)
	}

	data, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(data), "${{ github.repository_owner }}", "${{ github.repository_ownr }}", 1)
	if broken == string(data) {
		t.Fatal("release.yml no longer uses github.repository_owner; update the negative control")
	}
	dir := filepath.Join(t.TempDir(), ".github", "workflows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "release.yml")
	if err := os.WriteFile(bad, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(actionlint, "-shellcheck", shellcheck, "-no-color", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "repository_ownr") {
		t.Fatalf("actionlint passed a workflow with an unknown context property: %v\n%s", err, out)
	}
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(da, db) {
		t.Errorf("%s differs between two builds of the same commit", filepath.Base(a))
	}
}

func grep(s, pattern string) string {
	re := regexp.MustCompile(pattern)
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
