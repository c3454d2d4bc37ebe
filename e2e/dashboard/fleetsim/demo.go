package fleetsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Agent and Kubernetes versions of the demo fleet; one cluster lags behind on purpose.
const (
	AgentVersion    = "v0.4.0"
	OldAgentVersion = "v0.3.2"
)

// Healthy is a cluster whose inventories are ready and whose sinks export without error.
func Healthy(name string, labels map[string]string, items int64) Cluster {
	return Cluster{
		Name: name, Labels: labels, AgentVersion: AgentVersion, K8sVersion: "v1.33.4",
		Inventories: []Inventory{
			{Namespace: "team-a", Name: "workloads", Items: items},
			{Namespace: "team-a", Name: "config", Items: items / 3},
		},
		Sinks: []Sink{
			{Kind: "KollectSnapshotSink", Namespace: "team-a", Name: "inventory-git", Type: "git", Age: 20 * time.Second},
			{Kind: "KollectDatabaseSink", Namespace: "team-a", Name: "warehouse", Type: "postgres", Age: 40 * time.Second},
		},
	}
}

// Demo is a small fleet showing every state the dashboard distinguishes: healthy clusters, a
// reverted drift, a terminal, a transient and a circuit-open sink error, version skew, an
// export under an hour old and an old one, two sinks of one name in two namespaces, a Degraded
// inventory, an object the agent refused, and (the last one) a cluster that stops heartbeating
// after a few seconds. Clusters labelled env=prod keep their inventories ready and apply every
// object, so a rollout to them can pass its gates.
func Demo() []Cluster {
	euCanary := Healthy("prod-eu-1", map[string]string{"env": "prod", "region": "eu", "tier": "canary"}, 1840)
	// One name, two namespaces: two sinks, two columns of the freshness matrix.
	euCanary.Sinks = append(euCanary.Sinks,
		Sink{Kind: "KollectDatabaseSink", Namespace: "shop", Name: "db-good", Type: "postgres", Age: 10 * time.Second},
		Sink{Kind: "KollectDatabaseSink", Namespace: "sinks", Name: "db-good", Type: "mongodb", Age: 30 * time.Second})

	euDrift := Healthy("prod-eu-2", map[string]string{"env": "prod", "region": "eu"}, 1322)
	euDrift.DriftObject = "KollectProfile/deployments"
	euDrift.PreviewErrors = 2 // a bundle preview on it shows extraction errors

	usTerminal := Healthy("prod-us-1", map[string]string{"env": "prod", "region": "us"}, 2411)
	usTerminal.Sinks[1].Age = 95 * time.Minute
	usTerminal.Sinks[1].Error = `connecting to postgres: FATAL: password authentication failed for user "kollect" (SQLSTATE 28P01)`
	usTerminal.Sinks[1].Class = fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL

	usOld := Healthy("prod-us-2", map[string]string{"env": "prod", "region": "us"}, 987)
	usOld.AgentVersion = OldAgentVersion
	usOld.Sinks[1].Age = 20 * time.Minute // under an hour: "aging"

	apCircuit := Healthy("prod-ap-1", map[string]string{"env": "prod", "region": "ap"}, 640)
	apCircuit.Sinks = append(apCircuit.Sinks, Sink{Kind: "KollectEventSink", Namespace: "team-a", Name: "changes", Type: "kafka",
		Age: 3 * time.Hour, Error: "kafka: 5 consecutive produce failures (broker kafka-0:9092 not available); circuit open for 60s",
		Class: fleetv1.SinkErrorClass_SINK_ERROR_CLASS_CIRCUIT_OPEN})
	// Workloads keep arriving: its heartbeat history has a record every few seconds.
	apCircuit.Inventories[0].Growth.By, apCircuit.Inventories[0].Growth.Every = 12, 4*time.Second

	staging := Healthy("staging-1", map[string]string{"env": "staging"}, 410)
	staging.Sinks[0].Age = 4 * time.Minute
	staging.Sinks[0].Error = "git push: context deadline exceeded"
	staging.Sinks[0].Class = fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TRANSIENT
	staging.Inventories[1].Degraded = "Forbidden"
	staging.Inventories[1].Coverage = []*fleetv1.TargetCoverage{
		{Target: "team-a/configmaps", State: "complete", Rows: 100, ExtractionErrors: 2},
		{Target: "team-a/secrets", State: "forbidden", Rows: 36,
			Reason: "the agent may not list or watch secrets: its rows are the last known ones"},
	}
	staging.RefuseObject = "KollectSnapshotSink/inventory-repo"
	staging.RefuseMessage = "refused: namespace kollect-system is outside this agent's allowed namespaces (team-b)"

	dev := Healthy("dev-1", map[string]string{"env": "dev"}, 75)
	dev.K8sVersion = "v1.34.1"
	dev.Sinks = dev.Sinks[:1]
	dev.Sinks[0].Age = 26 * time.Hour

	edge := Healthy("edge-7", map[string]string{"env": "edge", "region": "eu"}, 52)
	edge.Sinks = append(edge.Sinks[:1], Sink{Kind: "KollectSnapshotSink", Namespace: "team-a", Name: "archive", Type: "s3", Age: -1})
	edge.Heartbeats = 3

	return []Cluster{euCanary, euDrift, usTerminal, usOld, apCircuit, staging, dev, edge}
}

// ControlHandler lets a browser test add clusters while the dashboard is open:
// POST /clusters with {"name": "...", "labels": {...}} registers a healthy cluster.
func ControlHandler(f *Fleet) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /clusters", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
			Items  int64             `json:"items"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, fmt.Sprintf("decoding the request: %v", err), http.StatusBadRequest)
			return
		}
		if req.Items == 0 {
			req.Items = 100
		}
		if err := f.Add(r.Context(), Healthy(req.Name, req.Labels, req.Items)); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("GET /clusters/{name}", func(w http.ResponseWriter, r *http.Request) {
		stopped, err := f.Stopped(r.PathValue("name"))
		if err != nil && !stopped {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		out := map[string]any{"stopped": stopped}
		if err != nil {
			out["reason"] = err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}
