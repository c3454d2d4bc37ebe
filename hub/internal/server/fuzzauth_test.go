package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// Least roles of the FleetService procedures above viewer, as auth.rules sets them. A
// procedure missing here is taken as a viewer's: the fuzzer then asserts nothing about it.
var (
	adminOnly = []string{"RevokeAgent", "ReleaseCluster", "DeleteCluster", "CreateBootstrapToken", "ListBootstrapTokens",
		"RevokeBootstrapToken", "CreateAPIToken", "ListAPITokens", "RevokeAPIToken"}
	operatorOnly = []string{"SetClusterLabels", "ApplyBundle", "DeleteBundle", "PreviewBundle", "GetPreview", "StartRollout",
		"PauseRollout", "ResumeRollout", "AbortRollout", "RollbackRollout"}
)

// leastRole is the role a FleetService procedure needs.
func leastRole(method string) fleetv1.Role {
	for _, m := range adminOnly {
		if m == method {
			return fleetv1.Role_ROLE_ADMIN
		}
	}
	for _, m := range operatorOnly {
		if m == method {
			return fleetv1.Role_ROLE_OPERATOR
		}
	}
	return fleetv1.Role_ROLE_VIEWER
}

// presented is a credential the fuzzer presents: its secret and what it is.
type presented struct {
	what   string
	secret string
	role   fleetv1.Role // an API token's; ROLE_UNSPECIFIED for anything else
	agent  bool         // a valid agent credential
}

// dryRunBody says whether body is a StartRollout request asking for a dry run, decoded as
// Connect decodes it; ok is false when it does not decode.
func dryRunBody(body []byte, contentType string) (dry, ok bool) {
	var m fleetv1.StartRolloutRequest
	var err error
	if contentType == "application/json" {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, &m)
	} else {
		err = proto.Unmarshal(body, &m)
	}
	return m.GetDryRun(), err == nil
}

// FuzzConnectAuth posts arbitrary bodies to every unary procedure of the hub with every kind
// of credential (none, a malformed or mangled Authorization header, a viewer's or an
// operator's API token, an agent credential, a bootstrap token, a revoked API token), and
// checks the decision the hub's front (auth.FleetAuth.Authorize, AgentAuth.Authenticate) and
// interceptors make: a caller is the token only when the header is "Bearer <token>"; a
// FleetService call without a valid API token is Unauthenticated, one whose token's role is
// below the procedure's is PermissionDenied (a viewer's StartRollout goes through only as a dry
// run); an AgentService call but Register without a valid agent credential is
// Unauthenticated. (FuzzConnectRequestBodies covers the admin's bodies.)
func FuzzConnectAuth(f *testing.F) {
	for _, s := range []struct {
		body           string
		kind           uint8
		prefix, suffix string
	}{
		{`{}`, 1, "Bearer ", ""}, {`{}`, 2, "Bearer ", ""}, {`{"dryRun":true}`, 1, "Bearer ", ""},
		{`{"dryRun":false,"bundle":"b"}`, 1, "Bearer ", ""}, {`{"dry_run":true}`, 1, "Bearer ", ""},
		{"\x30\x01", 1, "Bearer ", ""}, {`{}`, 0, "", ""}, {`{}`, 0, "Bearer ", ""}, {`{}`, 1, "bearer ", ""},
		{`{}`, 2, "Bearer  ", " \t"}, {`{}`, 2, "Basic ", ""}, {`{}`, 2, "Bearer ", "x"}, {`{}`, 2, "Bearer x", ""},
		{`{}`, 3, "Bearer ", ""}, {`{}`, 4, "Bearer ", ""}, {`{}`, 5, "Bearer ", ""}, {`{"name":"c1"}`, 3, "Bearer ", ""},
		{`{}`, 2, "Bearer ", "\u00a0"}, {`{}`, 2, "Bearer\t", ""}, {`{}`, 2, "Bearer ", ",Bearer x"},
	} {
		f.Add([]byte(s.body), s.kind, s.prefix, s.suffix)
	}
	h := startHub(f, "")
	ctx := context.Background()
	token := func(name string, role fleetv1.Role) *fleetv1.CreateAPITokenResponse {
		resp, err := h.admin.CreateAPIToken(ctx, connect.NewRequest(&fleetv1.CreateAPITokenRequest{Name: name, Role: role}))
		if err != nil {
			f.Fatal(err)
		}
		return resp.Msg
	}
	revoked := token("fuzz-revoked", fleetv1.Role_ROLE_ADMIN)
	if _, err := h.admin.RevokeAPIToken(ctx, connect.NewRequest(&fleetv1.RevokeAPITokenRequest{Id: revoked.GetToken().GetId()})); err != nil {
		f.Fatal(err)
	}
	bootstrap := h.bootstrapToken(f, time.Hour, 0, false).GetSecret()
	_, agentCred := h.register(f, bootstrap, "fuzz-auth", nil)
	creds := []presented{
		{what: "nothing"},
		{what: "a viewer's API token", secret: token("fuzz-viewer", fleetv1.Role_ROLE_VIEWER).GetSecret(), role: fleetv1.Role_ROLE_VIEWER},
		{what: "an operator's API token", secret: token("fuzz-operator", fleetv1.Role_ROLE_OPERATOR).GetSecret(), role: fleetv1.Role_ROLE_OPERATOR},
		{what: "an agent credential", secret: agentCred, agent: true},
		{what: "a bootstrap token", secret: bootstrap},
		{what: "a revoked admin API token", secret: revoked.GetSecret()},
	}
	type procedure struct {
		path, method string
		fleet        bool
	}
	var procs []procedure
	for _, svc := range []protoreflect.ServiceDescriptor{
		fleetv1.File_kollect_fleet_v1_fleet_proto.Services().ByName("FleetService"),
		fleetv1.File_kollect_fleet_v1_agent_proto.Services().ByName("AgentService"),
	} {
		if svc == nil {
			f.Fatal("a service of the hub is not in its descriptor")
		}
		for i := range svc.Methods().Len() {
			m := svc.Methods().Get(i)
			path := "/" + string(svc.FullName()) + "/" + string(m.Name())
			if m.IsStreamingClient() || m.IsStreamingServer() || path == fleetv1connect.AgentServiceRegisterProcedure {
				continue
			}
			procs = append(procs, procedure{path: path, method: string(m.Name()), fleet: svc.Name() == "FleetService"})
		}
	}
	client := h.httpClient()
	client.Timeout = 30 * time.Second
	f.Fuzz(func(t *testing.T, body []byte, kind uint8, prefix, suffix string) {
		c := creds[int(kind)%len(creds)]
		header := prefix + c.secret + suffix
		// Who the hub must see: the credential only in "Bearer <credential>" (the header's
		// and the credential's surrounding white space aside), otherwise nobody.
		who := presented{what: "a mangled " + c.what}
		if rest, ok := strings.CutPrefix(strings.TrimLeft(header, " \t"), "Bearer "); ok && c.secret != "" && strings.TrimSpace(rest) == c.secret {
			who = c
		}
		for _, p := range procs {
			for _, ct := range []string{"application/json", "application/proto"} {
				req, err := http.NewRequest(http.MethodPost, h.url+p.path, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", ct)
				if header != "" {
					req.Header.Set("Authorization", header)
				}
				resp, err := client.Do(req)
				if err != nil {
					if strings.Contains(err.Error(), "invalid header field value") {
						return // net/http does not send it
					}
					t.Fatalf("%s with %s: no answer: %v", p.path, who.what, err)
				}
				out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
				resp.Body.Close()
				want := 0
				switch {
				case p.fleet && who.role == fleetv1.Role_ROLE_UNSPECIFIED, !p.fleet && !who.agent:
					want = http.StatusUnauthorized
				case p.fleet && who.role < leastRole(p.method):
					want = http.StatusForbidden
					if p.method == "StartRollout" && who.role == fleetv1.Role_ROLE_VIEWER {
						if dry, ok := dryRunBody(body, ct); dry || !ok {
							want = 0 // a dry run, or a body Connect refuses before the role is known
						}
					}
				}
				if want != 0 && resp.StatusCode != want {
					t.Fatalf("%s (%s) with %s (header %q): HTTP %d, want %d: %s", p.path, ct, who.what, header, resp.StatusCode, want, out)
				}
			}
		}
	})
}
