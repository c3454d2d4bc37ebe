package kafka

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kollect.dev/agent/internal/sink"
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
