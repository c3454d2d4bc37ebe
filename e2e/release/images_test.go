package release

import (
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kollect.dev/testenv"
)

// platforms are the platforms every image is published for, with the ELF machine its binary
// must be built for.
var platforms = map[string]elf.Machine{
	"linux/amd64": elf.EM_X86_64,
	"linux/arm64": elf.EM_AARCH64,
}

// components: image name → entrypoint binary and a module the SBOM must list (one the binary
// is known to link).
var components = map[string]struct{ binary, module string }{
	"agent": {"kollect-agent", "sigs.k8s.io/controller-runtime"},
	"hub":   {"kollect-hub", "connectrpc.com/connect"},
}

func imagesDir(t *testing.T) string {
	t.Helper()
	dir, err := testenv.Images()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func gitHead(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestImageContents reads each image of `make images` back from its OCI layout and checks what
// docs/releases.md says of it.
func TestImageContents(t *testing.T) {
	dir := imagesDir(t)
	refs, err := testenv.ImageRefs(dir)
	if err != nil {
		t.Fatal(err)
	}
	version, err := testenv.Version()
	if err != nil {
		t.Fatal(err)
	}
	head := gitHead(t)
	l := layout(filepath.Join(dir, "oci"))
	top := l.top(t)
	for name, c := range components {
		ref, ok := refs[name]
		if !ok {
			t.Fatalf("images.txt names no %s image: %v", name, refs)
		}
		if ref.Repository != "ghcr.io/kollect-dev/"+name {
			t.Errorf("%s image repository %s, want ghcr.io/kollect-dev/%s (what the release publishes)", name, ref.Repository, name)
		}
		idx, byPlatform := l.platformImages(t, ref.Ref())
		for _, key := range []string{"org.opencontainers.image.source", "org.opencontainers.image.revision", "org.opencontainers.image.version"} {
			if idx.Annotations[key] == "" {
				t.Errorf("%s index lacks the annotation %s", name, key)
			}
		}
		if got := idx.Annotations["org.opencontainers.image.revision"]; got != head {
			t.Errorf("%s index revision %q, want HEAD %s", name, got, head)
		}
		if got := idx.Annotations["org.opencontainers.image.version"]; got != version {
			t.Errorf("%s index version %q, want %s (hack/version.sh)", name, got, version)
		}
		if len(byPlatform) != len(platforms) {
			t.Errorf("%s index has platforms %v, want %v", name, keys(byPlatform), keys(platforms))
		}
		for pl, machine := range platforms {
			t.Run(name+"/"+pl, func(t *testing.T) {
				d, ok := byPlatform[pl]
				if !ok {
					t.Fatalf("no %s image", pl)
				}
				checkPlatformImage(t, l, top, d, c.binary, c.module, machine, head)
			})
		}
	}
}

func checkPlatformImage(t *testing.T, l layout, top index, d descriptor, binary, module string, machine elf.Machine, head string) {
	var m manifest
	l.json(t, d, &m)
	var cfg imageConfig
	l.json(t, m.Config, &cfg)
	if cfg.Config.User != "65532:65532" {
		t.Errorf("image user %q, want 65532:65532 (non-root)", cfg.Config.User)
	}
	if cfg.Config.Labels["org.opencontainers.image.revision"] != head {
		t.Errorf("image label revision %q, want %s", cfg.Config.Labels["org.opencontainers.image.revision"], head)
	}
	fs := l.filesystem(t, m)
	entry := "/usr/local/bin/" + binary
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != entry {
		t.Fatalf("entrypoint %v, want [%s]", cfg.Config.Entrypoint, entry)
	}
	bin, ok := fs[entry]
	if !ok || bin.mode&0o111 == 0 {
		t.Fatalf("%s missing or not executable in the image", entry)
	}
	f, err := elf.NewFile(bytes.NewReader(bin.data))
	if err != nil {
		t.Fatalf("%s is not an ELF binary: %v", entry, err)
	}
	if f.Machine != machine {
		t.Errorf("%s is built for %v, want %v", entry, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader: it is not static", entry)
		}
	}
	if passwd := string(fs["/etc/passwd"].data); !strings.Contains(passwd, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks the nonroot user:\n%s", passwd)
	}
	if tmp := fs["/tmp"]; !tmp.dir || tmp.mode != 0o1777 {
		t.Errorf("/tmp: dir %v mode %o, want a 1777 directory", tmp.dir, tmp.mode)
	}
	certs := 0
	rest := fs["/etc/ssl/certs/ca-certificates.crt"].data
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Errorf("CA bundle: %v", err)
		}
		certs++
	}
	if certs < 100 {
		t.Errorf("the CA bundle holds %d certificates, want a root store (100+)", certs)
	}
	checkSBOM(t, l, top, d, bin.data, module)
}

// checkSBOM finds the SPDX referrer of a platform image and checks it against `go version -m`
// run on the image's own binary.
func checkSBOM(t *testing.T, l layout, top index, image descriptor, binary []byte, module string) {
	var found *manifest
	for _, d := range top.Manifests {
		if d.ArtifactType != "application/spdx+json" {
			continue
		}
		var m manifest
		l.json(t, d, &m)
		if m.Subject != nil && m.Subject.Digest == image.Digest {
			found = &m
		}
	}
	if found == nil {
		t.Fatalf("no SPDX referrer has the image %s as subject", image.Digest)
	}
	if len(found.Layers) != 1 || found.Layers[0].MediaType != "application/spdx+json" {
		t.Fatalf("SBOM artifact layers %+v, want one application/spdx+json", found.Layers)
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name    string `json:"name"`
			Version string `json:"versionInfo"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(l.blob(t, found.Layers[0]), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("SBOM spdxVersion %q", doc.SPDXVersion)
	}
	listed := map[string]string{}
	for _, p := range doc.Packages {
		listed[p.Name] = p.Version
	}
	// `go version -m` (the Go toolchain, not this project) reads the modules from the binary.
	path := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "version", "-m", path).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	// A "=>" line replaces the module of the "dep" line before it: what shipped is the
	// replacement.
	var want [][2]string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[0] == "dep":
			want = append(want, [2]string{fields[1], fields[2]})
		case len(fields) >= 3 && fields[0] == "=>" && len(want) > 0:
			want[len(want)-1] = [2]string{fields[1], fields[2]}
		}
	}
	deps := len(want)
	for _, w := range want {
		if v, ok := listed[w[0]]; !ok || v != w[1] {
			t.Errorf("the SBOM lists %s at %q; the binary links %s", w[0], v, w[1])
		}
	}
	if _, ok := listed[module]; !ok || deps == 0 {
		t.Errorf("the SBOM lacks %s (binary deps: %d)", module, deps)
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
