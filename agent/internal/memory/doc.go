// Package memory hands memory the agent no longer uses back to the kernel.
//
// Most of the resident memory of an idle agent is not its data but its own executable: the
// Go runtime maps the binary, and the start-up of the two thousand packages linked into it
// (every sink's SDK, client-go, the CEL libraries) touches pages all over its text and
// read-only data. With the kernel's fault-around those pages stay mapped, and count in the
// process's RSS (and the pod's working set), long after start-up has finished: measured on
// the shipped binary, about 90 MiB of its 110 MiB stayed resident while an idle agent used
// about 11 MiB of it.
//
// Release asks the kernel to reclaim those clean, file-backed pages (madvise MADV_PAGEOUT on
// the executable's read-only mappings) and the Go runtime to return freed heap (the initial
// lists leave much of it behind). Pages the agent still needs are faulted back in from the
// page cache as it runs; nothing is lost, only re-read. The agent calls it once, after its
// caches have synced (kollect-agent --release-startup-memory-after).
package memory
