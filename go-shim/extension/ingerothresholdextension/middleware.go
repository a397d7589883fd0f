package ingerothresholdextension

import (
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/ffi"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/requestctx"
)

// Wire names (agent-protocol spec sections 1.1 and 2.1).
const (
	headerThreshold        = "X-Ingero-Threshold"
	headerQuorumMet        = "X-Ingero-Quorum-Met"
	grpcMetaThreshold      = "ingero-threshold"
	grpcMetaQuorumMet      = "ingero-quorum-met"
	requestHeaderClusterID = "ingero.cluster.id"
	paramClusterID         = "cluster_id"
	metricsPathSuffix      = "/v1/metrics"
	metricsExportMethod    = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
)

// GetHTTPHandler wraps the OTLP/HTTP receiver. On metrics pushes (paths ending
// `/v1/metrics`) it resolves the cluster exactly as ingero-fleet does (the `cluster_id` query
// parameter, else the `ingero.cluster.id` header; malformed: 400), hands it to the Ingero
// processors through the request context, and sets both threshold headers (or neither) on
// the response, for the request's cluster or, without one, the payload's first
// `ingero.cluster.id` resource attribute.
func (e *thresholdExtension) GetHTTPHandler(_ context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return func(_ context.Context, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, metricsPathSuffix) {
				next.ServeHTTP(w, r)
				return
			}
			cluster, msg, ok := httpRequestCluster(r)
			if !ok {
				writeStatusError(w, r.Header.Get("Content-Type"), http.StatusBadRequest, msg)
				return
			}
			st := &requestctx.State{Cluster: cluster}
			hw := &headerWriter{ResponseWriter: w, ext: e, st: st}
			next.ServeHTTP(hw, r.WithContext(requestctx.With(r.Context(), st)))
			hw.setHeaders()
		}), nil
	}, nil
}

// httpRequestCluster: (cluster, "", true), or ("", message, false) for a malformed id.
func httpRequestCluster(r *http.Request) (string, string, bool) {
	cluster, err := ffi.QueryCluster(r.URL.RawQuery)
	if err != nil {
		return "", err.Error(), false
	}
	if cluster != "" {
		return cluster, "", true
	}
	if vals := r.Header.Values(requestHeaderClusterID); len(vals) > 0 {
		if err := ffi.ValidateHeaderClusterID(vals[0]); err != nil {
			return "", requestHeaderClusterID + " header: " + err.Error(), false
		}
		return vals[0], "", true
	}
	return "", "", true
}

// headerWriter sets the threshold headers right before the status line goes out, once the
// processors have seen the batch (and possibly reported the payload's cluster).
type headerWriter struct {
	http.ResponseWriter
	ext  *thresholdExtension
	st   *requestctx.State
	done bool
}

func (w *headerWriter) setHeaders() {
	if w.done {
		return
	}
	w.done = true
	h := w.ResponseWriter.Header()
	h.Del(headerThreshold)
	h.Del(headerQuorumMet)
	cluster := w.st.HeaderCluster()
	if cluster == "" {
		return
	}
	ph, ok, err := w.ext.h.PushHeaders(cluster)
	if err != nil || !ok {
		return
	}
	h.Set(headerThreshold, ph.Threshold)
	h.Set(headerQuorumMet, ph.QuorumMet)
}

func (w *headerWriter) WriteHeader(code int) {
	w.setHeaders()
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	w.setHeaders()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *headerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeStatusError answers like the OTLP receiver and ingero-fleet: a google.rpc.Status body,
// protobuf for protobuf requests, JSON otherwise.
func writeStatusError(w http.ResponseWriter, contentType string, httpStatus int, msg string) {
	st := &status.Status{Code: int32(codes.InvalidArgument), Message: msg}
	mt, _, _ := mime.ParseMediaType(contentType)
	if strings.EqualFold(mt, "application/x-protobuf") {
		if b, err := proto.Marshal(st); err == nil {
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(httpStatus)
			_, _ = w.Write(b)
			return
		}
	}
	b, _ := json.Marshal(map[string]any{"code": st.Code, "message": st.Message})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(b)
}

// GetGRPCServerOptions adds a unary interceptor to the OTLP/gRPC receiver: on
// MetricsService/Export the cluster comes from `cluster_id`, else `ingero.cluster.id`
// metadata (malformed: InvalidArgument), and a successful response carries
// `ingero-threshold` / `ingero-quorum-met` metadata (both or neither).
func (e *thresholdExtension) GetGRPCServerOptions(_ context.Context) ([]grpc.ServerOption, error) {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(e.unaryInterceptor)}, nil
}

func (e *thresholdExtension) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info == nil || info.FullMethod != metricsExportMethod {
		return handler(ctx, req)
	}
	cluster := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, key := range []string{paramClusterID, requestHeaderClusterID} {
			vals := md.Get(key)
			if len(vals) == 0 {
				continue
			}
			if err := ffi.ValidateHeaderClusterID(vals[0]); err != nil {
				return nil, grpcstatus.Error(codes.InvalidArgument, key+" metadata: "+err.Error())
			}
			cluster = vals[0]
			break
		}
	}
	st := &requestctx.State{Cluster: cluster}
	resp, err := handler(requestctx.With(ctx, st), req)
	if err != nil {
		return resp, err
	}
	if c := st.HeaderCluster(); c != "" {
		if ph, ok, herr := e.h.PushHeaders(c); herr == nil && ok {
			_ = grpc.SetHeader(ctx, metadata.Pairs(grpcMetaThreshold, ph.Threshold, grpcMetaQuorumMet, ph.QuorumMet))
		}
	}
	return resp, nil
}
