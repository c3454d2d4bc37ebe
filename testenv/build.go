package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"kollect.dev/api/version"
)

// RepoRoot returns the repository's root: the directory of the go.work that encloses the
// working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory: run the tests inside the repository")
		}
		dir = parent
	}
}

// Version returns the version `make build` stamps into the binaries (hack/version.sh).
func Version() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "version.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("hack/version.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildCommands builds the given main packages (paths relative to the repository's root, such
// as "./agent/cmd/kollect-agent") into dir exactly as `make build` does, stamped with version
// (empty: what hack/version.sh prints). It returns the binaries' paths in the order given.
//
// With KOLLECT_BUILD_CACHE set (`make test` sets it to a directory of its own run), each
// package is linked once per version for the whole run and every test package gets a copy:
// the sources do not change during a run, and linking the same binaries a dozen times costs
// minutes of a 2-core machine.
func BuildCommands(dir, v string, pkgs ...string) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if v == "" {
		if v, err = Version(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	paths := make([]string, len(pkgs))
	for i, p := range pkgs {
		paths[i] = filepath.Join(dir, filepath.Base(p))
	}
	cache := os.Getenv("KOLLECT_BUILD_CACHE")
	if cache == "" {
		return paths, goBuild(root, dir, v, pkgs...)
	}
	for i, p := range pkgs {
		if err := fromBuildCache(cache, root, v, p, paths[i]); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// fromBuildCache copies pkg's binary for version v from the run's cache to dst, building it
// there first if no test package has; a lock per binary makes concurrent packages wait for one
// build.
func fromBuildCache(cache, root, v, pkg, dst string) error {
	sum := sha256.Sum256([]byte(v + "\x00" + pkg))
	entry := filepath.Join(cache, hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(entry, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(entry+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", entry, err)
	}
	bin := filepath.Join(entry, filepath.Base(pkg))
	if _, err := os.Stat(bin); err != nil {
		if err := goBuild(root, entry, v, pkg); err != nil {
			return err
		}
	}
	return copyExecutable(bin, dst)
}

func goBuild(root, dir, v string, pkgs ...string) error {
	args := append([]string{"build", "-ldflags", "-s -w " + version.LDFlag(v), "-o", dir + "/"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out.String())
	}
	return nil
}

// copyExecutable copies src to dst (a copy, not a link: a test may replace or remove its
// binary).
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
