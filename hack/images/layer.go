package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// nonroot is the UID and GID the images run as (the value distroless uses, so that security
// policies written for those images fit these).
const nonroot = 65532

// caFile is where the base layer puts the CA bundle; SSL_CERT_FILE points Go's crypto/x509 at
// it.
const caFile = "/etc/ssl/certs/ca-certificates.crt"

// entry is one file or directory of a layer.
type entry struct {
	name     string // absolute path in the image
	dir      bool
	mode     int64
	uid, gid int
	data     []byte
}

// baseLayer is what every image has beneath its binary: the users, the CA bundle, /tmp, and the
// non-root user's home. The CA bundle is the Mozilla/NSS root store as pinned by
// golang.org/x/crypto/x509roots/fallback in hack/images/go.mod, not the build host's: the layer's
// digest must not depend on which machine built it.
func baseLayer(epoch time.Time) (v1.Layer, error) {
	var certs bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		// A PEM file cannot carry NSS's distrust-after dates; leave those roots out rather than
		// trust them without their limit.
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("the x509roots bundle holds no unconstrained root")
	}
	entries := []entry{
		{name: "/etc", dir: true, mode: 0o755},
		{name: "/etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot))},
		{name: "/etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot))},
		// Go's resolver reads nsswitch.conf to decide whether /etc/hosts comes first.
		{name: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "/etc/ssl", dir: true, mode: 0o755},
		{name: "/etc/ssl/certs", dir: true, mode: 0o755},
		{name: caFile, mode: 0o644, data: certs.Bytes()},
		{name: "/home", dir: true, mode: 0o755},
		{name: "/home/nonroot", dir: true, mode: 0o700, uid: nonroot, gid: nonroot},
		{name: "/root", dir: true, mode: 0o700},
		{name: "/tmp", dir: true, mode: 0o1777},
	}
	return layerOf(entries, epoch)
}

// binaryLayer holds the binary at /usr/local/bin/NAME.
func binaryLayer(bin, name string, epoch time.Time) (v1.Layer, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return layerOf([]entry{
		{name: "/usr", dir: true, mode: 0o755},
		{name: "/usr/local", dir: true, mode: 0o755},
		{name: "/usr/local/bin", dir: true, mode: 0o755},
		{name: path.Join("/usr/local/bin", name), mode: 0o755, data: data},
	}, epoch)
}

// layerOf writes entries as a deterministic tar (sorted, every time the epoch, no user or group
// names) and returns it as a gzip-compressed OCI layer. gzip from the standard library with a
// fixed level gives the same bytes for the same input, so the layer's digest is stable.
func layerOf(entries []entry, epoch time.Time) (v1.Layer, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name[1:], // relative, as layer tars are
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression))
}
