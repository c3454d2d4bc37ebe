package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// platform is an image platform: GOOS/GOARCH plus the OCI variant (arm64 → v8).
type platform struct {
	os, arch, variant string
}

func parsePlatform(s string) (platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "linux" {
		return platform{}, fmt.Errorf("platform %q: want linux/ARCH[/VARIANT]", s)
	}
	p := platform{os: parts[0], arch: parts[1]}
	if len(parts) == 3 {
		p.variant = parts[2]
	} else if p.arch == "arm64" {
		p.variant = "v8" // what registries and containerd record for 64-bit ARM
	}
	return p, nil
}

func (p platform) String() string { return p.os + "/" + p.arch }

func (p platform) v1() *v1.Platform {
	return &v1.Platform{OS: p.os, Architecture: p.arch, Variant: p.variant}
}

// built is one component built for every platform.
type built struct {
	component
	ref    string // REPO/NAME:TAG
	images []platformImage
}

type platformImage struct {
	platform platform
	image    v1.Image
	sbom     []byte // SPDX JSON
}

func run(ctx context.Context, o options) error {
	tmp, err := os.MkdirTemp("", "kollect-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	base, err := baseLayer(o.epoch)
	if err != nil {
		return fmt.Errorf("base layer: %w", err)
	}
	var all []built
	for _, c := range components {
		if o.only != nil && !o.only[c.name] {
			continue
		}
		b := built{component: c, ref: fmt.Sprintf("%s/%s:%s", o.repo, c.name, tag(o.version))}
		for _, p := range o.platforms {
			bin := filepath.Join(tmp, c.name+"-"+p.os+"-"+p.arch, c.binary)
			if err := goBuild(ctx, o, c, p, bin); err != nil {
				return err
			}
			img, err := platformImageOf(o, c, p, base, bin)
			if err != nil {
				return fmt.Errorf("%s %s: %w", c.name, p, err)
			}
			sbom, err := sbomOf(o, c, p, bin, img)
			if err != nil {
				return fmt.Errorf("%s %s: SBOM: %w", c.name, p, err)
			}
			b.images = append(b.images, platformImage{platform: p, image: img, sbom: sbom})
		}
		all = append(all, b)
	}
	if len(all) == 0 {
		return fmt.Errorf("no component selected (agent, hub)")
	}
	digests, err := write(o, all)
	if err != nil {
		return err
	}
	if o.push {
		if err := push(ctx, o, all); err != nil {
			return err
		}
	}
	fmt.Print(digests)
	return nil
}

// goBuild builds one static binary for one platform from the repository's workspace, with the
// flags of `make build` plus -trimpath so that the checkout's path never reaches the binary.
func goBuild(ctx context.Context, o options, c component, p platform, out string) error {
	ldflags := "-s -w -X kollect.dev/api/version.stamped=" + o.version
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, c.pkg)
	cmd.Dir = o.root
	cmd.Env = append(os.Environ(),
		"GOWORK="+filepath.Join(o.root, "go.work"), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false",
		"GOOS="+p.os, "GOARCH="+p.arch)
	if p.arch == "arm" && p.variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.variant, "v"))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", c.pkg, p, err, stderr.String())
	}
	return nil
}
