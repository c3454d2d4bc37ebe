package sinks

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/url"
	"strings"
)

// --- azureblob: curl on the Blob REST API with a shared access signature ----------------

// azureReader reads a container of Azurite (the Azure Storage emulator, a stand-in for Azure
// Blob Storage) with curl, authorized by an account SAS, as an operator would.
type azureReader struct{ endpoint, container, sas string }

type azureBlob struct {
	Name       string `xml:"Name"`
	Properties struct {
		ETag         string `xml:"Etag"`
		LastModified string `xml:"Last-Modified"`
	} `xml:"Properties"`
}

// curl GETs path under the container (a blob name, or "" for the container) with query.
func (a *azureReader) curl(ctx context.Context, name, query string) (string, error) {
	u := a.endpoint + "/" + a.container
	if name != "" {
		u += (&url.URL{Path: "/" + name}).EscapedPath()
	}
	if query != "" {
		query += "&"
	}
	return run(ctx, "curl", "-sfS", "-H", "x-ms-version: 2021-08-06", u+"?"+query+a.sas)
}

// list is List Blobs on the container (one page: the suite stores a few dozen blobs).
func (a *azureReader) list(ctx context.Context) ([]azureBlob, error) {
	out, err := a.curl(ctx, "", "restype=container&comp=list")
	if err != nil {
		return nil, err
	}
	var res struct {
		Blobs      []azureBlob `xml:"Blobs>Blob"`
		NextMarker string      `xml:"NextMarker"`
	}
	if err := xml.Unmarshal([]byte(out), &res); err != nil {
		return nil, fmt.Errorf("List Blobs: %w: %s", err, out)
	}
	if res.NextMarker != "" {
		return nil, fmt.Errorf("List Blobs has more than one page (marker %s)", res.NextMarker)
	}
	return res.Blobs, nil
}

// rows reads every NDJSON document, and checks the manifest curl reads beside them counts
// exactly those rows.
func (a *azureReader) rows(ctx context.Context) (rowSet, error) {
	blobs, err := a.list(ctx)
	if err != nil {
		return nil, err
	}
	got := rowSet{}
	var manifests []string
	for _, b := range blobs {
		switch {
		case isDoc(b.Name):
			doc, err := a.curl(ctx, b.Name, "")
			if err != nil {
				return nil, err
			}
			if err := ndjsonRows(doc, got); err != nil {
				return nil, fmt.Errorf("%s: %w", b.Name, err)
			}
		case strings.HasSuffix(b.Name, ".manifest.json"):
			manifests = append(manifests, b.Name)
		}
	}
	for _, name := range manifests {
		raw, err := a.curl(ctx, name, "")
		if err != nil {
			return nil, err
		}
		var m struct {
			ItemCount int    `json:"itemCount"`
			Checksum  string `json:"checksum"`
		}
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if m.ItemCount != len(got) || !strings.HasPrefix(m.Checksum, "sha256:") {
			return nil, fmt.Errorf("%s counts %d rows (checksum %q), the documents hold %d", name, m.ItemCount, m.Checksum, len(got))
		}
	}
	if len(got) > 0 && len(manifests) == 0 {
		return nil, fmt.Errorf("documents without a manifest: %v", blobs)
	}
	return got, nil
}

// marks are each blob's ETag and Last-Modified (every write makes a new ETag).
func (a *azureReader) marks(ctx context.Context) (map[string]string, error) {
	blobs, err := a.list(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, b := range blobs {
		unit := "meta:" + b.Name
		if isDoc(b.Name) {
			unit = "doc:" + b.Name
		}
		m[unit] = "etag " + b.Properties.ETag + " modified " + b.Properties.LastModified
	}
	return m, nil
}
