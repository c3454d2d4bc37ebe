package testenv

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// nodeNet is a node's network: a network namespace of its own joined to the host by a veth
// pair. Every address is in a range reserved for network tests (RFC 2544's 198.18.0.0/15), and
// exists only on this machine: the host side of the pair (198.18.N.1), the node side
// (198.18.N.2), and the pods' bridge (198.19.N.0/24) inside the namespace. The namespace has no
// default route, so nothing a pod sends can leave the machine; the host routes the pod range
// to the node and nothing else.
type nodeNet struct {
	slot     int
	netns    string // the namespace's name (ip netns)
	hostIP   string // the host side of the veth pair: the API server listens here
	nodeIP   string // the node's InternalIP
	podCIDR  string
	podGW    string // the bridge's address, the pods' gateway
	hostLink string
	lock     *os.File
}

// nodeSlots is where node slots are reserved (one lock file each), so that test processes
// running side by side never take the same addresses.
const nodeSlots = "/run/kollect-nodes"

// newNodeNet reserves a free slot for the cluster whose files are in dir, and builds its
// namespace and links. The slot's lock file names dir while the slot is held, so that what a
// killed test process left behind (its pods, containerd's shims, mounts and files) is found
// and removed by the next process that takes the slot, or passes over it while it is free.
func newNodeNet(dir string) (*nodeNet, error) {
	if err := os.MkdirAll(nodeSlots, 0o755); err != nil {
		return nil, err
	}
	var n *nodeNet
	for slot := 1; slot < 250; slot++ {
		path := filepath.Join(nodeSlots, fmt.Sprintf("%d.lock", slot))
		if n != nil {
			// Past our slot, only slots some run used before are looked at.
			if _, err := os.Stat(path); err != nil {
				break
			}
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		reapSlot(slot, f)
		if n != nil {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
		if _, err := f.WriteAt([]byte(dir), 0); err != nil {
			f.Close()
			return nil, err
		}
		n = slotNet(slot)
		n.lock = f
	}
	if n == nil {
		return nil, fmt.Errorf("no free node slot in %s", nodeSlots)
	}
	if err := n.setUp(); err != nil {
		n.tearDown()
		return nil, err
	}
	return n, nil
}

func slotNet(slot int) *nodeNet {
	return &nodeNet{
		slot:     slot,
		netns:    fmt.Sprintf("kollect-n%d", slot),
		hostIP:   fmt.Sprintf("198.18.%d.1", slot),
		nodeIP:   fmt.Sprintf("198.18.%d.2", slot),
		podCIDR:  fmt.Sprintf("198.19.%d.0/24", slot),
		podGW:    fmt.Sprintf("198.19.%d.1", slot),
		hostLink: fmt.Sprintf("kn%dh", slot),
	}
}

// reapSlot removes what the slot's last holder left, when it was killed before Stop: the
// processes in the slot's cgroups (its pods), containerd's shims for its socket, the pods'
// network namespaces, its mounts, cgroups, namespace, links and directory. The caller holds
// the slot's lock, so no live cluster owns any of it.
func reapSlot(slot int, lock *os.File) {
	raw, err := io.ReadAll(io.NewSectionReader(lock, 0, 4096))
	if err != nil || len(raw) == 0 {
		return
	}
	stale := &NodeCluster{Name: "stale", dir: string(raw), net: slotNet(slot)}
	stale.containerdSock = filepath.Join(stale.dir, "containerd", "containerd.sock")
	_ = stale.killContainers()
	_ = unmountUnder(stale.dir)
	_ = stale.removeCgroups()
	stale.net.tearDown()
	_ = os.RemoveAll(stale.dir)
	_ = lock.Truncate(0)
}

func (n *nodeNet) setUp() error {
	// A namespace left by a killed run of the same slot goes first; the lock says no running
	// process holds it.
	_ = runCmd("ip", "netns", "delete", n.netns)
	_ = runCmd("ip", "link", "delete", n.hostLink)
	nodeLink := fmt.Sprintf("kn%dn", n.slot)
	steps := [][]string{
		{"ip", "netns", "add", n.netns},
		{"ip", "link", "add", n.hostLink, "type", "veth", "peer", "name", nodeLink},
		{"ip", "link", "set", nodeLink, "netns", n.netns},
		{"ip", "addr", "add", n.hostIP + "/24", "dev", n.hostLink},
		{"ip", "link", "set", n.hostLink, "up"},
		{"ip", "-n", n.netns, "addr", "add", n.nodeIP + "/24", "dev", nodeLink},
		{"ip", "-n", n.netns, "link", "set", nodeLink, "up"},
		{"ip", "-n", n.netns, "link", "set", "lo", "up"},
		{"ip", "route", "add", n.podCIDR, "via", n.nodeIP, "dev", n.hostLink},
		// The node forwards between its pods and the host.
		{"ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if err := runCmd(s[0], s[1:]...); err != nil {
			return fmt.Errorf("node network %s: %w", n.netns, err)
		}
	}
	return nil
}

// inNetns returns the command line that runs bin inside the node's network namespace. nsenter
// enters the network namespace alone: the kubelet and containerd must share the host's mount
// namespace, where the kubelet mounts the volumes that containerd hands to runc (`ip netns
// exec` would give each a private one).
func (n *nodeNet) inNetns(bin string, args ...string) (string, []string) {
	return "nsenter", append([]string{"--net=/run/netns/" + n.netns, "--", bin}, args...)
}

func (n *nodeNet) tearDown() {
	_ = runCmd("ip", "netns", "delete", n.netns)
	_ = runCmd("ip", "link", "delete", n.hostLink)
	if n.lock != nil {
		_ = n.lock.Truncate(0) // nothing of this cluster is left to reap
		n.lock.Close()
	}
}

func runCmd(bin string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// ConnectNodeClusters lets the pods and nodes of the given clusters reach one another, as the
// clusters of one fleet do: each node's namespace routes the others' node and pod ranges to
// the host, and the host forwards between the clusters' links (forwarding is switched on for
// those links only, never machine-wide). Nothing else becomes reachable: a node still has no
// default route, and the host routes the 198.18/198.19 ranges only to the links of the
// clusters that exist.
func ConnectNodeClusters(clusters ...*NodeCluster) error {
	for _, c := range clusters {
		if err := runCmd("sysctl", "-qw", "net.ipv4.conf."+c.net.hostLink+".forwarding=1"); err != nil {
			return fmt.Errorf("connecting cluster %s: %w", c.Name, err)
		}
		for _, peer := range clusters {
			if peer == c {
				continue
			}
			// The peer's whole /24 of links: its node and the host's address facing it.
			peerLinks := fmt.Sprintf("198.18.%d.0/24", peer.net.slot)
			for _, dst := range []string{peerLinks, peer.net.podCIDR} {
				if err := runCmd("ip", "-n", c.net.netns, "route", "replace", dst, "via", c.net.hostIP); err != nil {
					return fmt.Errorf("connecting cluster %s to %s: %w", c.Name, peer.Name, err)
				}
			}
		}
	}
	return nil
}
