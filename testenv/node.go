package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeCluster is a Kubernetes cluster with a real node: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler on the host, and containerd, the kubelet and
// kube-proxy inside a network namespace of their own (see nodeNet), so that pods get addresses
// that exist only on this machine. The API server reaches the pods' Services through their
// endpoints (--enable-aggregator-routing), and the pods reach the API server through the
// `kubernetes` Service, as in any cluster.
type NodeCluster struct {
	Name     string
	NodeName string
	// Config reaches the API server as a cluster administrator (system:masters).
	Config *rest.Config
	// Client is a controller-runtime client using Scheme.
	Client client.Client
	// Kubeconfig is the administrator's kubeconfig file (kubectl, helm).
	Kubeconfig string
	// HostIP is the host's address on the node's network: servers a pod must reach (sinks,
	// a hub outside the cluster) listen here.
	HostIP string
	// NodeIP is the node's InternalIP: a NodePort Service answers here, for the host and
	// for the pods of clusters joined with ConnectNodeClusters.
	NodeIP string

	dir            string
	net            *nodeNet
	pki            *clusterPKI
	containerdSock string
	procs          []*Process
}

// NodeAssetsDir is KOLLECT_NODE (hack/ensure-node.sh's output: kubelet, kube-scheduler,
// kube-controller-manager, kube-proxy), or else what that script prints.
func NodeAssetsDir() (string, error) {
	if dir := os.Getenv("KOLLECT_NODE"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "ensure-node.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("KOLLECT_NODE is not set and hack/ensure-node.sh failed: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// StartNodeCluster starts a cluster of one control plane and one node, imports the given OCI
// archives (agent.tar and hub.tar of `make images`) into the node's containerd, and returns
// once the node is Ready.
func StartNodeCluster(name string, images ...string) (c *NodeCluster, err error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	node, err := NodeAssetsDir()
	if err != nil {
		return nil, err
	}
	c = &NodeCluster{Name: name, NodeName: name + "-node"}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.dir, err = os.MkdirTemp("", "kollect-node-"+name+"-"); err != nil {
		return nil, err
	}
	if c.net, err = newNodeNet(c.dir); err != nil {
		return nil, err
	}
	c.HostIP, c.NodeIP = c.net.hostIP, c.net.nodeIP
	if c.pki, err = newClusterPKI(filepath.Join(c.dir, "pki")); err != nil {
		return nil, err
	}
	if err := c.startControlPlane(assets, node); err != nil {
		return nil, err
	}
	if err := c.startNode(node, images); err != nil {
		return nil, err
	}
	return c, c.waitNodeReady(3 * time.Minute)
}

// serviceIP is the `kubernetes` Service's ClusterIP: the first address of the service range.
const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
)

func (c *NodeCluster) start(name, bin string, args []string, ready func() error) error {
	dir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p, err := StartProcess(name, dir, bin, args, nil, ready)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	c.procs = append(c.procs, p)
	return nil
}

func (c *NodeCluster) startControlPlane(assets, node string) error {
	etcdPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	if err := c.start("etcd", filepath.Join(assets, "etcd"), []string{
		"--name=etcd", "--data-dir=" + filepath.Join(c.dir, "etcd", "data"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=etcd=" + peerURL, "--unsafe-no-fsync",
	}, tcpReady("127.0.0.1:"+strconv.Itoa(etcdPort))); err != nil {
		return err
	}

	apiPort, err := FreePort()
	if err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(c.net.hostIP, strconv.Itoa(apiPort))
	p := c.pki
	servingCert, servingKey, err := p.issue("apiserver", "kube-apiserver", nil,
		[]net.IP{net.ParseIP(c.net.hostIP), net.ParseIP(serviceIP), net.ParseIP("127.0.0.1")},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"})
	if err != nil {
		return err
	}
	kubeletClient, kubeletClientKey, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil)
	if err != nil {
		return err
	}
	if c.Kubeconfig, err = p.kubeconfig("admin", "kollect-admin", []string{"system:masters"}, server); err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return err
	}
	if c.Client, err = client.New(c.Config, client.Options{Scheme: Scheme}); err != nil {
		return err
	}
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cs, err := kubernetes.NewForConfig(c.Config)
		if err != nil {
			return err
		}
		return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}
	if err := c.start("kube-apiserver", filepath.Join(assets, "kube-apiserver"), []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + c.net.hostIP, "--advertise-address=" + c.net.hostIP,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + servingCert, "--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + p.caFile(),
		"--service-account-key-file=" + filepath.Join(p.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(p.dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + kubeletClient, "--kubelet-client-key=" + kubeletClientKey,
		"--kubelet-certificate-authority=" + p.caFile(),
		"--kubelet-preferred-address-types=InternalIP",
		// The API server dials a Service's endpoints itself (webhooks, aggregated APIs): it
		// runs on the host, where ClusterIPs are not routed.
		"--enable-aggregator-routing=true",
		"--allow-privileged=false",
	}, ready); err != nil {
		return err
	}

	cm, err := p.kubeconfig("controller-manager", "system:kube-controller-manager", nil, server)
	if err != nil {
		return err
	}
	if err := c.start("kube-controller-manager", filepath.Join(node, "kube-controller-manager"), []string{
		"--kubeconfig=" + cm, "--authentication-kubeconfig=" + cm, "--authorization-kubeconfig=" + cm,
		"--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file=" + filepath.Join(p.dir, "sa.key"),
		"--root-ca-file=" + p.caFile(),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--controllers=*,-bootstrap-signer-controller,-token-cleaner-controller,-node-ipam-controller",
	}, func() error { return nil }); err != nil {
		return err
	}
	sched, err := p.kubeconfig("scheduler", "system:kube-scheduler", nil, server)
	if err != nil {
		return err
	}
	return c.start("kube-scheduler", filepath.Join(node, "kube-scheduler"), []string{
		"--kubeconfig=" + sched, "--authentication-kubeconfig=" + sched, "--authorization-kubeconfig=" + sched,
		"--leader-elect=false", "--secure-port=0",
	}, func() error { return nil })
}

func (c *NodeCluster) waitNodeReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		for _, p := range c.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("cluster %s: %s exited while the node was starting:\n%s", c.Name, p.Name, tail(p.Log(), 30))
			default:
			}
		}
		var n corev1.Node
		err := c.Client.Get(context.Background(), client.ObjectKey{Name: c.NodeName}, &n)
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status == corev1.ConditionTrue {
						return nil
					}
					last = cond.Reason + ": " + cond.Message
				}
			}
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("cluster %s: node %s not Ready after %v (%s)\n%s", c.Name, c.NodeName, timeout, last, tail(c.ComponentLog("kubelet"), 60))
}

// ComponentLog returns a component's log so far (etcd, kube-apiserver, kubelet, containerd …).
func (c *NodeCluster) ComponentLog(name string) string {
	for _, p := range c.procs {
		if p.Name == name {
			return p.Log()
		}
	}
	return ""
}

// Stop stops the node (its pods' processes first), then the control plane, and removes every
// mount, cgroup, network namespace and file the cluster made.
func (c *NodeCluster) Stop() {
	if c == nil {
		return
	}
	var errs []error
	// Components in the reverse order of their start: kube-proxy, kubelet, containerd, …
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].Name == "containerd" {
			errs = append(errs, c.killContainers())
		}
		c.procs[i].kill()
	}
	errs = append(errs, unmountUnder(c.dir), c.removeCgroups())
	if c.net != nil {
		c.net.tearDown()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "cluster %s: cleaning up: %v\n", c.Name, err)
	}
}

// PodCIDR is the range the node's pods get their addresses from (a server that pods dial
// trusts it, as PostgreSQL's pg_hba does with TrustNetworks).
func (c *NodeCluster) PodCIDR() string { return c.net.podCIDR }

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// NodeCommand is a command that runs bin on the node: inside the node's network namespace,
// where its pods' traffic is routed and tracked (conntrack, ss, ip).
func (c *NodeCluster) NodeCommand(bin string, args ...string) *exec.Cmd {
	b, a := c.net.inNetns(bin, args...)
	return exec.Command(b, a...)
}
