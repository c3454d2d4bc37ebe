package azureblob

import (
	"fmt"
	"strings"

	"kollect.dev/agent/internal/sink"
)

// ClusterPlaceholder in spec.azureBlob.container is replaced with the agent's cluster name.
// A shared access signature names a container (sr=c) or the whole account, never a blob name
// prefix in a flat-namespace container (a directory signature, sr=d, needs the hierarchical
// namespace), so a container shared by every cluster lets any agent holding its signature
// write or delete every cluster's blobs; a container per cluster, chosen by the cluster name
// rather than by each cluster's own copy of the sink, is what lets Azure enforce one writer
// per cluster with a container signature per cluster.
const ClusterPlaceholder = "{cluster}"

// Azure's limits on a container name.
const (
	minContainerLength = 3
	maxContainerLength = 63
)

// offlineCluster stands for the cluster name where there is none to check a template with
// (kollect validate): the shortest name that is a valid container name by itself.
const offlineCluster = "ccc"

// ContainerName expands ClusterPlaceholder in template with cluster and checks that the result
// is a container name Azure accepts. A template without the placeholder is the container
// itself. Every use of the container (export, read-back, probe, holdings, purge) goes
// through the expanded name, which is why it is computed once, when the sink opens.
func ContainerName(template, cluster string) (string, error) {
	name := template
	if strings.Contains(template, ClusterPlaceholder) {
		if cluster == "" {
			return "", sink.Terminalf("container %q has %s but there is no cluster name to put in its place", template, ClusterPlaceholder)
		}
		name = strings.ReplaceAll(template, ClusterPlaceholder, cluster)
	}
	if err := validContainerName(name); err != nil {
		if name != template {
			return "", sink.Terminalf("container %q with cluster name %q: %w", template, cluster, err)
		}
		return "", sink.Terminalf("container %q: %w", template, err)
	}
	return name, nil
}

// CheckContainerTemplate is what admission can tell of a container template: with the
// cluster name, that the expanded name is valid (ContainerName); without it (kollect
// validate, offline), that the rest of the template is, the placeholder standing for a
// short valid name.
func CheckContainerTemplate(template, cluster string) error {
	if cluster == "" {
		cluster = offlineCluster
	}
	_, err := ContainerName(template, cluster)
	return err
}

// validContainerName applies Azure's rules for container names: 3 to 63 lowercase letters,
// digits and hyphens, starting and ending with a letter or digit, no two hyphens in a row.
// The service would refuse another name (InvalidResourceName) only at the first request,
// and a cluster name is free text (it may hold capitals, '.' or '/'), so the agent checks
// before connecting.
func validContainerName(name string) error {
	if n := len(name); n < minContainerLength || n > maxContainerLength {
		return fmt.Errorf("the container name %q is %d characters long, Azure allows %d to %d", name, n, minContainerLength, maxContainerLength)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("the container name %q has %q: Azure allows only lowercase letters, digits and '-'", name, r)
		}
	}
	switch {
	case name[0] == '-' || name[len(name)-1] == '-':
		return fmt.Errorf("the container name %q starts or ends with '-': Azure does not allow it", name)
	case strings.Contains(name, "--"):
		return fmt.Errorf("the container name %q has two hyphens in a row: Azure does not allow it", name)
	}
	return nil
}
