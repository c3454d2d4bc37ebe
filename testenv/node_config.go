package testenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// The configuration files of a node's components. Each value that differs from the upstream
// default says why in a comment; see ../shared/recipes/node.md for how they were found.

// containerdConfig is containerd's config: its own root, state and socket under dir, the CRI
// plugin with the locally built pause image and the node's CNI configuration.
func containerdConfig(dir, pauseImage string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  # Nothing can be pulled here: the pause image is imported with ctr before the kubelet starts.
  sandbox_image = %[4]q
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower a process's oom_score_adj, and the
  # sandbox fails with "can't get final child's PID from pipe" unless containerd keeps the
  # kubelet's value from going below its own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[5]q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "containerd.sock"),
		pauseImage, filepath.Join(dir, "cni"))
}

// cniConfig is the pods' network: a bridge in the node's namespace, host-local addresses from
// the node's pod range, no masquerading (no traffic is meant to leave the machine). The
// address reservations live in the node's own directory: host-local keeps them per network
// name under /var/lib/cni otherwise, shared by every node on the machine and never released
// for the pods of a node that was killed.
func cniConfig(n *nodeNet, ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kollect-node",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "gateway": %q}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, ipamDir, n.podCIDR, n.podGW)
}

// kubeletConfig is the kubelet's KubeletConfiguration.
func kubeletConfig(c *NodeCluster, servingCert, servingKey string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 on these machines; the kubelet refuses it unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
# A cgroup root per node slot: several nodes share this machine's cgroup hierarchy.
cgroupRoot: /%[1]s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%[2]s
# The pods' logs in the node's own directory: a kubelet removes the log directories of pods it
# does not know, so nodes sharing /var/log/pods would delete each other's.
podLogsDir: %[7]s
address: %[3]s
tlsCertFile: %[4]s
tlsPrivateKeyFile: %[5]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
failSwapOn: false
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
# No cluster DNS: pods resolve nothing but what hostAliases give them.
resolvConf: ""
serializeImagePulls: false
# The API server authenticates to the kubelet (logs, exec) with a certificate of the cluster CA
# and the kubelet asks the API server whether a caller may: the real node's policy.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[6]s}
authorization: {mode: Webhook}
# Frequent status updates: a test waits on Ready, not on a timer.
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, c.net.netns, c.containerdSock, c.net.nodeIP, servingCert, servingKey, c.pki.caFile(), filepath.Join(c.dir, "pod-logs"))
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode inside the node's namespace.
func kubeProxyConfig(c *NodeCluster, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %q}
hostnameOverride: %q
clusterCIDR: %q
bindAddress: %q
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the kernel's conntrack table size alone: the namespace cannot change it.
conntrack: {maxPerCore: 0, min: 0}
`, kubeconfig, c.NodeName, c.net.podCIDR, c.net.nodeIP)
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
