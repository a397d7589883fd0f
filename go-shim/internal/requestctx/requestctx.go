// Package requestctx carries what the ingero_threshold middleware learned about a push
// request (its cluster) from the OTLP receiver down to the Ingero processors, and what a
// processor learned from the payload back up to the middleware that writes the response
// headers. The OTLP receiver hands the request context to the pipeline synchronously, so
// this works for processors that run before any batching (put them first in the pipeline).
package requestctx

import (
	"context"
	"sync"
)

type key struct{}

// State is one push request's cluster bookkeeping.
type State struct {
	// Cluster named by the request (query parameter, header or gRPC metadata), validated;
	// empty when the request named none.
	Cluster string

	mu      sync.Mutex
	payload string
}

// With returns ctx carrying st.
func With(ctx context.Context, st *State) context.Context {
	return context.WithValue(ctx, key{}, st)
}

// From returns the request state in ctx, or nil.
func From(ctx context.Context) *State {
	st, _ := ctx.Value(key{}).(*State)
	return st
}

// NeedsPayloadCluster reports whether the response still lacks a cluster: the request
// named none and no processor has reported the payload's yet.
func (s *State) NeedsPayloadCluster() bool {
	if s == nil || s.Cluster != "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.payload == ""
}

// SetPayloadCluster records the first valid `ingero.cluster.id` resource attribute of the
// request's batch; the first report wins.
func (s *State) SetPayloadCluster(c string) {
	if s == nil || c == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.payload == "" {
		s.payload = c
	}
}

// HeaderCluster is the cluster whose threshold the response carries: the request's, else
// the payload's, else "".
func (s *State) HeaderCluster() string {
	if s == nil {
		return ""
	}
	if s.Cluster != "" {
		return s.Cluster
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.payload
}
