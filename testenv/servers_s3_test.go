package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestS3ServerAnswersSignedRequestsOnly(t *testing.T) {
	s3, err := StartS3()
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Stop()
	// An anonymous request must be refused: the gateway checks SigV4.
	resp, err := http.Get(s3.Endpoint + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "AccessDenied") {
		t.Fatalf("anonymous list: %s %s", resp.Status, body)
	}
}
