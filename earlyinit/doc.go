// Package earlyinit advises the kernel, before the rest of the binary starts, that the
// executable's pages are read at random: importing it (kollect-agent does, through
// agent/internal/memory) is all it takes.
//
// Why. A Go binary's start-up is the initialisers of every package linked in (about two
// thousand in kollect-agent: every sink's SDK, client-go, the CEL libraries), which touch
// pages all over its text and read-only data. The kernel reads ahead around each page fault
// — read_ahead_kb, 8 MiB on some virtual disks — and charges what it read to the process's
// memory cgroup. Under a container's memory limit that page cache is what fills the limit:
// the kernel reclaims it, the next initialiser faults it in again with another read-ahead
// window, and measured on kollect-agent under a 64Mi limit, `kollect-agent --version` took
// 10–18 s. MADV_RANDOM on the executable's mappings turns read-ahead off for its read-only
// data (since Linux 6.16 the kernel reads ahead in executable mappings whatever the advice),
// and the page cache the runtime read before any initialiser ran is dropped where no process
// maps it (POSIX_FADV_DONTNEED), so that what stays charged is what start-up uses: 1.1 s under
// the same limit, and docs/performance.md has the other figures. The advice stays:
// after the agent's release of its start-up pages (agent/internal/memory) a page it needs
// again is read alone, not with its neighbours.
//
// Why here. Go runs package initialisers in import-path order among the packages whose
// imports are initialised (the Go 1.21 specification), so a package with only syscall as an
// import and a path that sorts before every other runs right after syscall, before almost all
// of the binary's initialisers: hence the module path 0.kollect.dev/earlyinit ("0" sorts
// before every letter) and a module of its own, since no package of kollect.dev/agent can sort
// that early. It must import nothing but syscall, or it waits for the initialisers of what it
// imports too; `GODEBUG=inittrace=1 kollect-agent --version` shows the order,
// and e2e/metrics checks it on the shipped binary.
//
// KOLLECT_STARTUP_MADVISE=off in the environment leaves the executable as the kernel mapped it.
package earlyinit
