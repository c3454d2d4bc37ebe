package agentbench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
)

// memoryCgroup is a memory cgroup with a limit, as the kubelet puts a container with
// resources.limits.memory in one: what the kernel charges to it (anonymous memory and the page
// cache its process faults in, the binary's pages included) is what `kubectl top pod` reports
// as the working set and what the limit holds. Under the limit the kernel reclaims clean file
// pages, such as the binary's start-up pages, before it OOM-kills; only memory it cannot
// reclaim must fit.
type memoryCgroup struct {
	dir string
	v2  bool
}

// newMemoryCgroup creates a cgroup limited to limit (a Kubernetes quantity such as 64Mi), on
// cgroup v2 when the machine has it, else on the v1 memory controller.
func newMemoryCgroup(name, limit string) (*memoryCgroup, error) {
	q, err := resource.ParseQuantity(limit)
	if err != nil {
		return nil, fmt.Errorf("KOLLECT_BENCH_MEMORY_LIMIT %q: %w", limit, err)
	}
	bytes := strconv.FormatInt(q.Value(), 10)
	if ctrl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctrl), "memory") {
		cg := &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
		return cg, cg.create(map[string]string{"memory.max": bytes, "memory.swap.max": "0"})
	}
	cg := &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name)}
	return cg, cg.create(map[string]string{"memory.limit_in_bytes": bytes, "memory.swappiness": "0"})
}

func (cg *memoryCgroup) create(settings map[string]string) error {
	if err := os.Mkdir(cg.dir, 0o755); err != nil && !os.IsExist(err) {
		return fmt.Errorf("creating memory cgroup %s (needs root and a writable cgroup file system): %w", cg.dir, err)
	}
	for file, v := range settings {
		if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(v), 0o644); err != nil && !strings.HasSuffix(file, "swap.max") {
			return fmt.Errorf("setting %s of %s: %w", file, cg.dir, err)
		}
	}
	return nil
}

// wrap runs argv inside the cgroup from its first instruction: a shell joins the cgroup and
// execs the binary, so the process keeps the shell's pid and every page it touches is charged
// to the cgroup.
func (cg *memoryCgroup) wrap(argv []string) []string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return []string{"/bin/sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && exec %s", cg.dir, strings.Join(quoted, " "))}
}

// figures returns the cgroup's peak charge, its working set now (charge minus inactive page
// cache, as the kubelet computes it) in MiB, and how many processes the OOM killer killed in it.
func (cg *memoryCgroup) figures() (peakMiB, workingSetMiB float64, oomKills int64, err error) {
	usageFile, peakFile, eventsFile, inactiveKey := "memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.oom_control", "total_inactive_file"
	if cg.v2 {
		usageFile, peakFile, eventsFile, inactiveKey = "memory.current", "memory.peak", "memory.events", "inactive_file"
	}
	usage, err := cg.number(usageFile)
	if err != nil {
		return 0, 0, 0, err
	}
	peak, err := cg.number(peakFile)
	if err != nil {
		return 0, 0, 0, err
	}
	stat, err := cg.keyed("memory.stat")
	if err != nil {
		return 0, 0, 0, err
	}
	events, err := cg.keyed(eventsFile)
	if err != nil {
		return 0, 0, 0, err
	}
	return float64(peak) / mib, float64(usage-min(usage, stat[inactiveKey])) / mib, events["oom_kill"], nil
}

func (cg *memoryCgroup) number(file string) (int64, error) {
	raw, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

func (cg *memoryCgroup) keyed(file string) (map[string]int64, error) {
	raw, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			out[k], _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return out, nil
}

// remove deletes the cgroup once its process has exited.
func (cg *memoryCgroup) remove() { _ = os.Remove(cg.dir) }

// evictFromPageCache drops a file's clean pages from the page cache, so that the process that
// maps it next faults them in and has them charged to its own cgroup, as a container's first
// start does, instead of sharing pages charged to whoever built or read the file before.
func evictFromPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
