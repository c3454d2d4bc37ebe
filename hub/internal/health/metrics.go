package health

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Collector exports the fleet's health as Prometheus metrics, computed at scrape time from
// the same view FleetService serves, so the two never disagree.
type Collector struct {
	Source    func(ctx context.Context) (*Fleet, error)
	Connected func() int
	Log       *slog.Logger
}

var (
	descClusters = prometheus.NewDesc("kollect_hub_clusters", "Registered clusters by state.",
		[]string{"state"}, nil)
	descHeartbeat = prometheus.NewDesc("kollect_hub_cluster_last_heartbeat_timestamp_seconds",
		"Time of the cluster's last heartbeat.", []string{"cluster"}, nil)
	descInSync = prometheus.NewDesc("kollect_hub_cluster_config_in_sync",
		"1 when the cluster applied exactly the configuration the hub wants.", []string{"cluster"}, nil)
	descSkew = prometheus.NewDesc("kollect_hub_cluster_version_skew",
		"1 when the cluster's agent version differs from the fleet's most common one.", []string{"cluster", "agent_version"}, nil)
	descAgents = prometheus.NewDesc("kollect_hub_agent_versions", "Live clusters per agent version.",
		[]string{"version"}, nil)
	descPendingApproval = prometheus.NewDesc("kollect_hub_clusters_pending_approval",
		"Clusters whose registration waits for an admin's approval (they receive nothing meanwhile).", nil, nil)
	descConnected = prometheus.NewDesc("kollect_hub_connected_agents",
		"Agents holding a WatchConfig stream on this hub replica.", nil, nil)
	sinkLabels     = []string{"cluster", "sink_kind", "sink_namespace", "sink", "sink_type"}
	descSinkSucces = prometheus.NewDesc("kollect_hub_sink_last_success_timestamp_seconds",
		"Time of the sink's last successful export, as the agent reported it.", sinkLabels, nil)
	descSinkLag = prometheus.NewDesc("kollect_hub_sink_export_lag_seconds",
		"Time since the sink was last confirmed to hold its cluster's current data (its last confirmation, or its last successful export when it reports none).", sinkLabels, nil)
	descSinkError = prometheus.NewDesc("kollect_hub_sink_error",
		"1 when the sink's last export failed, labelled with the error class.",
		append(append([]string{}, sinkLabels...), "error_class"), nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClusters, descHeartbeat, descInSync, descSkew, descAgents,
		descConnected, descSinkSucces, descSinkLag, descSinkError, descPendingApproval} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, float64(c.Connected()))
	f, err := c.Source(ctx)
	if err != nil {
		c.Log.Warn("computing fleet metrics", "error", err)
		return
	}
	byState := map[string]float64{}
	for _, s := range fleetv1.ClusterState_value {
		if s != 0 {
			byState[stateName(fleetv1.ClusterState(s))] = 0
		}
	}
	pending := 0.0
	for _, cl := range f.Clusters {
		byState[stateName(cl.GetState())]++
		if cl.GetState() == fleetv1.ClusterState_CLUSTER_STATE_REVOKED {
			continue
		}
		if hb := cl.GetLastHeartbeat(); hb != nil {
			ch <- prometheus.MustNewConstMetric(descHeartbeat, prometheus.GaugeValue, float64(hb.AsTime().UnixMilli())/1000, cl.GetName())
		}
		// Its sync and skew series would fire the fleet's alerts for a cluster nothing was
		// sent to; the pending count is the series to alert on instead.
		if PendingApproval(cl) {
			pending++
			continue
		}
		ch <- prometheus.MustNewConstMetric(descInSync, prometheus.GaugeValue, b2f(cl.GetConfigInSync()), cl.GetName())
		ch <- prometheus.MustNewConstMetric(descSkew, prometheus.GaugeValue, b2f(cl.GetVersionSkew()), cl.GetName(), cl.GetAgentVersion())
	}
	ch <- prometheus.MustNewConstMetric(descPendingApproval, prometheus.GaugeValue, pending)
	for state, n := range byState {
		ch <- prometheus.MustNewConstMetric(descClusters, prometheus.GaugeValue, n, state)
	}
	for _, v := range f.Summary().GetAgentVersions() {
		ch <- prometheus.MustNewConstMetric(descAgents, prometheus.GaugeValue, float64(v.GetClusters()), v.GetVersion())
	}
	for _, cell := range f.Freshness() {
		labels := []string{cell.GetCluster(), cell.GetSinkKind(), cell.GetSinkNamespace(), cell.GetSinkName(), cell.GetSinkType()}
		if t := cell.GetLastSuccessTime(); t != nil {
			ch <- prometheus.MustNewConstMetric(descSinkSucces, prometheus.GaugeValue, float64(t.AsTime().UnixMilli())/1000, labels...)
			ch <- prometheus.MustNewConstMetric(descSinkLag, prometheus.GaugeValue, cell.GetLag().AsDuration().Seconds(), labels...)
		}
		class := errorClassName(cell.GetErrorClass())
		ch <- prometheus.MustNewConstMetric(descSinkError, prometheus.GaugeValue, b2f(cell.GetLastError() != ""), append(labels, class)...)
	}
}

func stateName(s fleetv1.ClusterState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CLUSTER_STATE_"))
}

func errorClassName(c fleetv1.SinkErrorClass) string {
	if c == fleetv1.SinkErrorClass_SINK_ERROR_CLASS_UNSPECIFIED {
		return "none"
	}
	return strings.ToLower(strings.TrimPrefix(c.String(), "SINK_ERROR_CLASS_"))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
