//go:build linux && !(amd64 || arm64 || riscv64 || ppc64le || s390x)

package earlyinit

// fadviseDontNeed does nothing on 32-bit platforms (their fadvise64_64 splits its arguments
// differently per architecture); only the read-ahead advice applies there.
func fadviseDontNeed(int) error { return nil }
