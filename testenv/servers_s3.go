package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// S3 is versitygw serving the S3 API on 127.0.0.1 from a posix directory. Buckets are
// created through the S3 API by the tests (CreateBucket), as against any S3 store.
type S3 struct {
	*Process
	// Endpoint is the base URL, for path-style addressing.
	Endpoint  string
	AccessKey string
	SecretKey string
	// Region is the region the gateway reports; any region is accepted for signing.
	Region string
}

// S3Options configure StartS3With; empty keys keep StartS3's.
type S3Options struct {
	// AccessKey and SecretKey are the one credential the gateway accepts, for tests that
	// plant their own secret key.
	AccessKey, SecretKey string
	// Users are accounts of role "user" beside the root credential (access key ID to secret
	// key), kept by versitygw's internal IAM service: they may touch a bucket only as far as
	// its bucket policy allows, for tests of per-user policies.
	Users map[string]string
}

// StartS3 starts versitygw with the posix backend in a new temporary directory. The posix
// backend keeps object metadata in user extended attributes: the temporary directory's
// file system must support them (ext4 and xfs do; some overlay and tmpfs mounts do not).
func StartS3() (*S3, error) { return StartS3With(S3Options{}) }

// StartS3With starts versitygw with options; see StartS3.
func StartS3With(opts S3Options) (*S3, error) {
	bin, err := ServerBinary("versitygw")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kollect-s3-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, err
	}
	if err := checkUserXattrs(data); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	access, secret := "kollect-test", "kollect-test-secret"
	if opts.AccessKey != "" {
		access = opts.AccessKey
	}
	if opts.SecretKey != "" {
		secret = opts.SecretKey
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"--access", access, "--secret", secret, "--region", "us-east-1", "--port", addr}
	if len(opts.Users) > 0 {
		iam := filepath.Join(dir, "iam")
		if err := writeS3Users(iam, opts.Users); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, "--iam-dir", iam)
	}
	args = append(args, "posix", data)
	p, err := StartProcess("versitygw", dir, bin, args, nil, tcpReady(addr))
	if err != nil {
		return nil, err
	}
	return &S3{Process: p, Endpoint: "http://" + addr, AccessKey: access, SecretKey: secret, Region: "us-east-1"}, nil
}

// writeS3Users writes the accounts file of versitygw's internal IAM service (users.json in
// dir) before the gateway starts, so no admin request has to race its start.
func writeS3Users(dir string, users map[string]string) error {
	type account struct {
		Access string `json:"access"`
		Secret string `json:"secret"`
		Role   string `json:"role"`
	}
	accounts := map[string]account{}
	for access, secret := range users {
		accounts[access] = account{Access: access, Secret: secret, Role: "user"}
	}
	raw, err := json.Marshal(map[string]any{"accessAccounts": accounts})
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.json"), raw, 0o600); err != nil {
		return fmt.Errorf("writing versitygw's IAM accounts: %w", err)
	}
	return nil
}

// checkUserXattrs fails clearly when dir's file system cannot store user extended attributes,
// which versitygw's posix backend needs for object metadata.
func checkUserXattrs(dir string) error {
	probe := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return err
	}
	defer os.Remove(probe)
	if err := syscall.Setxattr(probe, "user.kollect", []byte("1"), 0); err != nil {
		return fmt.Errorf("the file system of %s does not support user extended attributes (%w), which versitygw's posix backend needs: set TMPDIR to an ext4 or xfs directory", dir, err)
	}
	return nil
}
