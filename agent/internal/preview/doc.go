// Package preview evaluates a bundle the hub asks about (a PreviewRequest) against what the
// agent's cluster holds, without applying or exporting anything: per target the objects listed
// and matched, rows, extraction errors and distinct values per attribute, kinds not served or
// forbidden; per inventory the rows and bytes of one full export; sample rows only when the
// agent allows them. It decodes and admits the bundle with hubclient/manifests, as an apply
// would, and extracts with the offline engine that `kollect collect` uses (cli/offline),
// listing each kind a page at a time so that no kind is ever held whole. It only reads the
// API server.
package preview
