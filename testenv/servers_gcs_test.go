package testenv

import (
	"net/http"
	"strings"
	"testing"
)

func TestGCSServerCreatesBuckets(t *testing.T) {
	gcs, err := StartGCS()
	if err != nil {
		t.Fatal(err)
	}
	defer gcs.Stop()
	resp, err := http.Post(gcs.Endpoint+"/storage/v1/b?project=test", "application/json", strings.NewReader(`{"name":"probe"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create bucket: %s", resp.Status)
	}
	resp, err = http.Get(gcs.Endpoint + "/storage/v1/b/probe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get bucket: %s", resp.Status)
	}
}
