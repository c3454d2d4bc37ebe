// Package security proves, against the product as shipped, that credentials and inventory rows
// stay where they belong (issue 20, points 2 and 5).
//
// TestNoPlantedSecretOrRowLeaks runs the built kollect-agent (with its admission webhook, at
// --zap-log-level=10, beyond debug) on a real kube-apiserver + etcd, registered with the built kollect-hub
// (--log-level=debug), and points sinks of every type at real servers started by testenv:
// PostgreSQL (password auth), git smart HTTP (basic auth), versitygw for S3, kfake for Kafka
// (SASL SCRAM), nats-server (token, and user/password), FerretDB for MongoDB. One random value,
// planted-s3cr3t-<hex>, is every credential: right where the server accepts it (exports
// succeed), wrong on purpose (the value with a suffix: authentication fails, probes, exports
// and retries fail, events fire), unparsable (an nkey seed, an ssh key, a service-account key),
// and inline in sink URLs (refused by the webhook, and at reconcile for objects that bypass it).
// The kollect CLI runs `query` with the value in its PostgreSQL and MongoDB URLs and `hub
// clusters`; the hub is also handed a bundle with the value in a sink URL, which it must refuse.
//
// Then everything a user or the hub could see is searched for the value, and each hit fails the
// test naming where it was found: the agent's stdout and stderr, every object the API serves
// (status of the Kollect kinds, all other kinds whole; Secrets and the spec the test wrote with
// inline credentials excepted), core/v1 and events.k8s.io/v1 Events, the agent's /metrics, the
// CLI's outputs, the refusals, the hub's log, every file of its data directory read as bytes
// (hub.db, its WAL), and its FleetService answers as JSON (clusters, heartbeats, fleet health,
// bundles, audit) and /metrics.
//
// A planted row value (a ConfigMap value a profile extracts) must reach PostgreSQL (read back
// with psql) and appear nowhere at the hub: not in its store, log or API. That is the design's
// rule that the hub never receives rows (DESIGN.md, sections 1 and 6).
package security
