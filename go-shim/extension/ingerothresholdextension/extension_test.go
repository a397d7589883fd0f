package ingerothresholdextension_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/extension/ingerothresholdextension"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/shimprocessor"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/testagent"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/processor/ingeroprocessor"
)

type host struct {
	component.Host
	exts map[component.ID]component.Component
}

func (h host) GetExtensions() map[component.ID]component.Component { return h.exts }

// fleet is an ingero_threshold extension plus an ingero processor started with it, and a
// fake OTLP receiver handler that does what otlpreceiver does: decode, then hand the batch
// to the pipeline with the request's context.
type fleet struct {
	ext   extension.Extension
	proc  processor.Metrics
	sink  *consumertest.MetricsSink
	http  http.Handler
	tick  func(time.Time)
	batch pmetric.Metrics
}

func newFleet(t *testing.T, procID string) *fleet {
	t.Helper()
	ef := ingerothresholdextension.NewFactory()
	ecfg := ef.CreateDefaultConfig()
	if err := ecfg.(confmap.Unmarshaler).Unmarshal(confmap.NewFromStringMap(map[string]any{
		"agent_endpoint": "127.0.0.1:0", "admin_endpoint": "127.0.0.1:0",
	})); err != nil {
		t.Fatal(err)
	}
	eset := extensiontest.NewNopSettings(ef.Type())
	ext, err := ef.Create(context.Background(), eset, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	h := host{Host: componenttest.NewNopHost(), exts: map[component.ID]component.Component{eset.ID: ext}}
	if err := ext.Start(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Shutdown(context.Background()) })

	pf := ingeroprocessor.NewFactory()
	pset := processortest.NewNopSettings(pf.Type())
	pset.ID = component.MustNewIDWithName("ingero", procID)
	sink := new(consumertest.MetricsSink)
	proc, err := pf.CreateMetrics(context.Background(), pset, pf.CreateDefaultConfig(), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Shutdown(context.Background()) })

	f := &fleet{ext: ext, proc: proc, sink: sink, tick: func(now time.Time) { shimprocessor.TickNow(pset.ID, now) }}
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(body)
		if err != nil {
			w.WriteHeader(400)
			return
		}
		if err := proc.ConsumeMetrics(r.Context(), md); err != nil {
			w.WriteHeader(500)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(200)
	})
	wrap, err := ext.(extensionmiddleware.HTTPServer).GetHTTPHandler(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f.http, err = wrap(context.Background(), receiver)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fleet) push(t *testing.T, target string, md pmetric.Metrics, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	b, err := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.http.ServeHTTP(rec, req)
	return rec
}

func headers(r *httptest.ResponseRecorder) (string, string, bool) {
	t, q := r.Header().Get("X-Ingero-Threshold"), r.Header().Get("X-Ingero-Quorum-Met")
	if (t == "") != (q == "") {
		panic("exactly one threshold header")
	}
	return t, q, t != ""
}

// warm pushes every alpha node twice around ticks until a threshold exists.
func (f *fleet) warm(t *testing.T) {
	now := time.Unix(0, int64(testagent.T0))
	for i := 0; i < 3; i++ {
		rec := f.push(t, "/v1/metrics?cluster_id=alpha", testagent.Cluster("alpha"), nil)
		if rec.Code != 200 {
			t.Fatalf("push: %d", rec.Code)
		}
		f.tick(now)
		now = now.Add(time.Second)
	}
}

func TestMiddlewareSetsBothHeadersOrNeither(t *testing.T) {
	f := newFleet(t, "mw")
	rec := f.push(t, "/v1/metrics?cluster_id=alpha", testagent.Push("alpha", "alpha-node-00", 0.95), nil)
	if _, _, ok := headers(rec); ok || rec.Code != 200 {
		t.Fatalf("cold start sent headers (code %d)", rec.Code)
	}
	f.warm(t)
	rec = f.push(t, "/v1/metrics?cluster_id=alpha", testagent.Push("alpha", "alpha-node-00", 0.95), nil)
	th, q, ok := headers(rec)
	if !ok || q != "true" {
		t.Fatalf("no headers after quorum: %v", rec.Header())
	}
	// The GET endpoint answers the same digits.
	getRec := httptest.NewRecorder()
	agentHandler(t, f).ServeHTTP(getRec, httptest.NewRequest("GET", "/api/v1/threshold?cluster_id=alpha", nil))
	if getRec.Body.String() != `{"threshold":`+th+`,"quorum_met":true}` || getRec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %d %q", getRec.Code, getRec.Body.String())
	}
	// The straggler gauges the tick emitted went to the next consumer.
	if f.sink.DataPointCount() == 0 {
		t.Fatal("nothing reached the next consumer")
	}
	var sawStraggler bool
	for _, md := range f.sink.AllMetrics() {
		rms := md.ResourceMetrics()
		for i := 0; i < rms.Len(); i++ {
			ms := rms.At(i).ScopeMetrics().At(0).Metrics()
			for j := 0; j < ms.Len(); j++ {
				sawStraggler = sawStraggler || ms.At(j).Name() == "ingero.fleet.node.straggler"
			}
		}
	}
	if !sawStraggler {
		t.Fatal("tick output (ingero.fleet.node.straggler) not forwarded")
	}

	// Without a query parameter: the ingero.cluster.id header, else the payload's resource.
	rec = f.push(t, "/v1/metrics", testagent.Push("alpha", "alpha-node-01", 0.96), map[string]string{"ingero.cluster.id": "alpha"})
	if t2, _, ok := headers(rec); !ok || t2 != th {
		t.Fatalf("header cluster: %v", rec.Header())
	}
	rec = f.push(t, "/v1/metrics", testagent.Push("alpha", "alpha-node-02", 0.94), nil)
	if t2, _, ok := headers(rec); !ok || t2 != th {
		t.Fatalf("payload cluster: %v", rec.Header())
	}
	// An unknown cluster gets neither; other paths are untouched.
	rec = f.push(t, "/v1/metrics?cluster_id=nobody", testagent.Push("nobody", "n", 0.9), nil)
	if _, _, ok := headers(rec); ok {
		t.Fatal("headers for an unknown cluster")
	}
	rec = f.push(t, "/v1/traces?cluster_id=alpha", pmetric.NewMetrics(), nil)
	if _, _, ok := headers(rec); ok {
		t.Fatal("headers on a traces response")
	}
}

func TestMiddlewareRefusesMalformedClusterIDs(t *testing.T) {
	f := newFleet(t, "bad")
	before := f.sink.DataPointCount()
	for target, want := range map[string]string{
		"/v1/metrics?cluster_id=":                   "cluster_id: cluster_id is empty",
		"/v1/metrics?cluster_id=a&cluster_id=b":     "cluster_id: query parameter cluster_id given more than once",
		"/v1/metrics?cluster_id=a%0d%0aX-Evil:%201": "cluster_id: cluster_id contains a control character or line break",
	} {
		b, _ := (&pmetric.ProtoMarshaler{}).MarshalMetrics(testagent.Push("a", "n", 0.9))
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		f.http.ServeHTTP(rec, req)
		var st struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if rec.Code != 400 || json.Unmarshal(rec.Body.Bytes(), &st) != nil || st.Code != 3 || st.Message != want {
			t.Errorf("%s: %d %s", target, rec.Code, rec.Body.String())
		}
	}
	rec := f.push(t, "/v1/metrics", testagent.Push("a", "n", 0.9), map[string]string{"ingero.cluster.id": "x\x7fy"})
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/x-protobuf" {
		t.Errorf("bad header cluster: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	if f.sink.DataPointCount() != before {
		t.Fatal("a refused push reached the pipeline")
	}
}

type stream struct {
	grpc.ServerTransportStream
	md metadata.MD
}

func (s *stream) Method() string {
	return "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
}
func (s *stream) SetHeader(md metadata.MD) error { s.md = metadata.Join(s.md, md); return nil }
func (s *stream) SendHeader(md metadata.MD) error {
	s.md = metadata.Join(s.md, md)
	return nil
}

func TestGRPCInterceptorSetsMetadata(t *testing.T) {
	f := newFleet(t, "grpc")
	f.warm(t)
	opts, err := f.ext.(extensionmiddleware.GRPCServer).GetGRPCServerOptions(context.Background())
	if err != nil || len(opts) != 1 {
		t.Fatalf("%v %d", err, len(opts))
	}
	srv := grpc.NewServer(opts...)
	defer srv.Stop()
	// Exercise the interceptor the way grpc-go calls it, through the exported method.
	call := func(md metadata.MD, batch pmetric.Metrics) (metadata.MD, error) {
		st := &stream{}
		ctx := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(context.Background(), md), st)
		_, err := ingerothresholdextension.UnaryInterceptorForTest(f.ext)(ctx, nil,
			&grpc.UnaryServerInfo{FullMethod: "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"},
			func(ctx context.Context, _ any) (any, error) { return nil, f.proc.ConsumeMetrics(ctx, batch) })
		return st.md, err
	}
	md, err := call(metadata.Pairs("cluster_id", "alpha"), testagent.Push("alpha", "alpha-node-03", 0.95))
	if err != nil || len(md.Get("ingero-threshold")) != 1 || md.Get("ingero-quorum-met")[0] != "true" {
		t.Fatalf("metadata %v err %v", md, err)
	}
	md, err = call(metadata.MD{}, testagent.Push("alpha", "alpha-node-04", 0.97))
	if err != nil || len(md.Get("ingero-threshold")) != 1 {
		t.Fatalf("payload cluster metadata %v err %v", md, err)
	}
	_, err = call(metadata.Pairs("ingero.cluster.id", ""), testagent.Push("alpha", "x", 0.9))
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ingero.cluster.id metadata: cluster_id is empty") {
		t.Fatalf("bad metadata: %v", err)
	}
}

func TestAgentListenerServesTheRustAnswers(t *testing.T) {
	f := newFleet(t, "listener")
	f.warm(t)
	addr := ingerothresholdextension.AddrForTest(f.ext, "agent")
	resp, err := http.Get("http://" + addr + "/api/v1/threshold?cluster_id=alpha")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v struct {
		Threshold float64 `json:"threshold"`
		QuorumMet bool    `json:"quorum_met"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &v) != nil || !v.QuorumMet || v.Threshold < 0.6 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", resp.Header)
	}
	admin := ingerothresholdextension.AddrForTest(f.ext, "admin")
	resp, err = http.Get("http://" + admin + "/api/v1/diagnostics?cluster_id=alpha")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "alpha-node-07") {
		t.Fatalf("admin %d %s", resp.StatusCode, body)
	}
	resp, err = http.Post("http://"+addr+"/api/v1/threshold?cluster_id=alpha", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST %d %v", resp.StatusCode, resp.Header)
	}
}

func agentHandler(t *testing.T, f *fleet) http.Handler {
	t.Helper()
	return ingerothresholdextension.AgentHandlerForTest(f.ext)
}

func TestConfigValidationErrorsCarryKeyPaths(t *testing.T) {
	f := ingerothresholdextension.NewFactory()
	cfg := f.CreateDefaultConfig()
	if err := componenttest.CheckConfigStruct(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.(interface{ Validate() error }).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := cfg.(confmap.Unmarshaler).Unmarshal(confmap.NewFromStringMap(map[string]any{
		"agent_endpoint": "nowhere", "max_clusters": 0, "admin_endpoint": "127.0.0.1:1",
	})); err != nil {
		t.Fatal(err)
	}
	err := cfg.(interface{ Validate() error }).Validate()
	if err == nil || !strings.Contains(err.Error(), "agent_endpoint: ") || !strings.Contains(err.Error(), "max_clusters: ") {
		t.Fatalf("%v", err)
	}
	if _, cerr := f.Create(context.Background(), extensiontest.NewNopSettings(f.Type()), cfg); cerr == nil {
		t.Fatal("created from an invalid config")
	}
}
