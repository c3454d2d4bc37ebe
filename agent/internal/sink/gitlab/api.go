package gitlab

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"kollect.dev/agent/internal/sink"
)

// api is a minimal client of the GitLab REST API v4: the project and merge-request calls the
// sink needs.
type api struct {
	base    string // e.g. https://gitlab.com, without /api/v4
	project string
	token   string
	http    *http.Client
}

// MergeRequest is the subset of GitLab's merge-request resource the sink reads.
type MergeRequest struct {
	IID          int    `json:"iid"`
	Title        string `json:"title"`
	Description  string `json:"description"`
	State        string `json:"state"`
	SourceBranch string `json:"source_branch"`
	TargetBranch string `json:"target_branch"`
	WebURL       string `json:"web_url"`
}

// apiError is a non-2xx answer.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("GitLab API: %d %s", e.Status, e.Message) }

func (a *api) projectPath() string {
	// A full path (group/project) is one URL-encoded segment; a numeric ID stays as is.
	return "/api/v4/projects/" + url.PathEscape(a.project)
}

func (a *api) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u, err := url.Parse(strings.TrimSuffix(a.base, "/") + path)
	if err != nil {
		return sink.TerminalError(fmt.Errorf("GitLab URL: %w", err))
	}
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return sink.TerminalError(err)
	}
	req.Header.Set("PRIVATE-TOKEN", a.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return classify(method+" "+path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return sink.TransientError(fmt.Errorf("%s %s: reading answer: %w", method, path, err))
	}
	if resp.StatusCode/100 != 2 {
		var msg struct {
			Message any `json:"message"`
			Error   any `json:"error"`
		}
		_ = json.Unmarshal(raw, &msg)
		text := fmt.Sprint(msg.Message)
		if msg.Message == nil {
			text = fmt.Sprint(msg.Error)
		}
		if msg.Message == nil && msg.Error == nil {
			text = http.StatusText(resp.StatusCode)
		}
		return classify(method+" "+path, &apiError{Status: resp.StatusCode, Message: text})
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return sink.TransientError(fmt.Errorf("%s %s: decoding answer: %w", method, path, err))
		}
	}
	return nil
}

// classify: refused tokens, missing projects and invalid requests are terminal; rate limits,
// conflicts, server errors and the network are transient.
func classify(op string, err error) error {
	wrapped := fmt.Errorf("%s: %w", op, err)
	var ae *apiError
	if errors.As(err, &ae) {
		switch {
		case ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden:
			return sink.TerminalError(fmt.Errorf("%s: token refused: %w", op, err))
		case ae.Status == http.StatusNotFound || ae.Status == http.StatusBadRequest || ae.Status == http.StatusUnprocessableEntity:
			return sink.TerminalError(wrapped)
		}
		return sink.TransientError(wrapped)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return sink.TerminalError(wrapped)
	}
	if isCertificateError(err) {
		return sink.TerminalError(wrapped) // untrusted until the TLS settings change
	}
	return sink.TransientError(wrapped)
}

// Project checks that the project exists and the token may read it.
func (a *api) Project(ctx context.Context) error {
	var p struct {
		ID int `json:"id"`
	}
	return a.do(ctx, http.MethodGet, a.projectPath(), nil, nil, &p)
}

// OpenMergeRequest returns the open merge request from source to target, or nil.
func (a *api) OpenMergeRequest(ctx context.Context, source, target string) (*MergeRequest, error) {
	var mrs []MergeRequest
	q := url.Values{"state": {"opened"}, "source_branch": {source}, "target_branch": {target}}
	if err := a.do(ctx, http.MethodGet, a.projectPath()+"/merge_requests", q, nil, &mrs); err != nil {
		return nil, err
	}
	for i := range mrs {
		if mrs[i].SourceBranch == source && mrs[i].TargetBranch == target && mrs[i].State == "opened" {
			return &mrs[i], nil
		}
	}
	return nil, nil
}

// CreateMergeRequest opens a merge request.
func (a *api) CreateMergeRequest(ctx context.Context, source, target, title, description string) (*MergeRequest, error) {
	var mr MergeRequest
	body := map[string]any{"source_branch": source, "target_branch": target, "title": title, "description": description}
	if err := a.do(ctx, http.MethodPost, a.projectPath()+"/merge_requests", nil, body, &mr); err != nil {
		return nil, err
	}
	return &mr, nil
}

// UpdateMergeRequest sets the title and description of a merge request.
func (a *api) UpdateMergeRequest(ctx context.Context, iid int, title, description string) error {
	body := map[string]any{"title": title, "description": description}
	return a.do(ctx, http.MethodPut, fmt.Sprintf("%s/merge_requests/%d", a.projectPath(), iid), nil, body, &MergeRequest{})
}

// isCertificateError: an untrusted or mismatched server certificate stays so until the TLS
// settings change.
func isCertificateError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify)
}
