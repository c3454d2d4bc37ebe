// Package ratelimit holds the hub's per-client-address token buckets: one for registrations
// and one for failed authentications. They protect the store and the logs from a flood from
// one address (a misconfigured agent retrying in a loop, or someone guessing), not from a
// distributed attack; the limits are per TCP peer address, so agents behind one NAT share them.
package ratelimit
