package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
)

// checkWrite asks the broker which operations the credentials may perform on the topic
// (Metadata v8+, KIP-430) and fails when writing is not one of them: ACLs that let a client
// describe a topic but not write it would otherwise pass the probe and fail every export. A
// broker that omits the operations (older than Kafka 2.3, or one that does not say) passes;
// a topic that does not exist yet is left to the topic checks.
func (s *Sink) checkWrite(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(s.topic)
	req.Topics = append(req.Topics, rt)
	req.IncludeTopicAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return classify(fmt.Errorf("reading the operations allowed on topic %s: %w", s.topic, err))
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != s.topic || t.ErrorCode != 0 || t.AuthorizedOperations == math.MinInt32 {
			continue
		}
		ops := kadm.DecodeACLOperations(t.AuthorizedOperations)
		var names []string
		for _, op := range ops {
			if op == kmsg.ACLOperationWrite || op == kmsg.ACLOperationAll {
				return nil
			}
			names = append(names, op.String())
		}
		return sink.Terminalf("topic %s: the credentials may not write to it (the broker allows only %s)", s.topic, allowed(names))
	}
	return nil
}

func allowed(ops []string) string {
	if len(ops) == 0 {
		return "nothing"
	}
	return strings.Join(ops, ", ")
}

// closedHint says what a broker closing the connection during the handshake usually means
// for this configuration. Kafka answers refused SASL credentials with
// SASL_AUTHENTICATION_FAILED, but some brokers (kfake, proxies) just close the connection,
// as does a listener that expects TLS: the bare "EOF" would name no cause.
func closedHint(cfg *v1alpha1.KafkaSinkConfig) string {
	tls := cfg.TLS != nil && (cfg.TLS.Enabled || cfg.TLS.CASecretRef != nil || cfg.TLS.InsecureSkipVerify)
	switch {
	case cfg.SASLMechanism != "" && cfg.SecretRef != nil:
		return fmt.Sprintf(" (the broker closed the connection: it may have refused the SASL %s credentials of Secret %s, or expect another protocol on this port)",
			cfg.SASLMechanism, cfg.SecretRef.Name)
	case !tls:
		return " (the broker closed the connection: its listener may expect TLS or SASL)"
	}
	return " (the broker closed the connection: its listener may expect SASL)"
}

// hintFor returns the closed-connection hint when err is a connection the broker closed.
func (s *Sink) hintFor(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return s.closedHint
	}
	return ""
}
