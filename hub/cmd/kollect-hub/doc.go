// Command kollect-hub is the fleet hub binary; its flags are documented in docs/hub.md.
package main
