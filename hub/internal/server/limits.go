package server

import (
	"net/http"
	"sort"

	"github.com/go-chi/chi/v5"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxHeaderBytes bounds a request's headers (HTTP/1 and HTTP/2): a bearer token and a few
// standard headers need far less.
const maxHeaderBytes = 64 << 10

// defaultRequestLimit is the request size of every procedure requestLimits does not name:
// listings, lookups and small changes.
const defaultRequestLimit = 1 << 20

// requestLimits is the largest request message (after decompression) of the procedures that
// need more or much less than defaultRequestLimit; a larger one is refused with
// ResourceExhausted before it is decoded.
var requestLimits = map[string]int64{
	// A name, labels and a token.
	"/kollect.fleet.v1.AgentService/Register": 64 << 10,
	// One digest.
	"/kollect.fleet.v1.AgentService/WatchConfig": 4 << 10,
	// An empty message.
	"/kollect.fleet.v1.AgentService/RotateCredential": 4 << 10,
	// Every inventory, sink and applied object of a cluster.
	"/kollect.fleet.v1.AgentService/ReportStatus": 8 << 20,
	// A bundle's manifests.
	"/kollect.fleet.v1.FleetService/ApplyBundle":   16 << 20,
	"/kollect.fleet.v1.FleetService/PreviewBundle": 16 << 20,
	// An answer to a preview: twice maxPreviewAnswer, so that an answer over that limit is
	// decoded and refused with InvalidArgument and a message saying why.
	"/kollect.fleet.v1.AgentService/ReportPreview": 2 * maxPreviewAnswer,
}

// requestLimit is the limit of one procedure.
func requestLimit(procedure string) int64 {
	if l, ok := requestLimits[procedure]; ok {
		return l
	}
	return defaultRequestLimit
}

// mountLimited routes every method of svc to a handler built with that method's request limit
// (one handler per distinct limit), and anything else under the service's path to the
// default limit's handler, which answers unknown procedures as Connect does.
func mountLimited(r chi.Router, svc protoreflect.ServiceDescriptor, build func(limit int64) (string, http.Handler)) {
	path, fallback := build(defaultRequestLimit)
	handlers := map[int64]http.Handler{defaultRequestLimit: fallback}
	methods := svc.Methods()
	var procedures []string
	for i := range methods.Len() {
		procedures = append(procedures, "/"+string(svc.FullName())+"/"+string(methods.Get(i).Name()))
	}
	sort.Strings(procedures)
	for _, p := range procedures {
		limit := requestLimit(p)
		if handlers[limit] == nil {
			_, handlers[limit] = build(limit)
		}
		r.Handle(p, handlers[limit])
	}
	r.Handle(path+"*", fallback)
}
