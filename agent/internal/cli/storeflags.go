package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"kollect.dev/agent/internal/sink/azureblob"
	"kollect.dev/agent/internal/sink/gcs"
	"kollect.dev/agent/internal/sink/kafka"
	kollectnats "kollect.dev/agent/internal/sink/nats"
	"kollect.dev/agent/internal/sink/s3"
)

// EnvSASLPassword is where kollect sinks purge reads a Kafka SASL password: never a flag,
// which would show in the process list and shell history.
const EnvSASLPassword = "KOLLECT_SASL_PASSWORD"

// storeFlags name the snapshot or event sink kollect sinks purge reaches directly, beside
// dbFlags' databases: an object store by URL, a Kafka topic or a NATS stream. Credentials come
// from the clients' own environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS,
// AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_KEY), from KOLLECT_SASL_PASSWORD, or from a NATS
// credentials file, and are never echoed.
type storeFlags struct {
	s3URL, region string
	pathStyle     bool
	gcsURL        string
	azureBlob     string
	// endpoint is dbFlags' --endpoint, shared with BigQuery (an emulator or S3-compatible store).
	endpoint *string

	kafkaBrokers, topic, saslMechanism, saslUser string

	natsServers, stream, kvBucket, subjectTemplate, natsCreds string
}

func (s *storeFlags) register(fl *pflag.FlagSet, endpoint *string) {
	s.endpoint = endpoint
	fl.StringVar(&s.s3URL, "s3", "", "S3 sink as s3://BUCKET[/PREFIX] (credentials: the AWS SDK's default chain, e.g. AWS_ACCESS_KEY_ID).")
	fl.StringVar(&s.region, "region", "us-east-1", "Region of the S3 bucket.")
	fl.BoolVar(&s.pathStyle, "path-style", false, "Path-style S3 requests (most S3-compatible stores).")
	fl.StringVar(&s.gcsURL, "gcs", "", "GCS sink as gs://BUCKET[/PREFIX] (Application Default Credentials; none with --endpoint).")
	fl.StringVar(&s.azureBlob, "azureblob", "", "Azure Blob sink as ACCOUNT/CONTAINER[/PREFIX] (credential from "+
		azureblob.EnvSASToken+" or "+azureblob.EnvAccountKey+"; --endpoint for another cloud or the emulator); "+
		azureblob.ClusterPlaceholder+" in CONTAINER is replaced with --cluster, as the agent replaces it with its cluster name.")
	fl.StringVar(&s.kafkaBrokers, "kafka", "", "Kafka brokers of the sink, comma-separated (with --topic).")
	fl.StringVar(&s.topic, "topic", "", "Kafka topic of the sink; "+kafka.ClusterPlaceholder+" is replaced with --cluster, as the agent replaces it with its cluster name.")
	fl.StringVar(&s.saslMechanism, "sasl-mechanism", "", "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password from "+EnvSASLPassword+").")
	fl.StringVar(&s.saslUser, "sasl-user", "", "Kafka SASL user.")
	fl.StringVar(&s.natsServers, "nats", "", "NATS server URLs of the sink, comma-separated (with --stream).")
	fl.StringVar(&s.stream, "stream", "", "JetStream stream of the NATS sink.")
	fl.StringVar(&s.kvBucket, "kv-bucket", "", "Key-value bucket of the NATS sink, if it has one.")
	fl.StringVar(&s.subjectTemplate, "subject-template", "", "Subject template of the NATS sink (default "+kollectnats.DefaultSubjectTemplate+").")
	fl.StringVar(&s.natsCreds, "nats-creds", "", "NATS credentials file (JWT and seed).")
}

// given counts the stores named.
func (s *storeFlags) given() int {
	n := 0
	for _, v := range []string{s.s3URL, s.gcsURL, s.azureBlob, s.kafkaBrokers, s.natsServers} {
		if v != "" {
			n++
		}
	}
	return n
}

// check accepts one store with what it needs.
func (s *storeFlags) check() error {
	switch {
	case s.given() != 1:
		return errors.New("give exactly one sink")
	case s.kafkaBrokers != "" && s.topic == "":
		return errors.New("--kafka needs --topic")
	case s.natsServers != "" && s.stream == "":
		return errors.New("--nats needs --stream")
	case s.saslMechanism != "" && (s.saslUser == "" || os.Getenv(EnvSASLPassword) == ""):
		return fmt.Errorf("--sasl-mechanism needs --sasl-user and the password in %s", EnvSASLPassword)
	}
	return nil
}

// open connects to the store the flags name (check them first).
func (s *storeFlags) open(ctx context.Context) (dbSink, error) {
	switch {
	case s.s3URL != "":
		return s3.OpenURL(ctx, s.s3URL, s.region, *s.endpoint, s.pathStyle)
	case s.gcsURL != "":
		return gcs.OpenURL(ctx, s.gcsURL, *s.endpoint)
	case s.azureBlob != "":
		return azureblob.OpenURL(ctx, s.azureBlob, *s.endpoint)
	case s.kafkaBrokers != "":
		auth := kafka.Auth{Mechanism: s.saslMechanism, User: s.saslUser, Password: os.Getenv(EnvSASLPassword)}
		return kafka.OpenBrokers(ctx, strings.Split(s.kafkaBrokers, ","), s.topic, auth, nil)
	default:
		var opts []nats.Option
		if s.natsCreds != "" {
			opts = append(opts, nats.UserCredentials(s.natsCreds))
		}
		return kollectnats.OpenServers(ctx, s.natsServers, s.stream, s.kvBucket, s.subjectTemplate, opts...)
	}
}

// destination names the store for reports, without credentials.
func (s *storeFlags) destination() string {
	switch {
	case s.s3URL != "":
		return s.s3URL
	case s.gcsURL != "":
		return s.gcsURL
	case s.azureBlob != "":
		return "azureblob:" + s.azureBlob
	case s.kafkaBrokers != "":
		return "kafka://" + s.kafkaBrokers + "/" + s.topic
	default:
		return hostsOf(s.natsServers) + " stream " + s.stream
	}
}

// hostsOf drops any user:password@ from comma-separated server URLs.
func hostsOf(servers string) string {
	parts := strings.Split(servers, ",")
	for i, p := range parts {
		if at := strings.LastIndex(p, "@"); at >= 0 {
			scheme, _, _ := strings.Cut(p, "://")
			if !strings.Contains(p, "://") {
				scheme = "nats"
			}
			parts[i] = scheme + "://" + p[at+1:]
		}
	}
	return strings.Join(parts, ",")
}
