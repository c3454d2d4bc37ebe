package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestRotatedSecretIsPickedUp runs the agent with the real NATS sink against a nats-server
// that requires a user and password. With a wrong password in the Secret the exports fail;
// once the Secret is fixed, without touching the sink or the inventory, the agent rebuilds
// the sink's client and the export succeeds.
func TestRotatedSecretIsPickedUp(t *testing.T) {
	t.Parallel()
	srv, err := testenv.StartNATS(testenv.NATSOptions{User: "kollect", Password: "right-password"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ns := namespace(t, "rotation")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nats-creds"},
		StringData: map[string]string{"user": "kollect", "password": "wrong-password"}}
	create(t, secret)
	create(t, &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bus"}, Spec: kollectv1.KollectEventSinkSpec{
		Type: kollectv1.EventSinkNATS, Mode: kollectv1.EventModeChanges, BufferSize: 1000, Timeout: metav1.Duration{Duration: 5 * time.Second},
		NATS: &kollectv1.NATSSinkConfig{Servers: []string{srv.URL}, Stream: "ROTATION", CreateStream: true,
			SecretRef: &kollectv1.SecretReference{Name: "nats-creds"}},
	}})
	create(t, colorInventory(ns, kollectv1.SinkReferences{Event: []kollectv1.LocalObjectReference{{Name: "bus"}}})...)
	startAgentWith(t, nil, "c-rotation", ns, nil)

	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "inv"}
	inv := &kollectv1.KollectInventory{}
	sinkState := func() (kollectv1.SinkExportStatus, string) {
		if err := cp.Client.Get(ctx, key, inv); err != nil {
			return kollectv1.SinkExportStatus{}, err.Error()
		}
		if len(inv.Status.Sinks) != 1 {
			return kollectv1.SinkExportStatus{}, "no sink status yet"
		}
		s := inv.Status.Sinks[0]
		return s, "checksum=" + s.Checksum + " inventory=" + inv.Status.Checksum + " lastError=" + s.LastError
	}
	eventually(t, 60*time.Second, "exports failing with the wrong password", func() (bool, string) {
		s, msg := sinkState()
		return s.LastError != "" && s.Checksum == "", msg
	})
	if s, _ := sinkState(); strings.Contains(s.LastError, "wrong-password") {
		t.Fatalf("the sink's error shows the password: %s", s.LastError)
	}

	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	secret.Data["password"] = []byte("right-password")
	if err := cp.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the export succeeds with the fixed Secret, the sink untouched", func() (bool, string) {
		s, msg := sinkState()
		return s.LastError == "" && s.Checksum != "" && s.Checksum == inv.Status.Checksum, msg
	})
}
