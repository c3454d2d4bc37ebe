//go:build fleet

package sinks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/e2e/internal/grant"
	"kollect.dev/testenv"
)

// fleetName is cluster i's name and the namespace its agent watches and receives bundles
// in; fleetSystem is its agent's own namespace (hub bootstrap and credential Secrets).
func fleetName(i int) string   { return fmt.Sprintf("fleet-%02d", i) }
func fleetSystem(i int) string { return fmt.Sprintf("kollect-%02d", i) }

// fleet is the running fleet: the shared control plane, the sink servers, the hub and the
// agents (agents[i-1] is cluster i).
type fleet struct {
	cp      *testenv.ControlPlane
	hub     *hubProc
	agents  []*agentProc
	sinks   []*sinkUnderTest
	servers map[string]*testenv.Process // sink name -> the server it writes to
	ports   map[string]int              // server -> its listening port
	bundle  func(version int) string
	gitRepo string // the bare repository on the git server's disk
}

// startFleet starts the servers, the hub and the control plane together, prepares every
// cluster's namespaces, Secrets and ConfigMaps, starts the fifty agents and waits until the
// hub lists them.
func startFleet(t *testing.T, ctx context.Context) *fleet {
	t.Helper()
	var (
		cp    *testenv.ControlPlane
		pg    *testenv.Postgres
		kafka *testenv.Kafka
		s3    *testenv.S3
		gh    *testenv.GitHTTP
		hub   *hubProc
	)
	must(t, parallel(controlPlane(t, "fleet50", &cp), postgresServer(t, &pg),
		func() error {
			var err error
			kafka, err = testenv.StartKafka(testenv.KafkaOptions{})
			stopLater(t, kafka, err)
			return err
		},
		func() error { var err error; s3, err = testenv.StartS3(); stopLater(t, s3, err); return err },
		func() error {
			var err error
			gh, err = testenv.StartGitHTTP(gitUser, gitToken)
			stopLater(t, gh, err)
			return err
		},
		// Every agent registers from 127.0.0.1: the registration budget of one address is
		// raised to the fleet's size, as for a fleet behind one NAT gateway.
		func() error {
			var err error
			hub, err = startHub(t, "--register-burst", strconv.Itoa(fleetSize))
			return err
		}))
	// Transaction pooling, the pooler's server connections shared by every agent; up to
	// two client connections per agent (the sink's maxConnections) and the test's own.
	bouncer, err := testenv.StartPgBouncer(pg, testenv.PgBouncerOptions{PoolMode: "transaction", PoolSize: 10, Config: "max_client_conn = 400"})
	must(t, err)
	t.Cleanup(bouncer.Stop)
	t.Cleanup(func() {
		if t.Failed() { // before Stop removes its directory: why the pooler went, if it did
			t.Logf("pgbouncer (pid %d) log:\n%s", bouncer.PID(), lastLines(bouncer.Log(), 30))
		}
	})
	pgURL, err := pg.CreateDatabase(ctx, "fleet")
	must(t, err)
	repo, err := gh.InitBareRepo("fleet.git")
	must(t, err)
	s3c, err := newS3cmd(t.TempDir(), s3)
	must(t, err)
	_, err = s3c.run(ctx, "mb", "s3://"+s3Bucket)
	must(t, err)

	f := &fleet{cp: cp, hub: hub, gitRepo: repo,
		servers: map[string]*testenv.Process{"postgres": pg.Process, "pgbouncer": bouncer.Process, "kafka": kafka.Process, "s3": s3.Process, "git": gh.Process},
		ports:   map[string]int{"postgres": pg.Port, "pgbouncer": bouncer.Port, "kafka": portOf(t, kafka.Addr), "s3": portOf(t, s3.Endpoint), "git": portOf(t, gh.URL)}}
	f.sinks = []*sinkUnderTest{
		{name: "postgres", typ: "postgres", client: "psql (PostgreSQL itself, not PgBouncer)", rows: (&pgReader{url: pgURL}).rows, marks: (&pgReader{url: pgURL}).marks},
		{name: "kafka", typ: "kafka", client: "kcat", rows: (&kafkaReader{addr: kafka.Addr}).rows, marks: (&kafkaReader{addr: kafka.Addr}).marks},
		{name: "s3", typ: "s3", client: "s3cmd sync; the server's files for markers", rows: (&s3Sync{s3cmd: s3c, dir: t.TempDir()}).rows,
			marks: (&s3Files{dir: filepath.Join(s3.Dir, "data", s3Bucket)}).marks},
		{name: "git", typ: "git", client: "git CLI on the server's repository", rows: (&gitReader{dir: repo, branch: "main"}).rows, marks: (&gitReader{dir: repo, branch: "main"}).marks},
	}
	f.bundle = func(version int) string {
		return fleetBundle(version, bouncer.Port, kafka.Addr, s3.Endpoint, gh.URL+"/fleet.git")
	}

	var tok struct{ Secret string }
	must(t, hub.call(ctx, "CreateBootstrapToken", map[string]any{"description": "fleet of fifty", "ttl": "3600s", "maxUses": fleetSize}, &tok))
	must(t, applyYAML(ctx, cp.Client, grant.Unverified("fleet-unverified", fleetNames()...)))
	must(t, forEachCluster(func(i int) error { return f.prepareCluster(ctx, i, tok.Secret, s3) }))

	t.Cleanup(func() {
		if t.Failed() {
			f.logStatus(t, ctx, 1)
		}
	})
	f.agents = make([]*agentProc, fleetSize)
	for i := 1; i <= fleetSize; i++ {
		a := newAgent(t, cp)
		a.name = fleetName(i)
		a.args = []string{"--namespaces", fleetName(i), "--tenant-mode=false", "--hub-url", "https://" + hub.addr, "--hub-ca-fingerprint", hub.pin,
			"--pod-namespace", fleetSystem(i), "--hub-namespaces", fleetName(i), "--cluster-labels", "fleet=fifty"}
		f.agents[i-1] = a
	}
	// In waves, as the rolling restarts do: fifty agents starting at once are a burst of
	// list/watch calls that stalls everything else on a 2-core machine for no finding.
	f.rollingRestart(t, ctx, nil)
	eventuallyT(t, converge, "the hub lists every cluster", func() (bool, string) {
		var out struct{ Clusters []struct{ Name string } }
		if err := hub.call(ctx, "ListClusters", map[string]any{}, &out); err != nil {
			return false, err.Error()
		}
		return len(out.Clusters) == fleetSize, fmt.Sprintf("%d clusters", len(out.Clusters))
	})
	return f
}

// logStatus logs cluster i's inventory and target status, for a failure's diagnosis.
func (f *fleet) logStatus(t *testing.T, ctx context.Context, i int) {
	var inv kollectv1.KollectInventory
	var tg kollectv1.KollectTarget
	errI := f.cp.Client.Get(ctx, client.ObjectKey{Namespace: fleetName(i), Name: "fleet"}, &inv)
	errT := f.cp.Client.Get(ctx, client.ObjectKey{Namespace: fleetName(i), Name: "configmaps"}, &tg)
	t.Logf("%s: inventory status %+v (%v); target status %+v (%v)", fleetName(i), inv.Status, errI, tg.Status, errT)
}

// stopLater stops a started server when the test ends.
func stopLater(t *testing.T, p interface{ Stop() }, err error) {
	if err == nil {
		t.Cleanup(p.Stop)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	if !strings.Contains(addr, "://") {
		addr = "tcp://" + addr
	}
	u, err := url.Parse(addr)
	must(t, err)
	p, err := strconv.Atoi(u.Port())
	must(t, err)
	return p
}

func fleetNames() []string {
	var out []string
	for i := 1; i <= fleetSize; i++ {
		out = append(out, fleetName(i))
	}
	return out
}

// forEachCluster runs fn for every cluster, eight at a time, and returns the first error.
func forEachCluster(fn func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, 8)
	for i := 1; i <= fleetSize; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", fleetName(i), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// prepareCluster is what each cluster's admin prepares: the namespaces, the hub bootstrap
// token, the sinks' credentials (Secrets never travel through the hub) and the data.
func (f *fleet) prepareCluster(ctx context.Context, i int, token string, s3 *testenv.S3) error {
	c, ns, sys := f.cp.Client, fleetName(i), fleetSystem(i)
	// A hub-delivered sink reads only Secrets its cluster's admin labelled for the hub's sinks.
	hubSinks := map[string]string{kollectv1.LabelHubSinks: kollectv1.HubSinksAllowed}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sys}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "kollect-hub-bootstrap"}, StringData: map[string]string{"token": token}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg", Labels: hubSinks}, StringData: map[string]string{"username": "postgres", "password": "unused-trust-auth"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-keys", Labels: hubSinks}, StringData: map[string]string{"accessKeyID": s3.AccessKey, "secretAccessKey": s3.SecretKey}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-http", Labels: hubSinks}, StringData: map[string]string{"username": gitUser, "password": gitToken}},
	}
	for n := 1; n <= fleetObjects; n++ {
		objs = append(objs, fleetConfigMap(ns, n))
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// fleetBundle is the hub bundle every cluster gets; its objects name no namespace, so each
// agent applies them in its own (--hub-namespaces). Version 2 adds an attribute, which every
// row of every cluster must carry.
func fleetBundle(version, pgbouncerPort int, kafkaAddr, s3Endpoint, gitURL string) string {
	attrs := `    - {name: color, jsonPath: "{.data.color}"}`
	if version >= 2 {
		attrs += "\n" + `    - {name: size, jsonPath: "{.data.size}"}`
	}
	return fmt.Sprintf(`apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: configmaps}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
%s
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: configmaps}
spec:
  profileRef: {name: configmaps}
  labelSelector: {matchLabels: {inventory: fleet}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectDatabaseSink
metadata: {name: postgres}
spec:
  type: postgres
  postgres: {host: 127.0.0.1, port: %d, database: fleet, sslMode: disable, maxConnections: 2, secretRef: {name: pg}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectEventSink
metadata: {name: kafka}
spec:
  type: kafka
  kafka: {brokers: ["%s"], topic: %s, createTopic: true, partitions: 3}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: s3}
spec:
  type: s3
  s3: {bucket: %s, prefix: inv/, endpoint: "%s", usePathStyle: true, secretRef: {name: s3-keys}}
  serialization: {format: ndjson}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: git}
spec:
  type: git
  git: {url: "%s", secretRef: {name: git-http}}
  serialization: {format: ndjson}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: fleet}
spec:
  targets: [{name: configmaps}]
  sinks:
    database: [{name: postgres}]
    event: [{name: kafka}]
    snapshot: [{name: s3}, {name: git}]
  debounce: %s
  maxDelay: 10s
  resyncInterval: %s
`, attrs, pgbouncerPort, kafkaAddr, kafkaTopic, s3Bucket, s3Endpoint, gitURL, debounce, resync)
}

// applyBundle applies the bundle's version to every cluster of the fleet through the hub.
func (f *fleet) applyBundle(t *testing.T, ctx context.Context, version int) {
	t.Helper()
	var out map[string]any
	must(t, f.hub.call(ctx, "ApplyBundle", map[string]any{"name": "fleet", "manifests": f.bundle(version),
		"clusterSelector": map[string]any{"matchLabels": map[string]string{"fleet": "fifty"}}, "message": fmt.Sprintf("version %d", version)}, &out))
}

// truth is the rows every sink must hold: each cluster's labelled ConfigMaps, read from the
// API server, with the attributes of the bundle's version.
func (f *fleet) truth(t *testing.T, ctx context.Context, version int) rowSet {
	t.Helper()
	want := rowSet{}
	for i := 1; i <= fleetSize; i++ {
		ns := fleetName(i)
		var p kollectv1.KollectProfile
		eventuallyT(t, converge, ns+"'s profile at version "+strconv.Itoa(version)+" of the bundle", func() (bool, string) {
			if err := f.cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "configmaps"}, &p); err != nil {
				return false, err.Error()
			}
			return len(p.Spec.Attributes) == version, fmt.Sprintf("%d attributes", len(p.Spec.Attributes))
		})
		var cms corev1.ConfigMapList
		must(t, f.cp.Client.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{"inventory": "fleet"}))
		for _, cm := range cms.Items {
			attrs := map[string]string{"color": cm.Data["color"]}
			if version >= 2 {
				attrs["size"] = cm.Data["size"]
			}
			raw, err := json.Marshal(attrs)
			must(t, err)
			a, err := canonJSON(raw)
			must(t, err)
			r := row{Cluster: ns, Inventory: ns + "/fleet", Target: ns + "/configmaps", Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: cm.Name,
				UID: string(cm.UID), Profile: ns + "/configmaps", ProfileGeneration: p.Generation, Attributes: a}
			want[r.key()] = r
		}
	}
	return want
}

// waitSynced waits until every cluster's inventory shows every sink holding its checksum,
// so that no export is in flight when a window opens. One list of every namespace's
// inventories per second: fifty reads four times a second would load the API server the
// agents share.
func (f *fleet) waitSynced(t *testing.T, ctx context.Context) {
	t.Helper()
	everySecond(t, converge, "every inventory synced to every sink", func() (bool, string) {
		var list kollectv1.KollectInventoryList
		if err := f.cp.Client.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		synced := map[string]bool{}
		for _, inv := range list.Items {
			ok := inv.Name == "fleet" && inv.Status.Checksum != "" && len(inv.Status.Sinks) == len(f.sinks) &&
				apimeta.IsStatusConditionTrue(inv.Status.Conditions, kollectv1.ConditionSynced)
			for _, s := range inv.Status.Sinks {
				ok = ok && s.Checksum == inv.Status.Checksum && s.LastError == ""
			}
			synced[inv.Namespace] = ok
		}
		var behind []string
		for i := 1; i <= fleetSize; i++ {
			if !synced[fleetName(i)] {
				behind = append(behind, fleetName(i))
			}
		}
		return len(behind) == 0, "not synced: " + strings.Join(behind, ", ")
	})
}

// everySecond is eventuallyT polling once a second, for conditions that read fifty agents
// or inventories.
func everySecond(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		time.Sleep(time.Second)
	}
}

// rollingRestart restarts the fleet's agents fleetWave at a time, as a rolling update of
// their Deployments would; whileDown runs for each cluster of a wave between its agent's stop
// and start.
func (f *fleet) rollingRestart(t *testing.T, ctx context.Context, whileDown func(i int)) {
	t.Helper()
	for w := 0; w < fleetSize; w += fleetWave {
		f.restart(t, f.agents[w:min(w+fleetWave, fleetSize)], whileDown)
	}
}

// restart stops (if running) and starts agents, together, and waits until each is ready.
func (f *fleet) restart(t *testing.T, agents []*agentProc, whileDown func(i int)) {
	t.Helper()
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.stop() }()
	}
	wg.Wait()
	for _, a := range agents {
		if whileDown != nil {
			i, _ := strconv.Atoi(strings.TrimPrefix(a.name, "fleet-"))
			whileDown(i)
		}
		must(t, a.launch())
	}
	for _, a := range agents {
		must(t, a.waitReady(converge))
	}
}

// waitCalledEverySink waits until every agent process has made an export call to every sink
// (kollect_export_duration_seconds_count, which a restarted process counts from zero): its
// first build and first resync have then been offered to the sinks.
func (f *fleet) waitCalledEverySink(t *testing.T, ctx context.Context) {
	t.Helper()
	done := map[*agentProc]bool{} // a process's counts only grow: scrape each until it is done
	everySecond(t, resync+converge, "every restarted agent calling every sink", func() (bool, string) {
		var missing []string
		for _, a := range f.agents {
			if done[a] {
				continue
			}
			calls, err := a.scrapeBySink("kollect_export_duration_seconds_count")
			if err != nil {
				return false, err.Error()
			}
			all := true
			for _, s := range f.sinks {
				if calls[s.name] == 0 {
					missing = append(missing, a.name+"→"+s.name)
					all = false
				}
			}
			done[a] = all
		}
		return len(missing) == 0, fmt.Sprintf("%d calls missing, e.g. %v", len(missing), missing[:min(len(missing), 5)])
	})
}

// newCommitFiles lists the files changed by the commits on main since the refs line of a
// git marker ("refs/heads/main <id>").
func (f *fleet) newCommitFiles(t *testing.T, refsBefore string) []string {
	t.Helper()
	var from string
	for _, line := range strings.Split(refsBefore, "\n") {
		if ref, id, ok := strings.Cut(line, " "); ok && ref == "refs/heads/main" {
			from = id
		}
	}
	if from == "" {
		t.Fatalf("no refs/heads/main in the git marker %q", refsBefore)
	}
	out, err := run(context.Background(), "git", "--git-dir", f.gitRepo, "log", "--format=", "--name-only", from+"..main")
	must(t, err)
	seen := map[string]bool{}
	for _, l := range strings.Fields(out) {
		seen[l] = true
	}
	files := make([]string, 0, len(seen))
	for l := range seen {
		files = append(files, l)
	}
	sort.Strings(files)
	return files
}

// fleetLoad samples, while a phase runs, every sink server's established connections, and
// reports the servers' and agents' CPU over the phase.
type fleetLoad struct {
	f         *fleet
	began     time.Time
	cpu       map[string]time.Duration
	agentsCPU time.Duration
	stop      chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	peak      map[string]int
}

func (f *fleet) watchLoad(t *testing.T) *fleetLoad {
	t.Helper()
	l := &fleetLoad{f: f, began: time.Now(), cpu: map[string]time.Duration{}, peak: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	for name, p := range f.servers {
		c, err := testenv.GroupCPU(p.PID())
		must(t, err)
		l.cpu[name] = c
	}
	l.agentsCPU = f.agentsCPU(t)
	go func() {
		defer close(l.done)
		for {
			for name, port := range f.ports {
				if n, err := testenv.EstablishedConns(port); err == nil {
					l.mu.Lock()
					l.peak[name] = max(l.peak[name], n)
					l.mu.Unlock()
				}
			}
			select {
			case <-l.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return l
}

func (f *fleet) agentsCPU(t *testing.T) time.Duration {
	t.Helper()
	var total time.Duration
	for _, a := range f.agents {
		c, err := testenv.ProcessCPU(a.cmd.Process.Pid)
		must(t, err)
		total += c
	}
	return total
}

func (l *fleetLoad) report(t *testing.T, what string) {
	t.Helper()
	close(l.stop)
	<-l.done
	names := make([]string, 0, len(l.cpu))
	for name := range l.cpu {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		c, err := testenv.GroupCPU(l.f.servers[name].PID())
		must(t, err)
		parts = append(parts, fmt.Sprintf("%s %.1f CPU-s, peak %d connections", name, (c-l.cpu[name]).Seconds(), l.peak[name]))
	}
	t.Logf("fleet figures: %s; over %s: %s; the %d agents %.1f CPU-s", what, time.Since(l.began).Round(100*time.Millisecond),
		strings.Join(parts, "; "), len(l.f.agents), (l.f.agentsCPU(t) - l.agentsCPU).Seconds())
}

// s3Sync reads the bucket's NDJSON documents with one s3cmd sync into a local directory.
type s3Sync struct {
	*s3cmd
	dir string
	mu  sync.Mutex
}

func (s *s3Sync) rows(ctx context.Context) (rowSet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.run(ctx, "sync", "--delete-removed", "s3://"+s3Bucket+"/", s.dir+"/"); err != nil {
		return nil, err
	}
	got := rowSet{}
	err := filepath.WalkDir(s.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isDoc(path) {
			return err
		}
		doc, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := ndjsonRows(string(doc), got); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	return got, err
}

// s3Files are the S3 server's own write markers: each object file's inode, size and
// modification time in the gateway's posix directory (a PUT, even of the same bytes,
// rewrites the file).
type s3Files struct{ dir string }

func (s *s3Files) marks(context.Context) (map[string]string, error) {
	m := map[string]string{}
	err := filepath.WalkDir(s.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", path)
		}
		rel, _ := filepath.Rel(s.dir, path)
		unit := "meta:" + rel
		if isDoc(rel) {
			unit = "doc:" + rel
		}
		m[unit] = fmt.Sprintf("inode %d size %d mtime %d", st.Ino, fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	return m, err
}

// converge waits until every sink's read-back equals want and returns how long after since
// each one first did.
func (f *fleet) converge(t *testing.T, ctx context.Context, want rowSet, since time.Time, what string) map[string]time.Duration {
	t.Helper()
	took, failures := pollRows(ctx, f.sinks, want, since)
	if len(failures) > 0 {
		t.Fatalf("after %s, waiting for %s, these sinks do not hold the fleet's rows:\n%s", converge, what, strings.Join(failures, "\n"))
	}
	return took
}

// tookString formats per-sink durations in the sinks' order.
func (f *fleet) tookString(took map[string]time.Duration) string {
	var parts []string
	for _, s := range f.sinks {
		parts = append(parts, fmt.Sprintf("%s %.1f s", s.name, took[s.name].Seconds()))
	}
	return strings.Join(parts, ", ")
}
