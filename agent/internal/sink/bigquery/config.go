package bigquery

import (
	"context"
	"fmt"

	"google.golang.org/api/option"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

const (
	defaultTable    = "rows"
	defaultLocation = "US"
)

// settings is the resolved configuration of one sink.
type settings struct {
	project, dataset, table, location string
	options                           []option.ClientOption
}

// resolve turns the spec and its Secret into client options. Credentials: the service-account
// key under key.json of secretRef; without secretRef the default credentials (workload
// identity, GOOGLE_APPLICATION_CREDENTIALS), except with an endpoint override, which means an
// emulator and no authentication.
func resolve(ctx context.Context, spec *v1alpha1.BigQuerySinkConfig, env sink.Env) (*settings, error) {
	if spec == nil {
		return nil, sink.Terminalf("bigquery sink %s/%s: spec.bigquery is missing", env.Namespace, env.Name)
	}
	if spec.Project == "" || spec.Dataset == "" {
		return nil, sink.Terminalf("bigquery sink %s/%s: project and dataset are required", env.Namespace, env.Name)
	}
	s := &settings{project: spec.Project, dataset: spec.Dataset, table: spec.Table, location: spec.Location}
	if s.table == "" {
		s.table = defaultTable
	}
	if s.location == "" {
		s.location = defaultLocation
	}
	if spec.Endpoint != "" {
		s.options = append(s.options, option.WithEndpoint(spec.Endpoint))
	}
	switch {
	case spec.SecretRef != nil:
		if env.Secrets == nil {
			return nil, sink.Terminalf("bigquery sink %s/%s: no Secret reader to resolve %s", env.Namespace, env.Name, spec.SecretRef.Name)
		}
		data, err := env.Secrets(ctx, spec.SecretRef.Name)
		if err != nil {
			return nil, fmt.Errorf("bigquery sink %s/%s: reading Secret %s: %w", env.Namespace, env.Name, spec.SecretRef.Name, err)
		}
		key := data["key.json"]
		if len(key) == 0 {
			return nil, sink.Terminalf("bigquery sink %s/%s: Secret %s has no key key.json", env.Namespace, env.Name, spec.SecretRef.Name)
		}
		s.options = append(s.options, option.WithAuthCredentialsJSON(option.ServiceAccount, key))
	case spec.Endpoint != "":
		s.options = append(s.options, option.WithoutAuthentication())
	}
	return s, nil
}
