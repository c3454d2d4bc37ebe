// Package gcs is the Google Cloud Storage snapshot sink: it renders each export with package
// snapshot and stores the documents as objects through the native JSON API
// (cloud.google.com/go/storage), not the S3 interoperability layer.
//
// Like the s3 sink, an export reads the previous manifest, uploads only changed documents,
// writes the manifest last under a generation precondition (so two writers of one cluster and
// inventory cannot silently overwrite each other), then deletes documents of rows that
// disappeared, only ever among the sink's own cluster and inventory.
//
// Credentials: a service-account key under key.json in the secretRef, or Application Default
// Credentials. spec.gcs.endpoint, or STORAGE_EMULATOR_HOST, points the client at an emulator
// or a private endpoint.
package gcs
