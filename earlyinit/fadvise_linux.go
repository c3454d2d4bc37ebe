//go:build linux && (amd64 || arm64 || riscv64 || ppc64le || s390x)

package earlyinit

import "syscall"

// fadviseDontNeed is posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) on the 64-bit platforms,
// whose fadvise64 takes the offset and length as single registers.
func fadviseDontNeed(fd int) error {
	const posixFadvDontNeed = 4
	if _, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(fd), 0, 0, posixFadvDontNeed, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
