// Package azureblob is the Azure Blob Storage snapshot sink: it renders each export with
// package snapshot and stores the documents as block blobs in one container of a storage
// account, through the Azure SDK for Go (azblob).
//
// Like the s3 and gcs sinks, an export reads the previous manifest, uploads only changed
// documents, writes the manifest last on the condition that its ETag is still the one read
// (If-Match; If-None-Match: * when there was none), so two writers of one cluster and
// inventory cannot silently overwrite each other, then deletes the documents of rows that
// disappeared, only ever among the sink's own cluster and inventory. A purge deletes a
// manifest with If-Match on the ETag it read.
//
// Credentials come from the Secret spec.azureBlob.secretRef names: a shared access signature
// (sasToken) or the account's shared key (accountKey), never from the spec, a URL or a log
// line; error messages drop the query string of every request URL, which carries the
// signature. spec.azureBlob.endpoint points the client at a sovereign cloud, a private
// endpoint or the Azure Storage emulator (Azurite).
package azureblob
