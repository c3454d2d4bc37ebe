// Package security proves, against the product as shipped, that credentials and inventory rows
// stay where they belong (issue 20, points 2 and 5).
//
// TestNoPlantedSecretOrRowLeaks runs the built kollect-agent (its admission webhook on, at
// --zap-log-level=10, beyond debug) on a real kube-apiserver + etcd, registered with the built
// kollect-hub (--log-level=debug), and points sinks of every type at real servers started by
// testenv: PostgreSQL (password auth), git smart HTTP (basic auth), versitygw standing in for S3,
// kfake standing in for Kafka (SASL SCRAM), nats-server (token, and user/password), FerretDB
// standing in for MongoDB. GCS and BigQuery sinks point at a closed port: their credential, a
// service-account key, fails to parse before any request; so does an Azure Blob sink whose
// shared access signature's sig is the value (the refusal names the URL without its query), and
// another with the signature in its endpoint's query string. One random value,
// planted-s3cr3t-<hex>, is every credential: right where the server accepts it (probes pass,
// rows are exported), wrong on purpose (the value with a suffix: authentication fails, probes
// and exports fail and are retried, Events fire), unparsable (an nkey seed, an SSH key, a TLS
// client key, a service-account key), inline in sink URLs, before the host and in the query
// string (refused by the webhook on create and on edit, and at reconcile for objects labelled to
// bypass it), and rotated (a wrong Secret fixed). The kollect CLI runs `query` with the value in
// good, wrong and malformed PostgreSQL and MongoDB connection strings, `validate` and `hub bundle
// apply` on the inline-credential sinks, and `hub clusters`; the hub is also handed bundles with
// the value in a sink URL and in a Secret, which it must refuse. The agent's bootstrap token and
// the hub credential it receives are planted values too.
//
// Then everything a user or the hub could see is searched for each value (whole, by its random
// part and base64-encoded), and each hit fails the test naming where it was found, with the
// values masked: the agent's stdout and stderr, its /metrics, /healthz and /readyz, its cache
// volume; every object the API serves (the Kollect kinds without their spec, which the test
// wrote; Secrets left out), core/v1 and events.k8s.io/v1 Events; every CLI output and refusal;
// the hub's log, every file of its data directory read as bytes (hub.db and its WAL, while it
// runs and once stopped), its FleetService answers as JSON (clusters, the cluster's status and
// heartbeats, fleet health, bundles, tokens, audit, the WatchFleet stream) and /metrics.
//
// A planted row value (a ConfigMap value a profile extracts) must reach PostgreSQL, read back
// with psql and with `kollect query`, and appear nowhere at the hub: not in its store, log, API
// or the hub CLI's output. That is the design's rule that the hub never receives rows
// (DESIGN.md, sections 1 and 6).
package security
