package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The OCI image layout is read here with the standard library alone, following the OCI image
// spec, so that the test does not share code (or a misreading of the spec) with hack/images.

type descriptor struct {
	MediaType    string            `json:"mediaType"`
	ArtifactType string            `json:"artifactType"`
	Digest       string            `json:"digest"`
	Size         int64             `json:"size"`
	Annotations  map[string]string `json:"annotations"`
	Platform     *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant"`
	} `json:"platform"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations"`
}

type manifest struct {
	MediaType    string            `json:"mediaType"`
	ArtifactType string            `json:"artifactType"`
	Config       descriptor        `json:"config"`
	Layers       []descriptor      `json:"layers"`
	Subject      *descriptor       `json:"subject"`
	Annotations  map[string]string `json:"annotations"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant"`
	Created      string `json:"created"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Env        []string          `json:"Env"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

// layout is an OCI image layout directory.
type layout string

// blob reads a blob and checks that its content matches its digest and size.
func (l layout) blob(t *testing.T, d descriptor) []byte {
	t.Helper()
	algo, hexDigest, ok := strings.Cut(d.Digest, ":")
	if !ok || algo != "sha256" {
		t.Fatalf("descriptor digest %q is not sha256", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(string(l), "blobs", "sha256", hexDigest))
	if err != nil {
		t.Fatalf("blob %s: %v", d.Digest, err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != hexDigest || int64(len(data)) != d.Size {
		t.Fatalf("blob %s: content does not match its descriptor (size %d, want %d)", d.Digest, len(data), d.Size)
	}
	return data
}

func (l layout) json(t *testing.T, d descriptor, v any) {
	t.Helper()
	if err := json.Unmarshal(l.blob(t, d), v); err != nil {
		t.Fatalf("blob %s: %v", d.Digest, err)
	}
}

func (l layout) top(t *testing.T) index {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(string(l), "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	return idx
}

// file is one regular file or directory of an image's filesystem.
type file struct {
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

// filesystem applies an image's layers in order (these images have no whiteouts).
func (l layout) filesystem(t *testing.T, m manifest) map[string]file {
	t.Helper()
	fs := map[string]file{}
	for _, ld := range m.Layers {
		if ld.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer %s has media type %s, want an OCI gzip layer", ld.Digest, ld.MediaType)
		}
		zr, err := gzip.NewReader(bytes.NewReader(l.blob(t, ld)))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			name := "/" + strings.TrimSuffix(h.Name, "/")
			fs[name] = file{mode: h.Mode, uid: h.Uid, gid: h.Gid, dir: h.Typeflag == tar.TypeDir, data: data}
		}
	}
	return fs
}

// platformImages returns the platform manifests of the named image index of the layout.
func (l layout) platformImages(t *testing.T, ref string) (index, map[string]descriptor) {
	t.Helper()
	for _, d := range l.top(t).Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] != ref {
			continue
		}
		if d.MediaType != "application/vnd.oci.image.index.v1+json" {
			t.Fatalf("%s: media type %s, want an OCI image index", ref, d.MediaType)
		}
		var idx index
		l.json(t, d, &idx)
		byPlatform := map[string]descriptor{}
		for _, m := range idx.Manifests {
			if m.Platform == nil {
				t.Fatalf("%s: manifest %s has no platform", ref, m.Digest)
			}
			byPlatform[fmt.Sprintf("%s/%s", m.Platform.OS, m.Platform.Architecture)] = m
		}
		return idx, byPlatform
	}
	t.Fatalf("the layout names no image %s", ref)
	return index{}, nil
}
