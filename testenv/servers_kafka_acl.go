package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// KafkaACLOptions configures StartKafkaWithACLs: a SASL superuser, and a second user whose
// ACLs allow describing and reading every topic but writing only some.
type KafkaACLOptions struct {
	// User and Password are the superuser (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512).
	User, Password string
	// LimitedUser and LimitedPassword are subject to ACLs (same mechanisms).
	LimitedUser, LimitedPassword string
	// WritePrefix is the topic name prefix LimitedUser may write; empty allows no writes.
	WritePrefix string
}

// StartKafkaWithACLs starts a broker (kfakesrv) that requires SASL and checks ACLs, so that
// tests can hold credentials the broker accepts but which may not write a topic.
func StartKafkaWithACLs(opts KafkaACLOptions) (*Kafka, error) {
	if opts.User == "" || opts.LimitedUser == "" {
		return nil, errors.New("StartKafkaWithACLs needs a superuser (User) and a LimitedUser")
	}
	bin, err := ServerBinary("kfakesrv")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-kafka-acl-")
	if err != nil {
		return nil, err
	}
	args := []string{"-port", strconv.Itoa(port), "-data-dir", filepath.Join(dir, "data"),
		"-user", opts.User, "-pass", opts.Password,
		"-limited-user", opts.LimitedUser, "-limited-pass", opts.LimitedPassword, "-limited-write-prefix", opts.WritePrefix}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := StartProcess("kfakesrv", dir, bin, args, nil, tcpReady(addr))
	if err != nil {
		return nil, err
	}
	return &Kafka{Process: p, Addr: addr}, nil
}
