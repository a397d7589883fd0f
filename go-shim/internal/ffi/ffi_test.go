//go:build cgo

package ffi

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/testagent"
)

func TestABIAndVersion(t *testing.T) {
	if err := CheckABI(); err != nil {
		t.Fatal(err)
	}
	if Version() == "" {
		t.Fatal("empty library version")
	}
}

func TestValidateConfigReportsEveryKeyPath(t *testing.T) {
	err := ValidateConfig("ingero", []byte(`{"threshold": {"k": -1, "ema_alpha": 5}}`))
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != CodeInvalidConfig {
		t.Fatalf("want invalid config, got %v", err)
	}
	lines := fe.Lines()
	if len(lines) != 2 || !strings.HasPrefix(lines[0].Error(), "threshold.k: ") ||
		!strings.HasPrefix(lines[1].Error(), "threshold.ema_alpha: ") {
		t.Fatalf("unexpected errors: %q", fe.Message)
	}
	for _, typ := range []string{"ingero", "provider_lookup", "nccl_peer_lag", "ingero_threshold"} {
		if err := ValidateConfig(typ, []byte("null")); err != nil {
			t.Errorf("%s defaults: %v", typ, err)
		}
	}
	if err := ValidateConfig("batch", nil); !isCode(err, CodeUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := NewProcessor("ingero_threshold", nil); !isCode(err, CodeWrongKind) {
		t.Fatalf("wrong kind: %v", err)
	}
}

func isCode(err error, code uint32) bool {
	var fe *Error
	return errors.As(err, &fe) && fe.Code == code
}

func mustMarshal(t testing.TB, md pmetric.Metrics) []byte {
	t.Helper()
	b, err := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProcessTickAndThresholdThroughTheExtension(t *testing.T) {
	ext, err := NewExtension("ingero_threshold", []byte("agent_endpoint: 127.0.0.1:0\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	p, err := NewProcessor("ingero", []byte("push_interval: 2s\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if d, _ := p.TickInterval(); d != 2*time.Second {
		t.Fatalf("tick interval %v", d)
	}
	if err := ext.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start([]*Extension{ext}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ext.PushHeaders("alpha"); ok || err != nil {
		t.Fatalf("cold start must have no headers (%v)", err)
	}
	batch := mustMarshal(t, testagent.Cluster("alpha"))
	now := time.Unix(0, int64(testagent.T0))
	for i := 0; i < 3; i++ {
		res, err := p.Process(batch, "alpha", now)
		if err != nil || res.Modified || res.Data != nil || res.RejectedPoints != 0 {
			t.Fatalf("process: %+v %v", res, err)
		}
		out, err := p.Tick(now.Add(time.Second))
		if err != nil || len(out) == 0 {
			t.Fatalf("tick: %d bytes, %v", len(out), err)
		}
		md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(out)
		if err != nil || md.MetricCount() == 0 {
			t.Fatalf("tick output: %v", err)
		}
		now = now.Add(2 * time.Second)
	}
	h, ok, err := ext.PushHeaders("alpha")
	if err != nil || !ok || h.QuorumMet != "true" {
		t.Fatalf("headers %+v %v %v", h, ok, err)
	}
	th, q, ok, err := ext.Threshold("alpha")
	if err != nil || !ok || !q || th <= 0.6 || th >= 0.94 {
		t.Fatalf("threshold %v %v %v %v", th, q, ok, err)
	}
	resp, err := ext.RouteAgent("GET", "/api/v1/threshold", "cluster_id=alpha")
	if err != nil || resp.Status != 200 || resp.ContentType != "application/json" ||
		string(resp.Body) != `{"threshold":`+h.Threshold+`,"quorum_met":true}` {
		t.Fatalf("GET: %+v %s %v", resp, resp.Body, err)
	}
	resp, _ = ext.RouteAgent("POST", "/api/v1/threshold", "cluster_id=alpha")
	if resp.Status != 405 || !hasHeader(resp, "Allow", "GET") {
		t.Fatalf("POST: %+v", resp)
	}
	resp, _ = ext.RouteAdmin("GET", "/api/v1/diagnostics", "cluster_id=alpha")
	if resp.Status != 200 || !strings.Contains(string(resp.Body), "alpha-node-07") {
		t.Fatalf("diagnostics: %d %s", resp.Status, resp.Body)
	}
	if _, err := p.Process([]byte{0x0a, 0xff, 0xff}, "", now); !isCode(err, CodeDecode) {
		t.Fatalf("garbage: %v", err)
	}
	tj, err := p.TelemetryJSON()
	if err != nil || !strings.Contains(string(tj), `"ingero_fleet_threshold"`) {
		t.Fatalf("telemetry: %v", err)
	}
	if _, err := ext.TelemetryJSON(); err != nil {
		t.Fatal(err)
	}
	if d, err := p.DiagnosticsJSON(); err != nil || !strings.Contains(string(d), "alpha") {
		t.Fatalf("diagnostics json: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := p.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if err := ext.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	p.Close()
	if _, err := p.Tick(now); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed handle: %v", err)
	}
}

func hasHeader(r Response, name, value string) bool {
	for _, kv := range r.Headers {
		if kv[0] == name && kv[1] == value {
			return true
		}
	}
	return false
}

func TestProviderLookupReturnsTheEnrichedBatch(t *testing.T) {
	p, err := NewProcessor("provider_lookup", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	in := testagent.Push("c", "n1", 0.9)
	in.ResourceMetrics().At(0).Resource().Attributes().PutStr("ingero.provider", "aws")
	res, err := p.Process(mustMarshal(t, in), "c", time.Unix(0, int64(testagent.T0)))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Modified {
		t.Skip("provider_lookup left this batch unchanged")
	}
	out, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(res.Data)
	if err != nil {
		t.Fatal(err)
	}
	if out.DataPointCount() != in.DataPointCount() {
		t.Fatalf("points %d -> %d", in.DataPointCount(), out.DataPointCount())
	}
	// Processing the output again changes nothing more.
	again, err := p.Process(res.Data, "c", time.Unix(0, int64(testagent.T0)))
	if err != nil || again.Modified {
		t.Fatalf("second pass modified=%v err=%v", again.Modified, err)
	}
}

func TestClusterHelpersFollowTheRustHost(t *testing.T) {
	if c, err := QueryCluster("x=1&cluster_id=prod%2Da"); err != nil || c != "prod-a" {
		t.Fatalf("%q %v", c, err)
	}
	if c, err := QueryCluster(""); err != nil || c != "" {
		t.Fatalf("%q %v", c, err)
	}
	if _, err := QueryCluster("cluster_id=a&cluster_id=b"); err == nil || err.Error() != "cluster_id: query parameter cluster_id given more than once" {
		t.Fatalf("repeated: %v", err)
	}
	if err := ValidateHeaderClusterID("bad\r\nid"); err == nil {
		t.Fatal("CR/LF accepted")
	}
	if !ValidateClusterID("prod") || ValidateClusterID("") {
		t.Fatal("ValidateClusterID")
	}
}

func TestConcurrentProcessIsSafe(t *testing.T) {
	p, err := NewProcessor("ingero", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			b := mustMarshal(t, testagent.Cluster("c"+string(rune('a'+g))))
			for i := 0; i < 50; i++ {
				if _, err := p.Process(b, "", time.Now()); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// A build with cgo off must fail and tell the user what to set.
func TestNoCgoBuildFailsWithInstructions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goBin, "build", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("a CGO_ENABLED=0 build succeeded")
	}
	if !strings.Contains(string(out), "set_dist_cgo_enabled_true") {
		t.Fatalf("build error does not tell the user to set dist.cgo_enabled: true:\n%s", out)
	}
}

// Process is written out without the closures of `with`/`call`: it still reports a closed
// handle, the library's code and detailed message, and a pass-through result.
func TestProcessReportsErrorsAsTheOtherCalls(t *testing.T) {
	p, err := NewProcessor("ingero", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Process(nil, "", time.Now())
	if err != nil || res.Modified || res.Data != nil || res.RejectedPoints != 0 {
		t.Fatalf("empty batch: %+v %v", res, err)
	}
	_, err = p.Process([]byte{0x0a, 0xff, 0xff}, "", time.Now())
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeDecode || !strings.HasPrefix(e.Message, "data: ") {
		t.Fatalf("garbage: %#v", err)
	}
	// The thread's last error does not leak into the next call.
	if _, err := p.Process(nil, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := p.Process(nil, "", time.Now()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}
