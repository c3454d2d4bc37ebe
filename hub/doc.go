// Package hub is the root of the kollect.dev/hub module: the optional fleet hub that
// distributes Kollect configuration to agents over Connect RPC and shows fleet health. The hub
// never receives, stores or merges inventory rows.
package hub
