// Package webui serves the fleet dashboard that vite builds from web/ into dist and that go:embed
// bakes into the hub binary. Hashed assets are cached for a year, index.html is revalidated on
// every load, text files are gzipped once at start-up, and every unknown non-asset path gets
// index.html so the dashboard's own router can resolve deep links. A binary built without the
// dashboard (dist holds only .keep) answers with a page that says so and how to build it,
// while the Connect API beside it keeps working.
package webui
