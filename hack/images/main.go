// Command images builds the kollect-agent and kollect-hub container images without a Docker
// daemon, with go-containerregistry: a static Go binary per platform on a minimal base (CA
// certificates, a non-root user, /tmp), one OCI image index per component, an SPDX SBOM per
// platform image attached as an OCI referrer, and OCI annotations naming the source, revision
// and version.
//
// The output is reproducible: every timestamp is the commit's time (SOURCE_DATE_EPOCH), the
// binaries are built with -trimpath, the CA bundle comes from a pinned Go module rather than the
// build host, and the tar and gzip writers are deterministic. The same commit therefore gives
// the same digests on any machine, which the e2e/images test checks.
//
// Run by `make images` (hack/images.sh); docs/releases.md describes what it writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

// component is one image this tool builds: the binary's package and what the image is called.
type component struct {
	name        string // image name under the repository prefix: agent, hub
	binary      string // the binary's file name and the image's entrypoint
	pkg         string // the Go package, relative to the repository root
	description string
}

var components = []component{
	{name: "agent", binary: "kollect-agent", pkg: "./agent/cmd/kollect-agent",
		description: "Kollect agent: watches a cluster and exports its inventory to sinks"},
	{name: "hub", binary: "kollect-hub", pkg: "./hub/cmd/kollect-hub",
		description: "Kollect hub: distributes Kollect configuration to a fleet of agents"},
}

type options struct {
	root      string
	out       string
	repo      string // registry and path prefix, e.g. ghcr.io/kollect-dev
	version   string
	revision  string
	source    string
	epoch     time.Time
	platforms []platform
	only      map[string]bool
	push      bool
	pushFrom  string // push the image indexes of this OCI layout instead of building
}

func main() {
	var o options
	var platforms, only, epoch string
	flag.StringVar(&o.root, "root", ".", "the repository's root (holds go.work)")
	flag.StringVar(&o.out, "out", "bin/images", "output directory (replaced)")
	flag.StringVar(&o.repo, "repo", "ghcr.io/kollect-dev", "registry and path the images are named under")
	flag.StringVar(&o.version, "version", "", "version stamped into the binaries and annotations (hack/version.sh)")
	flag.StringVar(&o.revision, "revision", "", "the commit the images are built from")
	flag.StringVar(&o.source, "source", "https://github.com/kollect-dev/kollect", "the source repository's URL")
	flag.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time every timestamp is set to (default: SOURCE_DATE_EPOCH, else 0)")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch[/variant] list")
	flag.StringVar(&only, "only", "", "build only these components (comma-separated: agent, hub)")
	flag.BoolVar(&o.push, "push", false, "push each image index to REPO/NAME:TAG with the Docker config's credentials")
	flag.StringVar(&o.pushFrom, "push-from", "", "build nothing: push every image index of this OCI layout (an earlier run's OUT/oci) to the name it is annotated with")
	flag.Parse()
	if o.pushFrom != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := pushLayout(ctx, o.pushFrom); err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		return
	}
	if err := o.complete(platforms, only, epoch); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func (o *options) complete(platforms, only, epoch string) error {
	if o.version == "" {
		return fmt.Errorf("-version is required")
	}
	var err error
	if o.root, err = filepath.Abs(o.root); err != nil {
		return err
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	secs := int64(0)
	if epoch != "" {
		if _, err := fmt.Sscan(epoch, &secs); err != nil {
			return fmt.Errorf("epoch %q is not a Unix time: %w", epoch, err)
		}
	}
	o.epoch = time.Unix(secs, 0).UTC()
	for _, p := range strings.Split(platforms, ",") {
		pl, err := parsePlatform(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		o.platforms = append(o.platforms, pl)
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(n)] = true
		}
	}
	return nil
}

// tag is the image tag for a version: no leading v, and "+" (build metadata, not allowed in a
// tag) as "-". v0.2.0 → 0.2.0, the charts' appVersion form.
func tag(version string) string {
	return strings.ReplaceAll(strings.TrimPrefix(version, "v"), "+", "-")
}
