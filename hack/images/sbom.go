package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx/v2/common"
	spdx "github.com/spdx/tools-golang/spdx/v2/v2_3"
)

// sbomOf is the SPDX 2.3 document of one platform image: the image, the Go binary in it, every
// module the binary was linked from (read from the binary's own build information, so it lists
// exactly what shipped), the Go standard library, and the CA bundle of the base layer.
func sbomOf(o options, c component, p platform, bin string, img v1.Image) ([]byte, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read the build information of %s: %w", bin, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	imageID := spdxID("image-" + c.name)
	binID := spdxID("binary-" + c.binary)
	doc := &spdx.Document{
		SPDXVersion:       spdx.Version,
		DataLicense:       spdx.DataLicense,
		SPDXIdentifier:    "DOCUMENT",
		DocumentName:      fmt.Sprintf("%s %s %s", c.name, tag(o.version), p),
		DocumentNamespace: fmt.Sprintf("%s/sbom/%s/%s", strings.TrimSuffix(o.source, "/"), c.name, digest.Hex),
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{{CreatorType: "Tool", Creator: "kollect-images"}},
			Created:  o.epoch.Format(time.RFC3339),
		},
	}
	image := &spdx.Package{
		PackageName:             fmt.Sprintf("%s/%s", o.repo, c.name),
		PackageSPDXIdentifier:   imageID,
		PackageVersion:          tag(o.version),
		PackageDownloadLocation: "NOASSERTION",
		PrimaryPackagePurpose:   "CONTAINER",
		PackageExternalReferences: []*spdx.PackageExternalReference{{
			Category: "PACKAGE-MANAGER", RefType: "purl",
			Locator: fmt.Sprintf("pkg:oci/%s@%s?arch=%s&repository_url=%s", c.name, digest, p.arch, o.repo),
		}},
	}
	app := goPackage(binID, info.Main, "APPLICATION")
	app.PackageName = c.binary + " (" + info.Path + ")"
	if app.PackageVersion == "(devel)" || app.PackageVersion == "" {
		app.PackageVersion = o.version
	}
	stdlib := goPackage(spdxID("go-stdlib"), debug.Module{Path: "stdlib", Version: info.GoVersion}, "LIBRARY")
	doc.Packages = []*spdx.Package{image, app, stdlib}
	rel := func(a, b common.ElementID, kind string) {
		doc.Relationships = append(doc.Relationships, &spdx.Relationship{
			RefA: common.MakeDocElementID("", string(a)), RefB: common.MakeDocElementID("", string(b)), Relationship: kind})
	}
	rel("DOCUMENT", imageID, "DESCRIBES")
	rel(imageID, binID, "CONTAINS")
	rel(binID, stdlib.PackageSPDXIdentifier, "DEPENDS_ON")
	if ca, ok := bundleModule(); ok {
		pkg := goPackage(spdxID("ca-certificates"), ca, "DATA")
		pkg.PackageName = "ca-certificates (" + ca.Path + ")"
		doc.Packages = append(doc.Packages, pkg)
		rel(imageID, pkg.PackageSPDXIdentifier, "CONTAINS")
	}
	for _, dep := range info.Deps {
		if dep.Replace != nil {
			dep = dep.Replace
		}
		pkg := goPackage(spdxID("go-"+dep.Path), *dep, "LIBRARY")
		doc.Packages = append(doc.Packages, pkg)
		rel(binID, pkg.PackageSPDXIdentifier, "DEPENDS_ON")
	}
	var buf bytes.Buffer
	if err := spdxjson.Write(doc, &buf, spdxjson.Indent("  ")); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// goPackage is a Go module as an SPDX package with its package URL.
func goPackage(id common.ElementID, m debug.Module, purpose string) *spdx.Package {
	return &spdx.Package{
		PackageName:             m.Path,
		PackageSPDXIdentifier:   id,
		PackageVersion:          m.Version,
		PackageDownloadLocation: "NOASSERTION",
		PrimaryPackagePurpose:   purpose,
		PackageExternalReferences: []*spdx.PackageExternalReference{{
			Category: "PACKAGE-MANAGER", RefType: "purl",
			Locator: fmt.Sprintf("pkg:golang/%s@%s", m.Path, m.Version),
		}},
	}
}

// bundleModule is the module the base layer's CA bundle came from, read from this tool's own
// build information (hack/images/go.mod pins it).
func bundleModule() (debug.Module, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return debug.Module{}, false
	}
	for _, d := range info.Deps {
		if d.Path == "golang.org/x/crypto/x509roots/fallback" {
			return *d, true
		}
	}
	return debug.Module{}, false
}

var notIDChar = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes an SPDX element identifier (letters, digits, "." and "-") from a name.
func spdxID(name string) common.ElementID {
	return common.ElementID(notIDChar.ReplaceAllString(name, "-"))
}
