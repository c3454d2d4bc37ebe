package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"kollect.dev/agent/internal/export"
)

// coverageSuffix ends the name of a repository's coverage file.
const coverageSuffix = ".coverage.json"

// CoveragePath is where a repository (git, GitLab) keeps the coverage of an inventory: the
// path template up to and including {inventory}, expanded, plus ".coverage.json", so it sits
// where the template puts the inventory (east/workloads.coverage.json beside
// east/workloads.yaml or the east/workloads/ directory; clusters/east/workloads.coverage.json
// for clusters/{cluster}/{inventory}/…). When a row placeholder comes before {inventory} no
// such place is common to the inventory's documents, and the object stores' manifest place
// (<cluster>/<inventory>) is used. Object stores keep the coverage in the manifest instead.
func (o Options) CoveragePath(cluster, inventory string) string {
	i := strings.Index(o.Template, "{inventory}")
	head := o.Template[:i+len("{inventory}")]
	for _, p := range rowPlaceholders {
		if strings.Contains(head, p) {
			return prefixPath(cluster) + "/" + prefixPath(inventory) + coverageSuffix
		}
	}
	return strings.NewReplacer("{cluster}", prefixPath(cluster), "{inventory}", prefixPath(inventory), "{ext}", o.Ext()).Replace(head) + coverageSuffix
}

// CoverageDocument is the content of a repository's coverage file. Like documents it holds
// no value that ticks (no time, no generation, no checksum): it changes only when a target's
// coverage does, so a commit touches it only then.
type CoverageDocument struct {
	SchemaVersion string            `json:"schemaVersion"`
	Cluster       string            `json:"cluster"`
	Inventory     string            `json:"inventory"`
	Coverage      []export.Coverage `json:"coverage"`
}

// CoverageFile renders the envelope's coverage as the repository file at CoveragePath, one
// target per line for readable diffs. ok is false when the envelope carries no coverage (an
// agent from before coverage, or a test batch): then there is no file.
func (o Options) CoverageFile(env *export.Envelope) (f File, ok bool) {
	if len(env.Coverage) == 0 {
		return File{}, false
	}
	var sb strings.Builder
	head, _ := json.Marshal(struct {
		SchemaVersion string `json:"schemaVersion"`
		Cluster       string `json:"cluster"`
		Inventory     string `json:"inventory"`
	}{export.SchemaVersion, env.Cluster, env.Inventory}) // plain strings always encode
	sb.Write(head[:len(head)-1])
	sb.WriteString(`,"coverage":[`)
	for i, c := range env.Coverage {
		if i > 0 {
			sb.WriteByte(',')
		}
		line, _ := json.Marshal(c) // a struct of strings and numbers always encodes
		sb.WriteString("\n  ")
		sb.Write(line)
	}
	sb.WriteString("\n]}\n")
	data := []byte(sb.String())
	sum := sha256.Sum256(data)
	return File{Path: o.CoveragePath(env.Cluster, env.Inventory), SHA256: hex.EncodeToString(sum[:]), Size: len(data), Data: data}, true
}
