package earlyinit

import "syscall"

// Off is the value of KOLLECT_STARTUP_MADVISE that turns the advice off.
const Off = "off"

func init() { result = advise() }

// advise sets MADV_RANDOM on every mapping of the executable and drops the executable's page
// cache that no process maps.
func advise() Result {
	if v, _ := syscall.Getenv("KOLLECT_STARTUP_MADVISE"); v == Off {
		return Result{Off: true}
	}
	var r Result
	var buf [4096]byte
	n, err := syscall.Readlink("/proc/self/exe", buf[:])
	if err != nil {
		return Result{Err: wrap("finding the executable", err)}
	}
	exe := string(buf[:n])
	maps, err := readFile("/proc/self/maps")
	if err != nil {
		return Result{Err: wrap("reading the process's mappings", err)}
	}
	for _, m := range fileMappings(maps, exe) {
		// The raw system call takes the addresses as they are: the executable's mappings live
		// as long as the process, and no Go pointer is involved.
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_RANDOM); errno != 0 {
			if r.Err == nil {
				r.Err = wrap("madvise(MADV_RANDOM)", errno)
			}
			continue
		}
		r.Advised += uint64(m.end - m.start)
	}
	// Pages some process maps, this one's included, stay: the kernel drops only clean,
	// unmapped pages of the file, which start-up would otherwise keep charged to its cgroup.
	fd, err := syscall.Open(exe, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		if r.Err == nil {
			r.Err = wrap("opening the executable", err)
		}
		return r
	}
	if err := fadviseDontNeed(fd); err != nil {
		if r.Err == nil {
			r.Err = wrap("posix_fadvise(POSIX_FADV_DONTNEED)", err)
		}
	} else {
		r.Evicted = true
	}
	syscall.Close(fd)
	return r
}

// readFile reads a small file with system calls only (os has initialisers of its own).
func readFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	out := make([]byte, 0, 16<<10)
	for {
		if len(out) == cap(out) {
			out = append(out, 0)[:len(out)]
		}
		n, err := syscall.Read(fd, out[len(out):cap(out)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = out[:len(out)+n]
	}
}

// startupError is an error with its context, without fmt (which has initialisers).
type startupError struct {
	what string
	err  error
}

func (e *startupError) Error() string { return e.what + ": " + e.err.Error() }
func (e *startupError) Unwrap() error { return e.err }

func wrap(what string, err error) error { return &startupError{what: what, err: err} }
