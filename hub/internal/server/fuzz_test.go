package server_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// FuzzConnectRequestBodies posts arbitrary bodies, as JSON and as binary protobuf, to every
// unary procedure of the hub's services, with an admin token: each call gets an answer (a
// Connect error code, or a result), never a dropped connection or a 500 without a message.
// The seeds run with every `go test`; `go test -fuzz` explores more.
func FuzzConnectRequestBodies(f *testing.F) {
	for _, seed := range []string{`{}`, `{"name":"c1"}`, `{"labels":{"a":"b"},"name":"x"}`, `{"manifests":"kind: KollectProfile\n---\n:"}`,
		`{"bundle":"b","revision":"99999999999999999999"}`, `{"strategy":{"waveSize":{"percent":1000}}}`, `[`, "\x0a\x03c1\x12", ""} {
		f.Add([]byte(seed))
	}
	h := startHub(f, "")
	client := h.httpClient()
	var paths []string
	for _, fd := range []protoreflect.FileDescriptor{fleetv1.File_kollect_fleet_v1_fleet_proto, fleetv1.File_kollect_fleet_v1_agent_proto} {
		for i := 0; i < fd.Services().Len(); i++ {
			svc := fd.Services().Get(i)
			for j := 0; j < svc.Methods().Len(); j++ {
				m := svc.Methods().Get(j)
				if m.IsStreamingClient() || m.IsStreamingServer() {
					continue
				}
				paths = append(paths, "/"+string(svc.FullName())+"/"+string(m.Name()))
			}
		}
	}
	if len(paths) < 10 {
		f.Fatalf("found only %d unary procedures: %v", len(paths), paths)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range paths {
			for _, ct := range []string{"application/json", "application/proto"} {
				req, err := http.NewRequest(http.MethodPost, h.url+p, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", ct)
				req.Header.Set("Authorization", "Bearer "+h.srv.AdminToken)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s (%s): no answer: %v", p, ct, err)
				}
				out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				if resp.StatusCode >= 500 && !bytes.Contains(out, []byte(`"message"`)) {
					t.Fatalf("%s (%s): %d without a message: %s", p, ct, resp.StatusCode, out)
				}
			}
		}
	})
}
