package testenv

import "os"

// The command-line clients the tests run (git, psql, kcat, the nats CLI …) must never wait on a
// prompt: git asks for credentials on /dev/tty even with stdin closed, so a test run from a
// terminal would hang until its timeout where CI, without a terminal, passes. Every package
// that imports the harness, and so every process its tests start, inherits these settings.
// (make test exports the same, for packages that run clients without the harness.)
var nonInteractive = map[string]string{
	"GIT_TERMINAL_PROMPT": "0",
	"GIT_ASKPASS":         "/bin/false",
	"SSH_ASKPASS":         "/bin/false",
	"GCM_INTERACTIVE":     "never",
	"PGCONNECT_TIMEOUT":   "10",
	"DEBIAN_FRONTEND":     "noninteractive",
}

func init() {
	for k, v := range nonInteractive {
		if _, set := os.LookupEnv(k); !set {
			_ = os.Setenv(k, v)
		}
	}
}
