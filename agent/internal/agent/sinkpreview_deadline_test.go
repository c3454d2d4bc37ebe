package agent

import (
	"context"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// stuckPreview is a sink whose preview waits for its context to end, as a client retrying an
// unreachable endpoint without a deadline of its own does (BigQuery's).
type stuckPreview struct{ *sinktest.Recorder }

func (stuckPreview) Preview(ctx context.Context, _, _ string) (sink.Preview, error) {
	<-ctx.Done()
	return sink.Preview{}, ctx.Err()
}

// TestSinkPreviewHasADeadline: a sink whose preview never returns by itself still gets its
// Ready condition (without a deadline its reconcile never ended, and it held one of the
// family's few probe workers for ever), and the next sink of its family gets its own.
func TestSinkPreviewHasADeadline(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "preview-deadline")
	factories := sink.Factories{"database/postgres": func(_ context.Context, obj client.Object, _ sink.Env) (sink.Sink, error) {
		if obj.GetName() == "a-stuck" {
			return stuckPreview{sinktest.NewRecorder()}, nil
		}
		return sinktest.NewRecorder(), nil
	}}
	for _, name := range []string{"a-stuck", "b-next"} {
		create(t, &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectDatabaseSinkSpec{
			Type: kollectv1.DatabaseSinkPostgres, Postgres: &kollectv1.PostgresSinkConfig{Host: "127.0.0.1", Database: "postgres",
				SecretRef: kollectv1.SecretReference{Name: "unused"}}}})
	}
	startAgentWith(t, nil, "c-deadline", ns, factories)
	eventually(t, 40*time.Second, "both sinks Ready=True", func() (bool, string) {
		msg := ""
		for _, name := range []string{"a-stuck", "b-next"} {
			obj := &kollectv1.KollectDatabaseSink{}
			if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				return false, err.Error()
			}
			c := apimeta.FindStatusCondition(obj.Status.Conditions, kollectv1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionTrue {
				return false, msg + name + " not Ready yet"
			}
			msg += name + " Ready; "
		}
		return true, msg
	})
}
