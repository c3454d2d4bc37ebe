package agent

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/inventory/delivery"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// probeCase is one sink object and what its Ready condition must say.
type probeCase struct {
	obj    client.Object
	secret map[string]string // the Secret named after the sink, when set
	ready  bool
	// want are substrings of the Ready message, every one required: the cause, and what it
	// concerns (endpoint, Secret and key, bucket, topic...).
	want []string
}

// TestSinkProbeOfEveryType runs the agent with the production sink table against the real
// servers of every sink type the CRDs offer and checks each sink object's status: a good
// config is Ready=True with a preview for the inventory using it; an unreachable endpoint,
// refused credentials (or, where the server checks none, a missing resource) and a Secret
// without the expected key are Ready=False ProbeFailed, with a message that names the cause;
// and no password, token or secret key shows in any status or in the agent's log.
func TestSinkProbeOfEveryType(t *testing.T) {
	t.Parallel()
	srv := startProbeServers(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on a port FreePort returned and closed: connections are refused.
	ns := namespace(t, "probe-types")
	allowUnverifiedSinks(t, cp.Client, ns) // the test PostgreSQL is plaintext
	cases := probeCases(srv, port)

	// Inventories export to every sink (at most 16 of a family each, as the CRD allows): each
	// preview must name its inventory, and the failing exports are logged, where the
	// credentials must not show either.
	var invs []*kollectv1.KollectInventory
	usedBy := map[string]string{}
	base := colorInventory(ns, kollectv1.SinkReferences{})
	create(t, base[0], base[1])
	for _, name := range sortedNames(cases) {
		c := cases[name]
		c.obj.SetNamespace(ns)
		c.obj.SetName(name)
		if c.secret != nil {
			create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: c.secret})
		}
		create(t, c.obj)
		for i := 0; ; i++ {
			if i == len(invs) {
				inv := base[2].DeepCopyObject().(*kollectv1.KollectInventory)
				inv.Name = fmt.Sprintf("inv-%d", i)
				invs = append(invs, inv)
			}
			if list := familyRefs(&invs[i].Spec.Sinks, c.obj); len(*list) < 16 {
				*list = append(*list, kollectv1.LocalObjectReference{Name: name})
				usedBy[name] = ns + "/" + invs[i].Name
				break
			}
		}
	}
	for _, inv := range invs {
		create(t, inv)
	}
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	logs := startAgentLogged(t, "c-types", ns)

	statuses := map[string]*kollectv1.SinkStatus{}
	check := func(name string, c probeCase) string {
		st, err := sinkStatus(c.obj)
		if err != nil {
			return err.Error()
		}
		statuses[name] = st
		cond := apimeta.FindStatusCondition(st.Conditions, kollectv1.ConditionReady)
		inventory := usedBy[name]
		switch {
		case cond == nil:
			return "no Ready condition yet"
		case c.ready && (cond.Status != metav1.ConditionTrue || cond.Reason != kollectv1.ReasonProbeSucceeded):
			return "want Ready=True ProbeSucceeded, got " + cond.Reason + ": " + cond.Message
		case st.Preview != nil && !strings.Contains(st.Preview.Message, "for inventory "+inventory):
			return fmt.Sprintf("the preview is not for inventory %s: %+v", inventory, st.Preview)
		case c.ready && st.Preview == nil:
			return "Ready=True without a preview"
		case !c.ready && (cond.Status != metav1.ConditionFalse || cond.Reason != kollectv1.ReasonProbeFailed):
			return "want Ready=False ProbeFailed, got " + cond.Reason + ": " + cond.Message
		}
		for _, w := range c.want {
			if !strings.Contains(cond.Message, w) {
				return fmt.Sprintf("the message lacks %q: %s", w, cond.Message)
			}
		}
		return ""
	}
	eventually(t, 120*time.Second, "every sink's expected Ready condition", func() (bool, string) {
		var pending []string
		for _, name := range sortedNames(cases) {
			if msg := check(name, cases[name]); msg != "" {
				pending = append(pending, name+": "+msg)
			}
		}
		return len(pending) == 0, fmt.Sprintf("%d of %d sinks not as expected:\n  %s", len(pending), len(cases), strings.Join(pending, "\n  "))
	})
	for _, name := range sortedNames(cases) {
		c := apimeta.FindStatusCondition(statuses[name].Conditions, kollectv1.ConditionReady)
		t.Logf("%-26s %s: %s", name, c.Reason, c.Message)
	}

	// The credentials, right or wrong, show nowhere: neither in a condition or preview of any
	// sink, nor in the inventories' status (where failing exports leave their errors: once
	// pg-wrong's is there, the check covers export errors too), nor in the agent's log.
	secrets := []string{probeGitPass, probeGitLabToken, probePGPass, probeMongoPass, probeKafkaPass, probeReaderPass,
		probeNATSPass, probeWrong, srv.s3.SecretKey, base64.StdEncoding.EncodeToString([]byte(probeWrong)), srv.azure.Key}
	for _, c := range cases {
		if sas := c.secret["sasToken"]; sas != "" {
			q, _ := url.ParseQuery(sas)
			secrets = append(secrets, q.Get("sig"), url.QueryEscape(q.Get("sig")))
		}
	}
	shown := map[string]string{}
	for name, st := range statuses {
		shown["sink "+name] = fmt.Sprintf("%+v", *st)
		if st.Preview != nil {
			shown["sink "+name] += fmt.Sprintf("%+v", *st.Preview)
		}
	}
	eventually(t, 30*time.Second, "pg-wrong's export error in its inventory's status", func() (bool, string) {
		var seen bool
		for _, inv := range invs {
			fresh := &kollectv1.KollectInventory{}
			if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(inv), fresh); err != nil {
				return false, err.Error()
			}
			shown["inventory "+inv.Name] = fmt.Sprintf("%+v", fresh.Status)
			for _, st := range fresh.Status.Sinks {
				seen = seen || st.Name == "pg-wrong" && strings.Contains(st.LastError, "password authentication failed")
			}
		}
		return seen, fmt.Sprint(shown)
	})
	for where, text := range shown {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("the status of %s shows the credential %q: %s", where, s, text)
			}
		}
	}
	log := logs.String()
	if !strings.Contains(log, "\"sink\"") {
		t.Fatalf("the captured agent log names no sink, it cannot prove anything:\n%s", log)
	}
	for _, s := range secrets {
		if i := strings.Index(log, s); i >= 0 {
			line := log[strings.LastIndex(log[:i], "\n")+1:]
			t.Errorf("the agent's log shows the credential %q in the line: %.400s", s, line)
		}
	}
}

// familyRefs is the list of refs of obj's sink family.
func familyRefs(refs *kollectv1.SinkReferences, obj client.Object) *[]kollectv1.LocalObjectReference {
	switch obj.(type) {
	case *kollectv1.KollectSnapshotSink:
		return &refs.Snapshot
	case *kollectv1.KollectDatabaseSink:
		return &refs.Database
	}
	return &refs.Event
}

func sortedNames(cases map[string]probeCase) []string {
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// sinkStatus reads the sink object afresh and returns its status.
func sinkStatus(obj client.Object) (*kollectv1.SinkStatus, error) {
	fresh := obj.DeepCopyObject().(client.Object)
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), fresh); err != nil {
		return nil, err
	}
	switch o := fresh.(type) {
	case *kollectv1.KollectSnapshotSink:
		return &o.Status, nil
	case *kollectv1.KollectDatabaseSink:
		return &o.Status, nil
	case *kollectv1.KollectEventSink:
		return &o.Status, nil
	}
	return nil, fmt.Errorf("%T is no sink kind", obj)
}

// logBuffer collects every line an agent logs, at every verbosity.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startAgentLogged is startAgentWith with the production sink table and a logger that keeps
// every line for the test to search (startAgentWith's logger only prints), up to debug (V(1)),
// the most verbose level the chart offers. From V(8) on, client-go logs the bodies of API
// responses, Secrets included, as every Kubernetes client does at that verbosity.
func startAgentLogged(t *testing.T, cluster, ns string) *logBuffer {
	t.Helper()
	buf := &logBuffer{}
	log := funcr.New(func(prefix, args string) {
		buf.mu.Lock()
		fmt.Fprintf(&buf.b, "%s %s\n", prefix, args)
		buf.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
	mgr, err := New(cp.Config, Options{AllowLocalSinks: true,
		Cluster: cluster, Namespaces: namespacesOf(ns), MetricsAddr: "0", HealthAddr: "0", SkipNameValidation: true,
		CacheDir: t.TempDir(), Log: log,
		Backoff: delivery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, TerminalDelay: time.Second, BreakerThreshold: 5, BreakerCooldown: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("agent %s: %v", cluster, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return buf
}
