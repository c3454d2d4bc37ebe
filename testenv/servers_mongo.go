package testenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// Mongo is a MongoDB-wire server (FerretDB v1 on its SQLite backend, built from
// hack/servers/ferretsrv) on 127.0.0.1. It speaks the MongoDB protocol (CRUD, bulk writes,
// upserts, unique indexes) but has no multi-document transactions or change streams.
type Mongo struct {
	*Process
	Port int
	// URI connects without credentials, for example mongodb://127.0.0.1:PORT/.
	URI string
}

// StartMongo starts ferretsrv with its SQLite files in a new temporary directory.
func StartMongo() (*Mongo, error) {
	bin, err := ServerBinary("ferretsrv")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-mongo-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// The SQLite URL must name a directory and end with a slash.
	args := []string{"-listen", addr, "-handler", "sqlite", "-sqlite-url", "file:" + data + "/"}
	p, err := StartProcess("ferretsrv", dir, bin, args, nil, tcpReady(addr))
	if err != nil {
		return nil, err
	}
	return &Mongo{Process: p, Port: port, URI: fmt.Sprintf("mongodb://%s/", addr)}, nil
}
