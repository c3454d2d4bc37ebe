package testenv

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pauseImage is the sandbox image every pod's network namespace is held by: the static pause
// binary of testenv/cmd/pause, packed here into an OCI archive.
const pauseImage = "kollect.local/pause:1"

func (c *NodeCluster) startNode(node string, images []string) error {
	ctrDir := filepath.Join(c.dir, "containerd")
	c.containerdSock = filepath.Join(ctrDir, "containerd.sock")
	if err := writeFile(filepath.Join(ctrDir, "config.toml"), containerdConfig(ctrDir, pauseImage)); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(ctrDir, "cni", "10-kollect.conflist"), cniConfig(c.net, filepath.Join(ctrDir, "ipam"))); err != nil {
		return err
	}
	bin, args := c.net.inNetns("containerd", "--config", filepath.Join(ctrDir, "config.toml"))
	if err := c.start("containerd", bin, args, func() error {
		return exec.Command("ctr", "--address", c.containerdSock, "version").Run()
	}); err != nil {
		return err
	}
	pauseBin, err := BuildCommands(c.dir, "", "./testenv/cmd/pause")
	if err != nil {
		return err
	}
	pause, err := pauseArchive(pauseBin[0], filepath.Join(c.dir, "pause.tar"))
	if err != nil {
		return err
	}
	if err := c.ImportImages(append([]string{pause}, images...)...); err != nil {
		return err
	}

	servingCert, servingKey, err := c.pki.issue("kubelet-serving", c.NodeName, nil, []net.IP{net.ParseIP(c.net.nodeIP)}, []string{c.NodeName})
	if err != nil {
		return err
	}
	server := "https://" + c.net.hostIP + ":" + c.Config.Host[strings.LastIndex(c.Config.Host, ":")+1:]
	kubeletKC, err := c.pki.kubeconfig("kubelet", "system:node:"+c.NodeName, []string{"system:nodes"}, server)
	if err != nil {
		return err
	}
	if err := c.makeCgroupRoots(); err != nil {
		return err
	}
	kubeletDir := filepath.Join(c.dir, "kubelet")
	if err := writeFile(filepath.Join(kubeletDir, "config.yaml"), kubeletConfig(c, servingCert, servingKey)); err != nil {
		return err
	}
	bin, args = c.net.inNetns(filepath.Join(node, "kubelet"),
		"--config="+filepath.Join(kubeletDir, "config.yaml"), "--kubeconfig="+kubeletKC,
		"--root-dir="+filepath.Join(kubeletDir, "root"), "--hostname-override="+c.NodeName,
		"--node-ip="+c.net.nodeIP, "--v=1")
	if err := c.start("kubelet", bin, args, func() error { return nil }); err != nil {
		return err
	}
	proxyKC, err := c.pki.kubeconfig("kube-proxy", "system:kube-proxy", nil, server)
	if err != nil {
		return err
	}
	proxyDir := filepath.Join(c.dir, "kube-proxy")
	if err := writeFile(filepath.Join(proxyDir, "config.yaml"), kubeProxyConfig(c, proxyKC)); err != nil {
		return err
	}
	bin, args = c.net.inNetns(filepath.Join(node, "kube-proxy"), "--config="+filepath.Join(proxyDir, "config.yaml"))
	return c.start("kube-proxy", bin, args, func() error { return nil })
}

// ImportImages imports OCI or Docker archives into the node's containerd (namespace k8s.io,
// the CRI's), for the current platform, as an air-gapped node would get them.
func (c *NodeCluster) ImportImages(archives ...string) error {
	for _, a := range archives {
		out, err := exec.Command("ctr", "--address", c.containerdSock, "-n", "k8s.io", "images", "import", a).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cluster %s: ctr images import %s: %w\n%s", c.Name, a, err, out)
		}
	}
	return nil
}

// killContainers kills every process of the node's pods (they live in the node's cgroup
// root) and the containerd shims that watch them: the shims run in sessions of their own and
// outlive containerd.
func (c *NodeCluster) killContainers() error {
	pids := c.cgroupPIDs()
	c.removePodNetns(pids)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(raw, []byte(c.containerdSock)) || !bytes.Contains(raw, []byte("containerd-shim")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// removePodNetns removes the network namespaces containerd made for the node's pods
// (/run/netns/cni-…): containerd removes them when the kubelet stops a pod, which a killed node
// never does. They are told from other nodes' by their inode: the namespace a pod process is in.
func (c *NodeCluster) removePodNetns(pids []int) {
	ours := map[uint64]bool{}
	for _, pid := range pids {
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err == nil {
			ours[st.Ino] = true
		}
	}
	files, _ := filepath.Glob("/run/netns/cni-*")
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil || !ours[st.Ino] {
			continue
		}
		_ = syscall.Unmount(f, syscall.MNT_DETACH)
		_ = os.Remove(f)
	}
}

// cgroupRoots are the node's cgroup directories, one per v1 controller hierarchy.
func (c *NodeCluster) cgroupRoots() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + c.net.netns)
	return roots
}

// makeCgroupRoots creates the node's cgroup root in every v1 hierarchy (the kubelet checks
// that its cgroupRoot exists and creates only what is below it). It is named after the node's
// slot, which no other live node holds: two test processes may start clusters of the same
// name, and one must never kill the other's pods. What a killed run of the same slot left
// there goes first. A new v1 cpuset starts with no CPUs and no memory nodes: it gets its
// parent's.
func (c *NodeCluster) makeCgroupRoots() error {
	_ = c.killContainers()
	_ = c.removeCgroups()
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		if filepath.Base(h) == "unified" {
			continue
		}
		dir := filepath.Join(h, c.net.netns)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup root: %w", err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup root %s: %w", f, err)
				}
			}
		}
	}
	return nil
}

func (c *NodeCluster) cgroupPIDs() []int {
	seen := map[int]bool{}
	for _, root := range c.cgroupRoots() {
		_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || filepath.Base(path) != "cgroup.procs" {
				return nil
			}
			raw, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(raw)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// removeCgroups removes the node's cgroup directories, deepest first, once their processes
// are gone.
func (c *NodeCluster) removeCgroups() error {
	var errs []error
	for _, root := range c.cgroupRoots() {
		var dirs []string
		_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, d := range dirs {
			var err error
			for range 50 { // a killed process leaves its cgroup a moment after SIGKILL
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount below dir (the kubelet's volumes, containerd's overlay
// and shm mounts), deepest first.
func unmountUnder(dir string) error {
	if dir == "" {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// pauseArchive packs the pause binary into an OCI archive named pauseImage, for the host's
// platform, with the standard library alone (the image builder is hack/images' business).
func pauseArchive(bin, out string) (string, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("the pause binary: %w", err)
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	var layer bytes.Buffer
	zw := gzip.NewWriter(&layer)
	if _, err := zw.Write(layerTar.Bytes()); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	blobs := map[string][]byte{}
	put := func(mediaType string, b []byte) map[string]any {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	diffSum := sha256.Sum256(layerTar.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffSum[:])}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": put("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{put("application/vnd.oci.image.layer.v1.tar+gzip", layer.Bytes())},
	})
	md := put("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{"io.containerd.image.name": pauseImage, "org.opencontainers.image.ref.name": "1"}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{md}})

	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer f.Close()
	aw := tar.NewWriter(f)
	files := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`), "index.json": index}
	for d, b := range blobs {
		files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] = b
	}
	for name, b := range files {
		if err := aw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return "", err
		}
		if _, err := aw.Write(b); err != nil {
			return "", err
		}
	}
	if err := aw.Close(); err != nil {
		return "", err
	}
	return out, f.Close()
}

// TagImage gives an imported image another name in the node's containerd, as a pull of the
// published name would: a chart's default image then starts without a registry.
func (c *NodeCluster) TagImage(src, dst string) error {
	out, err := exec.Command("ctr", "--address", c.containerdSock, "-n", "k8s.io", "images", "tag", "--force", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster %s: ctr images tag %s %s: %w\n%s", c.Name, src, dst, err, out)
	}
	return nil
}
