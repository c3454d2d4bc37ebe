// Package agentbench measures the shipped kollect-agent as its own process, as a user sees it
// in `kubectl top pod`: the binary `make build` builds runs alone against a local control
// plane seeded with N small labelled ConfigMaps and exports them into PostgreSQL, and the
// benchmark reads the agent's resident set, peak resident set and CPU time from its /proc
// entry and its Go heap from its /metrics. (agent/internal/agent's BenchmarkAgentMemory runs
// the agent inside the test process and can only report a heap delta, which leaves out the
// binary, the runtime's retained memory and everything the test process shares.)
//
// The package has benchmarks only, so `make test` runs nothing here; `make bench` runs the
// idle and 10k sizes and fails when the 10k resident set exceeds baseline.json by more than
// 20%. KOLLECT_BENCH_LARGE=1 adds 100k objects, KOLLECT_BENCH_HUGE=1 adds 1M, and
// KOLLECT_BENCH_TENANTS=1 adds 100 tenants (100 namespaces × 1,000 ConfigMaps, each namespace
// with its own profile, target, sink and inventory). See docs/performance.md for the figures.
package agentbench
