package sinks

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// otlpReceiver is an OTLP/HTTP trace receiver on 127.0.0.1: it decodes every
// ExportTraceServiceRequest and counts the requests.
type otlpReceiver struct {
	url      string
	mu       sync.Mutex
	requests int
	spans    []receivedSpan
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	r := &otlpReceiver{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &msg)
	}
	r.mu.Lock()
	r.requests++
	r.mu.Unlock()
	if req.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, fmt.Sprintf("path %s: %v", req.URL.Path, err), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		svc := attrString(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, receivedSpan{service: svc, span: sp})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *otlpReceiver) snapshot() (int, []receivedSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, append([]receivedSpan(nil), r.spans...)
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

func attrInt(kvs []*commonpb.KeyValue, key string) int64 {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.GetIntValue()
		}
	}
	return -1
}

// envWithoutOTel is the test's environment without any OTEL_* variable.
func envWithoutOTel() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestAgentTracesTheExportPipeline is issue 23 part 6 through the shipped kollect-agent: with
// the docs' OTEL_* environment (docs/operations.md, Tracing) the agent sends an OTLP/HTTP
// receiver the snapshot build's span and, in the same trace as its child, the PostgreSQL
// write's, with the inventory, sink and row counts; a watch change shows as the build's event.
// Without the environment, an export the psql read-back proves sends the receiver nothing.
func TestAgentTracesTheExportPipeline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, pgURL, _ := postgresCluster(t, ctx, "tracing")
	c := cp.Client
	refs := kollectv1.ClusterSinkReferences{Database: []kollectv1.NamespacedObjectReference{{Name: "postgres", Namespace: sinkNS}}}
	must(t, c.Create(ctx, newInventory(refs)))
	recv := startOTLPReceiver(t)

	a := newAgent(t, cp)
	a.env = append(envWithoutOTel(),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+recv.url,
		"OTEL_BSP_SCHEDULE_DELAY=200", // milliseconds: the docs' value is the SDK default (5000)
	)
	a.start()

	want, err := expectedRows(ctx, c)
	must(t, err)
	db := &pgReader{url: pgURL}
	count := func() int {
		out, err := db.psql(ctx, "SELECT count(*) FROM kollect.rows WHERE cluster = 'east' AND inventory = '"+inventory+"'")
		if err != nil && strings.Contains(err.Error(), "does not exist") {
			return -1
		}
		must(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(out))
		must(t, err)
		return n
	}
	eventuallyT(t, 60*time.Second, "the rows in PostgreSQL", func() (bool, string) {
		n := count()
		return n == len(want), strconv.Itoa(n) + " rows"
	})

	// findTrace waits for a build of rows rows and a postgres write parented by it.
	findTrace := func(rows int, what string) (build, write *tracepb.Span) {
		eventuallyT(t, 30*time.Second, what, func() (bool, string) {
			_, spans := recv.snapshot()
			builds := map[string]*tracepb.Span{}
			for _, s := range spans {
				if s.span.Name == "inventory.build" && attrInt(s.span.Attributes, "kollect.rows") == int64(rows) {
					if s.service != "kollect-agent" {
						t.Fatalf("the build span's service.name is %q, want kollect-agent", s.service)
					}
					builds[hex.EncodeToString(s.span.SpanId)] = s.span
				}
			}
			for _, s := range spans {
				if b := builds[hex.EncodeToString(s.span.ParentSpanId)]; s.span.Name == "delivery.export" && b != nil {
					build, write = b, s.span
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d spans, %d builds of %d rows", len(spans), len(builds), rows)
		})
		if !bytes.Equal(build.TraceId, write.TraceId) {
			t.Fatalf("%s: the write is not in the build's trace", what)
		}
		for key, want := range map[string]string{"kollect.inventory": attrString(build.Attributes, "kollect.inventory"),
			"kollect.sink": "database/" + sinkNS + "/postgres", "kollect.sink.type": "database/postgres"} {
			if got := attrString(write.Attributes, key); got != want || got == "" {
				t.Fatalf("%s: the write span's %s is %q, want %q", what, key, got, want)
			}
		}
		if !strings.Contains(attrString(build.Attributes, "kollect.inventory"), inventory) {
			t.Fatalf("%s: the build span's kollect.inventory is %q", what, attrString(build.Attributes, "kollect.inventory"))
		}
		if got := attrInt(write.Attributes, "kollect.rows"); got != int64(rows) {
			t.Fatalf("%s: the write span's kollect.rows is %d, want %d", what, got, rows)
		}
		if got := attrInt(build.Attributes, "kollect.targets"); got != 3 {
			t.Fatalf("%s: the build span's kollect.targets is %d, want 3", what, got)
		}
		if write.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Fatalf("%s: the write span has error status: %s", what, write.Status.GetMessage())
		}
		return build, write
	}
	_, first := findTrace(len(want), "the first export's build and write spans")
	// The first export is full: every row is an upsert.
	if got := attrInt(first.Attributes, "kollect.rows.changed"); got != int64(len(want)) {
		t.Fatalf("the first write span's kollect.rows.changed is %d, want %d", got, len(want))
	}

	// One added Service: a trace of one changed row, the watch change an event of the build.
	added := service(changeNS, "traced", 8443)
	must(t, c.Create(ctx, added))
	eventuallyT(t, 60*time.Second, "the added Service's row in PostgreSQL", func() (bool, string) {
		n := count()
		return n == len(want)+1, strconv.Itoa(n) + " rows"
	})
	build, write := findTrace(len(want)+1, "the change's build and write spans")
	if got := attrInt(write.Attributes, "kollect.rows.changed"); got != 1 {
		t.Fatalf("the change's write span has kollect.rows.changed %d, want 1", got)
	}
	var kinds []string
	for _, ev := range build.Events {
		if ev.Name == "watch.change" {
			kinds = append(kinds, attrString(ev.Attributes, "kollect.kind"))
		}
	}
	if len(kinds) != 1 || !strings.Contains(kinds[0], "Kind=Service") {
		t.Fatalf("the change's build span has watch.change events of %v, want one of the Service kind", kinds)
	}

	// Without the OTEL_* environment: no request reaches the receiver while the agent exports
	// the Service's deletion (the stopped agent flushed its spans on SIGTERM).
	a.stop()
	before, _ := recv.snapshot()
	a.env = envWithoutOTel()
	a.start()
	must(t, c.Delete(ctx, added))
	eventuallyT(t, 60*time.Second, "the deleted Service's row gone from PostgreSQL", func() (bool, string) {
		n := count()
		return n == len(want), strconv.Itoa(n) + " rows"
	})
	// The export is in (the state row's count says so), then the agent stops, flushing anything.
	out, err := db.psql(ctx, "SELECT item_count FROM kollect.rows_state WHERE cluster = 'east' AND inventory = '"+inventory+"'")
	must(t, err)
	if strings.TrimSpace(out) != strconv.Itoa(len(want)) {
		t.Fatalf("the state row says %q rows, want %d", strings.TrimSpace(out), len(want))
	}
	a.stop()
	if after, _ := recv.snapshot(); after != before {
		t.Fatalf("without OTEL_* the receiver got %d requests, want none", after-before)
	}
}
