package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// imagesDir is KOLLECT_IMAGES (what `make test` built with `make images`), or else a directory
// this process built them into with hack/images.sh, so that a plain `go test` works too.
var imagesDir = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv("KOLLECT_IMAGES"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "images.txt")); err != nil {
			return "", fmt.Errorf("KOLLECT_IMAGES=%s holds no images.txt (run make images): %w", dir, err)
		}
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "kollect-images-")
	if err != nil {
		return "", err
	}
	if err := BuildImages(root, dir, nil); err != nil {
		return "", fmt.Errorf("KOLLECT_IMAGES is not set and building the images failed: %w", err)
	}
	return dir, nil
})

// Images returns the directory `make images` writes (images.txt, agent.tar, hub.tar, oci/,
// sbom/): KOLLECT_IMAGES when set, else images built once per test process.
func Images() (string, error) { return imagesDir() }

// BuildImages runs hack/images.sh into out with the given extra environment (VERSION,
// IMAGE_REPO, PLATFORMS, …), as `make images` does.
func BuildImages(root, out string, env []string) error {
	cmd := exec.Command(filepath.Join(root, "hack", "images.sh"), out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/images.sh %s: %w\n%s", out, err, stderr.String())
	}
	return nil
}

// ImageRefs reads images.txt of an images directory: component name (agent, hub) → the
// reference REPO/NAME:TAG and the index digest.
func ImageRefs(dir string) (map[string]ImageRef, error) {
	data, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		return nil, err
	}
	refs := map[string]ImageRef{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		ref, digest, ok := strings.Cut(line, "@")
		i := strings.LastIndex(ref, ":") // the tag's colon, not a registry port's
		if !ok || i < strings.LastIndex(ref, "/") {
			return nil, fmt.Errorf("images.txt: malformed line %q", line)
		}
		repo := ref[:i]
		refs[filepath.Base(repo)] = ImageRef{Repository: repo, Tag: ref[i+1:], Digest: digest}
	}
	return refs, nil
}

// ImageRef is one line of images.txt.
type ImageRef struct {
	Repository, Tag, Digest string
}

// Ref is REPO:TAG.
func (r ImageRef) Ref() string { return r.Repository + ":" + r.Tag }
