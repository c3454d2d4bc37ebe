package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media and artifact types of the SBOM referrers (OCI image spec 1.1).
const (
	spdxMediaType  = "application/spdx+json"
	emptyMediaType = "application/vnd.oci.empty.v1+json"
)

// write lays the images out under o.out and returns the images.txt listing:
//
//	oci/                 one OCI image layout: both image indexes and the SBOM referrers
//	NAME.tar             an OCI archive of that image index alone (ctr images import, skopeo)
//	sbom/NAME_OS_ARCH.spdx.json
//	images.txt           REPO/NAME:TAG@sha256:… per component (the image index)
//	sboms.txt            REPO/NAME@sha256:… sbom/FILE per platform image (cosign attest's input)
func write(o options, all []built) (string, error) {
	if err := os.RemoveAll(o.out); err != nil {
		return "", err
	}
	combined, err := layout.Write(filepath.Join(o.out, "oci"), empty.Index)
	if err != nil {
		return "", err
	}
	var listing, sboms strings.Builder
	for _, b := range all {
		idx, err := indexOf(o, b)
		if err != nil {
			return "", err
		}
		digest, err := idx.Digest()
		if err != nil {
			return "", err
		}
		names := layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": b.ref,
			"io.containerd.image.name":          b.ref,
		})
		if err := combined.AppendIndex(idx, names); err != nil {
			return "", fmt.Errorf("%s: write the layout: %w", b.name, err)
		}
		for _, pi := range b.images {
			if err := appendSBOM(combined, b, pi); err != nil {
				return "", fmt.Errorf("%s %s: %w", b.name, pi.platform, err)
			}
			file := filepath.Join(o.out, "sbom", fmt.Sprintf("%s_%s_%s.spdx.json", b.name, pi.platform.os, pi.platform.arch))
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(file, pi.sbom, 0o644); err != nil {
				return "", err
			}
			d, err := pi.image.Digest()
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&sboms, "%s/%s@%s sbom/%s\n", o.repo, b.name, d, filepath.Base(file))
		}
		// The archive: a layout of this index alone, so that `ctr images import` names exactly
		// one image.
		single := filepath.Join(o.out, ".layout-"+b.name)
		p, err := layout.Write(single, empty.Index)
		if err != nil {
			return "", err
		}
		if err := p.AppendIndex(idx, names); err != nil {
			return "", err
		}
		if err := tarDir(single, filepath.Join(o.out, b.name+".tar"), o); err != nil {
			return "", err
		}
		if err := os.RemoveAll(single); err != nil {
			return "", err
		}
		fmt.Fprintf(&listing, "%s@%s\n", b.ref, digest)
	}
	if err := os.WriteFile(filepath.Join(o.out, "images.txt"), []byte(listing.String()), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(o.out, "sboms.txt"), []byte(sboms.String()), 0o644); err != nil {
		return "", err
	}
	return listing.String(), nil
}

// appendSBOM writes the SPDX document as an OCI 1.1 artifact whose subject is the platform
// image, so that `oras discover` or a registry's referrers API finds it from the image.
func appendSBOM(p layout.Path, b built, pi platformImage) error {
	subject, err := descriptorOf(pi.image, pi.platform)
	if err != nil {
		return err
	}
	emptyJSON := []byte("{}")
	config := blobDescriptor(emptyMediaType, emptyJSON)
	config.Data = emptyJSON
	layer := blobDescriptor(spdxMediaType, pi.sbom)
	layer.Annotations = map[string]string{
		"org.opencontainers.image.title": fmt.Sprintf("%s_%s_%s.spdx.json", b.name, pi.platform.os, pi.platform.arch),
	}
	manifest := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  spdxMediaType,
		Config:        config,
		Layers:        []v1.Descriptor{layer},
		Subject:       &subject,
	}
	raw, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	for _, blob := range [][]byte{emptyJSON, pi.sbom, raw} {
		d := blobDescriptor("", blob)
		if err := p.WriteBlob(d.Digest, io.NopCloser(bytes.NewReader(blob))); err != nil {
			return err
		}
	}
	desc := blobDescriptor(types.OCIManifestSchema1, raw)
	desc.ArtifactType = spdxMediaType
	return p.AppendDescriptor(desc)
}

func descriptorOf(img v1.Image, pl platform) (v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: size, Platform: pl.v1()}, nil
}

func blobDescriptor(mt types.MediaType, data []byte) v1.Descriptor {
	sum := sha256.Sum256(data)
	return v1.Descriptor{MediaType: mt, Size: int64(len(data)),
		Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}}
}

// tarDir writes dir as a deterministic tar archive (sorted, every time the epoch).
func tarDir(dir, out string, o options) error {
	var files []string
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			files = append(files, path)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(files)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, path := range files {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: o.epoch, Mode: 0o644, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		} else {
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			src, err := os.Open(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			if err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// pushLayout uploads every image index of an OCI layout that names its reference (the oci/
// directory this tool writes), with the Docker config's credentials: the release pushes
// exactly the bytes it built and tested.
func pushLayout(ctx context.Context, dir string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return err
	}
	pushed := 0
	for _, d := range m.Manifests {
		refName := d.Annotations["org.opencontainers.image.ref.name"]
		if refName == "" || !d.MediaType.IsIndex() {
			continue // the SBOM referrers: cosign attests them
		}
		ref, err := name.ParseReference(refName)
		if err != nil {
			return fmt.Errorf("%s: %w", refName, err)
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", refName, err)
		}
		fmt.Printf("%s@%s\n", refName, d.Digest)
		pushed++
	}
	if pushed == 0 {
		return fmt.Errorf("%s holds no named image index", dir)
	}
	return nil
}

// push uploads each image index to its REPO/NAME:TAG with the credentials of the Docker config
// (docker login, or the release workflow's registry login).
func push(ctx context.Context, o options, all []built) error {
	for _, b := range all {
		ref, err := name.ParseReference(b.ref)
		if err != nil {
			return fmt.Errorf("%s: %w", b.ref, err)
		}
		idx, err := indexOf(o, b)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", b.ref, err)
		}
	}
	return nil
}
