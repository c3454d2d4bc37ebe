package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// KafkaOptions configures StartKafka; the zero value is a plaintext broker without auth.
type KafkaOptions struct {
	// User and Password, when User is set, require SASL and are accepted with PLAIN,
	// SCRAM-SHA-256 and SCRAM-SHA-512.
	User, Password string
	// CertFile and KeyFile (PEM), when set, make the broker speak TLS only.
	CertFile, KeyFile string
	// MaxMessageBytes sets the broker's message.max.bytes (0 keeps the 1 MiB default).
	MaxMessageBytes int
}

// Kafka is a Kafka-protocol broker (franz-go's kfake through hack/servers/kfakesrv) on
// 127.0.0.1: idempotent producer, admin API, compaction, one broker.
type Kafka struct {
	*Process
	// Addr is host:port of the broker.
	Addr string
}

// StartKafka starts a broker on a free port with its own data directory.
func StartKafka(opts KafkaOptions) (*Kafka, error) {
	bin, err := ServerBinary("kfakesrv")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-kafka-")
	if err != nil {
		return nil, err
	}
	args := []string{"-port", strconv.Itoa(port), "-data-dir", filepath.Join(dir, "data")}
	if opts.User != "" {
		args = append(args, "-user", opts.User, "-pass", opts.Password)
	}
	if opts.CertFile != "" {
		args = append(args, "-tls-cert", opts.CertFile, "-tls-key", opts.KeyFile)
	}
	if opts.MaxMessageBytes > 0 {
		args = append(args, "-max-message-bytes", strconv.Itoa(opts.MaxMessageBytes))
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := StartProcess("kfakesrv", dir, bin, args, nil, tcpReady(addr))
	if err != nil {
		return nil, err
	}
	return &Kafka{Process: p, Addr: addr}, nil
}
