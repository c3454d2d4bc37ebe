// Package agentbench measures the shipped kollect-agent as its own process, as a user sees it
// in `kubectl top pod`: the binary `make build` builds runs alone against a local control
// plane seeded with N objects — small labelled ConfigMaps, or a mix of ConfigMaps, Deployments
// as a chart renders them and a CRD's custom resources — and exports them into PostgreSQL, and the
// benchmark reads the agent's resident set, peak resident set and CPU time from its /proc
// entry and its Go heap from its /metrics. (agent/internal/agent's BenchmarkAgentMemory runs
// the agent inside the test process and can only report a heap delta, which leaves out the
// binary, the runtime's retained memory and everything the test process shares.)
//
// `make test` runs one test here, TestRestartComesBack: the restart step of the 100-tenant size
// at 20 tenants × 200 objects (the shipped agent stopped with SIGTERM and started again on
// unchanged data comes back and exports nothing), with the three kinds. `make bench` runs the
// idle size and 10k objects, ConfigMaps and mixed, and fails when the 10k ConfigMap resident
// set exceeds baseline.json by more than 20%. KOLLECT_BENCH_LARGE=1 adds 100k objects
// (ConfigMaps and mixed), KOLLECT_BENCH_HUGE=1 adds 1M mixed, and
// KOLLECT_BENCH_TENANTS=1 adds 100 tenants (100 namespaces × 1,000 ConfigMaps, each namespace
// with its own profile, target, sink and inventory; after its static window the agent is
// restarted, and must come back and export nothing). KOLLECT_BENCH_MEMORY_LIMIT=128Mi runs the
// agent in a memory cgroup with that limit, as a container runs, and adds the cgroup's peak,
// working set and OOM kills to the figures. See docs/performance.md for the figures.
package agentbench
