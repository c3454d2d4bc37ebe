// Package hubbench measures the hub as its own process: the kollect-hub binary runs alone and
// the simulated agents (e2e/dashboard/fleetsim) run in the benchmark, so the CPU and memory it
// reports are the hub's only. (hub/internal/server's benchmarks run the hub and its agents in
// one process and can only report both together.)
package hubbench
