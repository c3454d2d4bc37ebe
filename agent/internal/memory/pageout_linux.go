package memory

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// pageOutExecutable advises MADV_PAGEOUT on every read-only mapping of the executable.
func pageOutExecutable() (uint64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("finding the executable: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("reading the process's mappings: %w", err)
	}
	var advised uint64
	var errs []error
	for _, m := range executableMappings(maps, exe) {
		// The raw system call takes the addresses as they are: the executable's mappings
		// live as long as the process, and no Go pointer is involved.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_PAGEOUT); errno != 0 {
			errs = append(errs, fmt.Errorf("madvise(MADV_PAGEOUT) on %x-%x: %w", m.start, m.end, errno))
			continue
		}
		advised += m.end - m.start
	}
	return advised, errors.Join(errs...)
}
