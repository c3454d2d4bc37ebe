package kafka

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"kollect.dev/agent/internal/sink"
)

// ClusterPlaceholder in spec.kafka.topic is replaced with the agent's cluster name. Kafka's
// ACLs name topics (or topic name prefixes), never record keys, so a topic shared by every
// cluster lets any agent that may write it write under another cluster's keys; a topic per
// cluster, chosen by the cluster name rather than by each cluster's own copy of the sink, is
// what lets the broker enforce one writer per cluster.
const ClusterPlaceholder = "{cluster}"

// maxTopicLength is Kafka's limit on a topic name (Topic.MAX_NAME_LENGTH).
const maxTopicLength = 249

// Topic expands ClusterPlaceholder in template with cluster and checks that the result is a
// name Kafka accepts. A template without the placeholder is the topic itself. Every use of
// the topic (produce, read-back, probe, holdings, purge, writer checks) goes through the
// expanded name, which is why it is computed once, when the sink opens.
func Topic(template, cluster string) (string, error) {
	name := template
	if strings.Contains(template, ClusterPlaceholder) {
		if cluster == "" {
			return "", sink.Terminalf("topic %q has %s but there is no cluster name to put in its place", template, ClusterPlaceholder)
		}
		name = strings.ReplaceAll(template, ClusterPlaceholder, cluster)
	}
	if err := validTopicName(name); err != nil {
		if name != template {
			return "", sink.Terminalf("topic %q with cluster name %q: %w", template, cluster, err)
		}
		return "", sink.Terminalf("topic %q: %w", template, err)
	}
	return name, nil
}

// CheckTopicTemplate is what admission can tell of a topic template: with the cluster name,
// that the expanded name is valid (Topic); without it (kollect validate, offline), that the
// rest of the template is, the placeholder standing for the shortest cluster name.
func CheckTopicTemplate(template, cluster string) error {
	if cluster == "" {
		cluster = "c"
	}
	_, err := Topic(template, cluster)
	return err
}

// validTopicName applies Kafka's own rules (org.apache.kafka.common.internals.Topic): 1 to
// 249 of [A-Za-z0-9._-], and neither "." nor "..". The broker would refuse any other name
// with INVALID_TOPIC_EXCEPTION, but only at the first export, and a cluster name is free
// text (it may hold '/'), so the agent checks before connecting.
func validTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a topic name may not be empty")
	case len(name) > maxTopicLength:
		return fmt.Errorf("the topic name %q is %d characters long, Kafka allows %d", name, len(name), maxTopicLength)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a topic name Kafka accepts", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("the topic name %q has %q: Kafka allows only ASCII letters, digits, '.', '_' and '-'", name, r)
		}
	}
	return nil
}

// aclHint says what TOPIC_AUTHORIZATION_FAILED on the sink's own topic usually means: Kafka's
// message names no topic and no user, and with a topic per cluster the likely cause is an
// agent given another cluster's Secret (or a cluster name its credentials were not made for).
func aclHint(err error) string {
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		return ""
	}
	return " (the broker's ACLs do not let these credentials use this topic: where each cluster has a topic of its own, " +
		"check that the Secret is this cluster's and the agent's --cluster-name the one its ACLs were made for)"
}
