// Package rollup computes an inventory's rollups: its targets' rows grouped by some of their
// values, with a count and sums per group, each group one ordinary canonical row (target the
// rollup's name, kind kollect.dev/v1alpha1 Rollup) that every sink exports, diffs and
// checksums like any other. It works on rows only: which targets are complete, and what is
// carried over when one is not, is the inventory's business.
package rollup
