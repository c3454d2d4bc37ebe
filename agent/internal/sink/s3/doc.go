// Package s3 is the S3 snapshot sink: it renders each export with package snapshot and
// stores the documents as objects in an S3-compatible bucket with aws-sdk-go-v2.
//
// An export reads the inventory's previous manifest, uploads only the documents whose hash
// changed, writes the new manifest last (conditionally: If-Match on the manifest it read, or
// If-None-Match for the first one, so two writers of one cluster and inventory cannot
// silently overwrite each other), then deletes the documents of rows that disappeared. A
// reader that finds every file the manifest lists with the listed hash holds a complete
// snapshot. Deletes only ever touch keys that the sink's path template produces for its own
// cluster and inventory.
//
// Credentials: accessKeyID/secretAccessKey (and optionally sessionToken) from the secretRef,
// or the SDK's default chain (environment, shared config, web identity, instance role).
package s3
