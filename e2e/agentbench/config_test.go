package agentbench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/e2e/internal/grant"
	"kollect.dev/testenv"
)

// configNS holds the shared profile and the PostgreSQL sink of the shared layout.
const configNS = "kollect-bench"

// shape is what one sub-benchmark seeds and configures.
type shape struct {
	// objects is the number of ConfigMaps, spread evenly over namespaces.
	objects, namespaces int
	// tenants: every namespace owns its profile, target, sink and inventory (KollectTarget,
	// KollectInventory, KollectDatabaseSink and a KollectScope in the namespace). Otherwise
	// one shared profile and sink in configNS, and one KollectClusterTarget and
	// KollectClusterInventory per namespace: the "10 inventories" layout.
	tenants bool
	// restart: after the static window, stop the agent and start it again on the same data
	// (restart): it must come back and export nothing.
	restart bool
	// kinds are the kinds seeded and inventoried, each with its profile and target; one kind
	// is all ConfigMaps, mixed the share of mixShare. Nil means ConfigMaps only.
	kinds []kind
}

// kindList is the shape's kinds, ConfigMaps when it names none.
func (s shape) kindList() []kind {
	if len(s.kinds) == 0 {
		return []kind{configMaps}
	}
	return s.kinds
}

// namespace is the name of the i-th seeded namespace.
func namespace(i int) string { return fmt.Sprintf("bench-%03d", i) }

// profileSpec is the profile every layout uses: a label by JSONPath, a data value by JSONPath
// and a CEL attribute, as a user's inventory of configuration would.
const profileSpec = `
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: app, jsonPath: "{.metadata.labels.app}"}
    - {name: tier, jsonPath: "{.metadata.labels.tier}"}
    - {name: mode, jsonPath: "{.data.mode}"}
    - {name: entries, cel: "size(object.data)", type: int}`

// timing is every inventory's: a debounce of 1 s as BenchmarkAgentMemory used (so that the
// time to the first export compares with its figures), the default maxDelay (spelled out: the
// typed object would send 0s), no periodic resync and no confirmations, so that the static
// window sees only the agent's idle cost.
const timing = `
  debounce: 1s
  maxDelay: 1m
  confirmInterval: 0s`

// manifests is the configuration of a shape, exporting to the database at pgPort.
func (s shape) manifests(pgPort int) string {
	var b strings.Builder
	b.WriteString(s.unverifiedGrant())
	sink := func(ns string) {
		fmt.Fprintf(&b, `
---
apiVersion: v1
kind: Secret
metadata: {name: pg, namespace: %[1]s}
stringData: {username: postgres, password: unused-trust-auth}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectDatabaseSink
metadata: {name: postgres, namespace: %[1]s}
spec:
  type: postgres
  postgres: {host: 127.0.0.1, port: %[2]d, database: %[3]s, sslMode: disable, secretRef: {name: pg}}`, ns, pgPort, pgDatabase)
	}
	if !s.tenants {
		sink(configNS)
		for _, k := range s.kindList() {
			fmt.Fprintf(&b, "\n---\napiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: {name: %s, namespace: %s}%s", k.name, configNS, k.profile)
		}
		for i := range s.namespaces {
			ns := namespace(i)
			for _, k := range s.kindList() {
				fmt.Fprintf(&b, `
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata: {name: %[1]s-%[3]s, labels: {kollect.dev/inventory: %[1]s}}
spec:
  profileRef: {name: %[3]s, namespace: %[2]s}
  namespaces: {include: [%[1]s]}%[4]s`, ns, configNS, k.name, k.excludeNames())
			}
			fmt.Fprintf(&b, `
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterInventory
metadata: {name: %[1]s}
spec:
  targetSelector: {matchLabels: {kollect.dev/inventory: %[1]s}}
  sinks: {database: [{name: postgres, namespace: %[2]s}]}%[3]s`, ns, configNS, timing)
		}
		return b.String()
	}
	for i := range s.namespaces {
		ns := namespace(i)
		sink(ns)
		var rules, targets []string
		for _, k := range s.kindList() {
			rules, targets = append(rules, k.scopeRule), append(targets, "{name: "+k.name+"}")
		}
		fmt.Fprintf(&b, `
---
apiVersion: kollect.dev/v1alpha1
kind: KollectScope
metadata: {name: tenant, namespace: %[1]s}
spec:
  allowedKinds: [%[2]s]
  allowedNamespaces: [%[1]s]
  allowedSinks: [{family: database}]`, ns, strings.Join(rules, ", "))
		for _, k := range s.kindList() {
			fmt.Fprintf(&b, `
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: %[2]s, namespace: %[1]s}%[3]s
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  profileRef: {name: %[2]s}%[4]s`, ns, k.name, k.profile, k.excludeNames())
		}
		fmt.Fprintf(&b, `
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: %[1]s, namespace: %[1]s}
spec:
  targets: [%[2]s]
  sinks: {database: [{name: postgres}]}%[3]s`, ns, strings.Join(targets, ", "), timing)
	}
	return b.String()
}

// unverifiedGrant is the KollectClusterScope that lets the namespaces holding the shape's sinks
// connect to the benchmark's PostgreSQL, which serves no TLS (sslMode disable needs
// allowInsecureSkipVerify). It allows every kind, namespace and sink: the namespaces' own
// scopes, if any, decide the rest.
func (s shape) unverifiedGrant() string {
	namespaces := []string{configNS}
	if s.tenants {
		namespaces = namespaces[:0]
		for i := range s.namespaces {
			namespaces = append(namespaces, namespace(i))
		}
	}
	return "\n---\n" + grant.Unverified("bench-unverified-sinks", namespaces...)
}

// inventories is how many inventories the shape's configuration holds: one per namespace in
// both layouts.
func (s shape) inventories() int { return s.namespaces }

var decoder = serializer.NewCodecFactory(testenv.Scheme).UniversalDeserializer()

// applyYAML creates every document of a multi-document YAML stream.
func applyYAML(ctx context.Context, c client.Client, stream string) error {
	for _, doc := range strings.Split(stream, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", doc, err)
		}
		if err := c.Create(ctx, obj.(client.Object)); err != nil {
			return fmt.Errorf("creating %s: %w", doc, err)
		}
	}
	return nil
}

// seed creates the shape's namespaces and ConfigMaps with 32 concurrent creates through a
// client without client-side rate limit (the default 5 QPS would take hours at 1M), and
// returns how long it took.
func seed(ctx context.Context, cfg *rest.Config, s shape) (time.Duration, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		return 0, fmt.Errorf("seeding client: %w", err)
	}
	start := time.Now()
	namespaces := append([]string{configNS}, make([]string, s.namespaces)...)
	for i := range s.namespaces {
		namespaces[i+1] = namespace(i)
	}
	for _, ns := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return 0, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if slices.ContainsFunc(s.kindList(), func(k kind) bool { return k.name == widgets.name }) {
		if err := createCRD(ctx, c, widgetCRD()); err != nil {
			return 0, err
		}
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= s.objects || ctx.Err() != nil {
					return
				}
				k, ns := s.kindOf(i)
				if err := c.Create(ctx, k.object(ns, i)); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("creating %s %d: %w", k.name, i, err); cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}
