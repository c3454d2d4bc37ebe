//go:build !linux

package earlyinit

// Nothing to advise outside Linux: the binaries ship for Linux only.
