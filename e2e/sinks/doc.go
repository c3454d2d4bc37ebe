// Package sinks is the end-to-end suite of the agent as shipped, into every sink type: it
// builds kollect-agent exactly as `make build` does (version stamped), runs it as a process on
// one local control plane holding a few namespaces of Deployments, ConfigMaps and Services,
// and exports one KollectClusterInventory at once to every sink type the CRDs offer (the list
// is read from the spec.type enums of api/crds/*.yaml; a type the suite does not cover fails
// it). Each sink is then read back by a client this project did not write, never by the
// sink's own code nor by the Go library the sink writes with:
//
//	git (file://)     the git CLI on the bare repository
//	git (smart HTTP)  the git CLI fetching over HTTP from git http-backend
//	gitlab            the git CLI fetching the merge-request branch over HTTP, plus the
//	                  write log of the suite's fake GitLab REST API (fakeGitLabAPI)
//	s3                s3cmd (Debian) against versitygw
//	gcs               net/http with hand-written JSON on fake-gcs-server's JSON API
//	azureblob         curl on Azurite's Blob REST API with an account shared access signature
//	postgres          psql (Debian postgresql-client), with a write-counting trigger and xmin
//	mongodb           python3-pymongo (Debian) run by /usr/bin/python3, against FerretDB
//	bigquery          net/http with hand-written JSON on goccy/bigquery-emulator's REST API
//	kafka             kcat (Debian, librdkafka) against kfake
//	nats              the nats CLI (natscli, built by hack/servers/natscli) on the stream and
//	                  the KV bucket of a real nats-server
//
// pymongo is independent of the sink's client: it is MongoDB's Python driver, a separate code
// base from the Go driver (go.mongodb.org/mongo-driver) the mongodb sink writes with, with its
// own BSON codec and wire-protocol implementation.
//
// For every sink the suite asserts that (a) the rows equal the expectation computed from the
// objects read from the control plane with its own client (never from the agent); (b) a
// modify, a delete and an add propagate and nothing else changes (documents of other
// namespaces, other rows, other keys keep their server-side write markers); (c) static data
// over a full debounce + resync period writes nothing; (d) restarting the agent with unchanged
// data writes nothing; (d2) changes made while the agent is stopped reach every sink when it
// is back, and the event sinks (kafka, nats) write exactly the changed and deleted rows' keys.
// "Nothing written" is server-side evidence over a known window: git
// commit counts and blob ids, S3 ETags and Last-Modified, GCS generations, Azure Blob ETags
// and Last-Modified, PostgreSQL n_tup_ins/upd/del and row xmin, MongoDB and BigQuery write
// timestamps and BigQuery table lastModifiedTime, Kafka end offsets, NATS stream and KV
// sequence numbers.
//
// TestSinkOutageThroughTheShippedAgent stops PostgreSQL, the Kafka broker and nats-server for
// longer than several backoff rounds while the cluster churns, checks that the outage shows in
// status, metrics, the agent's log and the hub's heartbeat (the shipped kollect-hub, read with
// net/http and JSON), and after the return measures each sink's catch-up and checks that no
// row was lost or duplicated (docs/testing.md lists what it asserts).
//
// Stand-ins (no real service can run here): versitygw for S3, fake-gcs-server for GCS, Azurite
// (the Azure Storage emulator) for Azure Blob Storage, FerretDB
// (MongoDB wire protocol on SQLite) for MongoDB, goccy/bigquery-emulator for BigQuery, kfake
// (franz-go) for Kafka, and a fake GitLab REST API in this package (fakeGitLabAPI) in front of
// a real git smart-HTTP server. PostgreSQL, nats-server and git are the real servers. A
// missing server or client fails the suite; nothing is skipped.
//
// Every test starts its own control plane, servers and agent (cluster names and ports of its
// own), so the tests run in parallel (t.Parallel): most of their time is waiting on debounce,
// resync and outage windows, which then overlap.
package sinks
