package testenv

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestBigQueryEmulatorRunsQueries(t *testing.T) {
	bq, err := StartBigQuery("probe-project")
	if err != nil {
		t.Fatal(err)
	}
	defer bq.Stop()
	base := bq.Endpoint + "/bigquery/v2/projects/probe-project"
	resp, err := http.Post(base+"/datasets", "application/json",
		strings.NewReader(`{"datasetReference": {"projectId": "probe-project", "datasetId": "ds"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create dataset: %s", resp.Status)
	}
	resp, err = http.Post(base+"/queries", "application/json",
		strings.NewReader(`{"query": "SELECT 40 + 2 AS answer", "useLegacySql": false}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Rows []struct {
			F []struct{ V string } `json:"f"`
		} `json:"rows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("query: %s %v", resp.Status, err)
	}
	if len(out.Rows) != 1 || len(out.Rows[0].F) != 1 || out.Rows[0].F[0].V != "42" {
		t.Fatalf("query result %+v", out)
	}
}
