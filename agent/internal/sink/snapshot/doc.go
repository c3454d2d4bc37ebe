// Package snapshot renders an inventory snapshot into the documents every snapshot sink (git,
// gitlab, s3, gcs) stores: the serialization (YAML, JSON, NDJSON, CSV, Parquet, optionally
// gzip or zstd), the layout (one document, one per resource, split by namespace or kind), the
// path template, and the manifest that lets a reader tell a complete snapshot from a torn one.
//
// Rendering is pure: rows in, path → bytes out, with a content hash per file. Backends compare
// those hashes with what they stored last and write only what changed; the prune matcher tells
// them which of their existing files belong to this cluster and inventory, so a shared store is
// pruned only of the agent's own files.
//
// Documents never carry values that tick (export time, generation): an unchanged row renders
// to identical bytes, so a git commit touches only the documents of rows that changed. The
// manifest carries the volatile fields.
package snapshot
