package shimprocessor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/requestctx"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/shimprocessor"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/testagent"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/processor/ingeroprocessor"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/processor/ncclpeerlagprocessor"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/processor/providerlookupprocessor"
)

func factories() []processor.Factory {
	return []processor.Factory{ingeroprocessor.NewFactory(), providerlookupprocessor.NewFactory(), ncclpeerlagprocessor.NewFactory()}
}

func TestFactoriesHaveTheRustTypeNamesAndValidDefaults(t *testing.T) {
	want := []string{"ingero", "provider_lookup", "nccl_peer_lag"}
	for i, f := range factories() {
		if f.Type().String() != want[i] {
			t.Errorf("type %q, want %q", f.Type(), want[i])
		}
		cfg := f.CreateDefaultConfig()
		if err := componenttest.CheckConfigStruct(cfg); err != nil {
			t.Errorf("%s: %v", f.Type(), err)
		}
		if err := cfg.(interface{ Validate() error }).Validate(); err != nil {
			t.Errorf("%s defaults do not validate: %v", f.Type(), err)
		}
		if f.MetricsStability() == component.StabilityLevelUndefined {
			t.Errorf("%s has no metrics stability", f.Type())
		}
	}
}

func config(t *testing.T, f processor.Factory, m map[string]any) component.Config {
	t.Helper()
	cfg := f.CreateDefaultConfig()
	if err := cfg.(confmap.Unmarshaler).Unmarshal(confmap.NewFromStringMap(m)); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestValidationErrorsAreTheRustOnesWithKeyPaths(t *testing.T) {
	f := ingeroprocessor.NewFactory()
	cfg := config(t, f, map[string]any{
		"threshold": map[string]any{"k": -1, "ema_alpha": 5},
	})
	err := cfg.(interface{ Validate() error }).Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "threshold.k: ") || !strings.HasPrefix(lines[1], "threshold.ema_alpha: ") {
		t.Fatalf("errors: %q", err)
	}
	unknown := config(t, f, map[string]any{"quorum": map[string]any{"statistical_mni": 3}})
	if err := unknown.(interface{ Validate() error }).Validate(); err == nil || !strings.HasPrefix(err.Error(), "quorum.statistical_mni: unknown field") {
		t.Fatalf("unknown key: %v", err)
	}
	nccl := config(t, ncclpeerlagprocessor.NewFactory(), map[string]any{"nonsense": true})
	if err := nccl.(interface{ Validate() error }).Validate(); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Fatalf("nccl unknown key: %v", err)
	}
	// Creating from an invalid config fails too (same validator).
	if _, err := f.CreateMetrics(context.Background(), processortest.NewNopSettings(f.Type()), cfg, consumertest.NewNop()); err == nil {
		t.Fatal("created from an invalid config")
	}
	// Print-config round trip keeps the subtree.
	good := config(t, f, map[string]any{"push_interval": "3s"})
	conf := confmap.New()
	if err := conf.Marshal(map[string]any{"processors": map[string]any{"ingero": good}}); err != nil {
		t.Fatal(err)
	}
	if conf.Get("processors::ingero::push_interval") != "3s" {
		t.Fatalf("marshalled %v", conf.ToStringMap())
	}
}

func newProc(t *testing.T, f processor.Factory, name string, cfg component.Config) (processor.Metrics, *consumertest.MetricsSink, component.ID) {
	t.Helper()
	set := processortest.NewNopSettings(f.Type())
	set.ID = component.MustNewIDWithName(f.Type().String(), name)
	sink := new(consumertest.MetricsSink)
	p, err := f.CreateMetrics(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	return p, sink, set.ID
}

func TestPassThroughProcessorsForwardTheSameBatch(t *testing.T) {
	for _, f := range []processor.Factory{ingeroprocessor.NewFactory(), ncclpeerlagprocessor.NewFactory()} {
		p, sink, _ := newProc(t, f, "pass", f.CreateDefaultConfig())
		in := testagent.Cluster("alpha")
		want := pmetric.NewMetrics()
		in.CopyTo(want)
		if err := p.ConsumeMetrics(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		got := sink.AllMetrics()
		if len(got) != 1 || got[0].DataPointCount() != want.DataPointCount() {
			t.Fatalf("%s forwarded %d batches", f.Type(), len(got))
		}
		a, _ := (&pmetric.ProtoMarshaler{}).MarshalMetrics(got[0])
		b, _ := (&pmetric.ProtoMarshaler{}).MarshalMetrics(want)
		if string(a) != string(b) {
			t.Fatalf("%s changed the batch", f.Type())
		}
		// Start/shutdown twice is safe.
		for i := 0; i < 2; i++ {
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestProviderLookupForwardsTheEnrichedBatch(t *testing.T) {
	f := providerlookupprocessor.NewFactory()
	p, sink, _ := newProc(t, f, "enrich", f.CreateDefaultConfig())
	defer func() { _ = p.Shutdown(context.Background()) }()
	in := testagent.Push("c", "n1", 0.9)
	in.ResourceMetrics().At(0).Resource().Attributes().PutStr("ingero.provider", "gcp")
	if err := p.ConsumeMetrics(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	out := sink.AllMetrics()
	if len(out) != 1 {
		t.Fatalf("%d batches", len(out))
	}
	v, ok := out[0].ResourceMetrics().At(0).Resource().Attributes().Get("ingero.provider")
	if !ok || v.Str() == "" {
		t.Fatalf("no provider on the forwarded batch")
	}
	if out[0].DataPointCount() != in.DataPointCount() {
		t.Fatal("points lost")
	}
}

func TestOneRustInstancePerIDAcrossPipelinesAndTickOutputForwarded(t *testing.T) {
	f := ingeroprocessor.NewFactory()
	cfg := f.CreateDefaultConfig()
	p1, sink1, id := newProc(t, f, "shared", cfg)
	p2, _, _ := newProc(t, f, "shared", cfg)
	// Half the nodes through each pipeline: one statistic, as ingero-fleet keeps it.
	all := testagent.Cluster("alpha")
	half1, half2 := pmetric.NewMetrics(), pmetric.NewMetrics()
	for i := 0; i < all.ResourceMetrics().Len(); i++ {
		dst := half1
		if i%2 == 1 {
			dst = half2
		}
		all.ResourceMetrics().At(i).CopyTo(dst.ResourceMetrics().AppendEmpty())
	}
	ctx := requestctx.With(context.Background(), &requestctx.State{Cluster: "alpha"})
	if err := p1.ConsumeMetrics(ctx, half1); err != nil {
		t.Fatal(err)
	}
	if err := p2.ConsumeMetrics(ctx, half2); err != nil {
		t.Fatal(err)
	}
	before := len(sink1.AllMetrics())
	if !shimprocessor.TickNow(id, time.Unix(0, int64(testagent.T0))) {
		t.Fatal("no shared instance")
	}
	after := sink1.AllMetrics()
	if len(after) != before+1 {
		t.Fatalf("tick output not forwarded (%d -> %d)", before, len(after))
	}
	// The straggler is flagged only if all 8 nodes are in one statistic.
	found := false
	rms := after[len(after)-1].ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		if v, ok := rms.At(i).Resource().Attributes().Get("ingero.node.id"); ok && v.Str() == "alpha-node-07" {
			found = true
		}
	}
	if !found {
		t.Fatal("straggler not flagged: the two pipelines did not share one statistic")
	}
	_ = p1.Shutdown(context.Background())
	_ = p2.Shutdown(context.Background())
	if shimprocessor.TickNow(id, time.Now()) {
		t.Fatal("instance survived the last shutdown")
	}
}

func TestPayloadClusterReportsTheFirstValidResource(t *testing.T) {
	md := pmetric.NewMetrics()
	md.ResourceMetrics().AppendEmpty().Resource().Attributes().PutStr("ingero.cluster.id", "bad\nid")
	testagent.AppendPush(md, "beta", "n", 0.9)
	if c := shimprocessor.PayloadCluster(md); c != "beta" {
		t.Fatalf("%q", c)
	}
	f := ingeroprocessor.NewFactory()
	p, _, _ := newProc(t, f, "payload", f.CreateDefaultConfig())
	defer func() { _ = p.Shutdown(context.Background()) }()
	st := &requestctx.State{}
	if err := p.ConsumeMetrics(requestctx.With(context.Background(), st), md); err != nil {
		t.Fatal(err)
	}
	if st.HeaderCluster() != "beta" {
		t.Fatalf("payload cluster %q", st.HeaderCluster())
	}
}
