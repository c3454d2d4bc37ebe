package server

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// admit decides a call from its headers: the context to serve it with, or why not.
type admit func(ctx context.Context, procedure, peer string, h http.Header) (context.Context, error)

// authenticateFirst serves a Connect service's handler only to calls admit lets through, and
// answers the others before a byte of their body is read: Connect reads a unary request whole
// (and gunzips and decodes it) before any interceptor runs, so without this an anonymous
// caller could make the hub read up to a bundle's 16 MiB per call. The refusal is written in
// the caller's protocol (Connect, gRPC or gRPC-Web), with internal causes hidden as the
// interceptors hide them. An admitted call's body must then arrive within readTimeout.
func (s *Server) authenticateFirst(svc protoreflect.ServiceDescriptor, admit admit, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	hide := opaqueInternal{s.log}
	streamsIn := clientStreaming(svc)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, err := admit(r.Context(), r.URL.Path, r.RemoteAddr, r.Header)
		if err != nil {
			_ = errs.Write(w, r, hide.hide(r.URL.Path, err))
			return
		}
		r = r.WithContext(ctx)
		if !streamsIn[r.URL.Path] {
			limitBodyTime(w, r, s.cfg.RequestReadTimeout)
		}
		next.ServeHTTP(w, r)
	})
}

// clientStreaming lists the procedures of svc whose request is a stream: their body is read
// for as long as the call lasts, so no read deadline applies to them. The hub has none today.
func clientStreaming(svc protoreflect.ServiceDescriptor) map[string]bool {
	out := map[string]bool{}
	methods := svc.Methods()
	for i := range methods.Len() {
		if m := methods.Get(i); m.IsStreamingClient() {
			out["/"+string(svc.FullName())+"/"+string(m.Name())] = true
		}
	}
	return out
}

// limitBodyTime gives the request's body d to arrive: a client that sends its headers and
// then trickles (or withholds) the body holds a handler, and a message's worth of memory, for
// at most d. The deadline is lifted once the body has been read to its end, so a server
// stream (whose request is one message) stays open for as long as it lasts.
func limitBodyTime(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if d <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
		return // a ResponseWriter without deadlines (tests' recorders): nothing to bound
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

// deadlineBody lifts the read deadline when the body ends.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.lift)
	}
	return n, err
}
