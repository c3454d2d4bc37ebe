package earlyinit

// Result is what the start-up advice did, for the binary's log.
type Result struct {
	// Advised is how many bytes of the executable's mappings were advised MADV_RANDOM.
	Advised uint64
	// Evicted says whether the executable's unmapped page cache was dropped.
	Evicted bool
	// Off says KOLLECT_STARTUP_MADVISE=off turned the advice off.
	Off bool
	// Err is the first error: the advice is best effort and never stops the binary.
	Err error
}

// result is written once, by init, before any other package of the binary runs.
var result Result

// Done returns what init did.
func Done() Result { return result }
