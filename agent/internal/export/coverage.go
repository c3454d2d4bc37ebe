package export

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// Coverage is one target's coverage, as every sink stores it beside the rows (its JSON names
// are the sinks' field names too).
type Coverage = kollectv1.TargetCoverage

// maxCoverageReason bounds a reason in sinks: reasons are condition messages, short by
// design, but one naming many objects must not bloat every state write.
const maxCoverageReason = 512

// NormalizeCoverage sorts entries by target and bounds their reasons, in place.
func NormalizeCoverage(c []Coverage) []Coverage {
	for i := range c {
		if len(c[i].Reason) > maxCoverageReason {
			c[i].Reason = strings.ToValidUTF8(c[i].Reason[:maxCoverageReason], "") + "…"
		}
	}
	slices.SortFunc(c, func(a, b Coverage) int { return strings.Compare(a.Target, b.Target) })
	return c
}

// CoverageDigest identifies a normalized coverage list: a sink that accepted one digest is
// told again only when it changes. An empty list has the empty digest.
func CoverageDigest(c []Coverage) string {
	if len(c) == 0 {
		return ""
	}
	b, _ := json.Marshal(c) // a slice of plain structs encodes
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Complete reports whether every entry is complete: the rows are all of the targets' objects.
func Complete(c []Coverage) bool {
	for i := range c {
		if !c[i].State.Known() {
			return false
		}
	}
	return true
}
