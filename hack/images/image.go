package main

import (
	"fmt"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// annotations are the OCI annotations (and image labels) every manifest and index carries, so
// that a registry, a scanner or `crane manifest` can trace an image back to its commit.
func annotations(o options, c component) map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     o.epoch.Format(time.RFC3339),
		"org.opencontainers.image.title":       c.binary,
		"org.opencontainers.image.description": c.description,
		"org.opencontainers.image.vendor":      "Kollect",
	}
}

// platformImageOf is one platform's image: the base layer, the binary layer, a non-root user
// and the binary as entrypoint.
func platformImageOf(o options, c component, p platform, base v1.Layer, bin string) (v1.Image, error) {
	binLayer, err := binaryLayer(bin, c.binary, o.epoch)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.epoch}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "kollect images: base (users, CA certificates, /tmp)"}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "kollect images: go build -trimpath " + c.pkg}},
	)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.os, p.arch, p.variant
	cf.Created = created
	cf.Author = ""
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{path.Join("/usr/local/bin", c.binary)},
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"SSL_CERT_FILE=" + caFile,
			"HOME=/home/nonroot",
		},
		WorkingDir: "/home/nonroot",
		Labels:     annotations(o, c),
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, annotations(o, c)).(v1.Image), nil
}

// indexOf is the component's multi-platform image index.
func indexOf(o options, b built) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, pi := range b.images {
		adds = append(adds, mutate.IndexAddendum{Add: pi.image, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1, Platform: pi.platform.v1()}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, annotations(o, b.component)).(v1.ImageIndex), nil
}
