package shimprocessor

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/rawconfig"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/requestctx"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/testagent"
)

// The shim's data path per batch of agent pushes (marshal, one cgo call, unmarshal when Rust
// changed the batch) against pmetric marshalling alone.
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/shimprocessor/

func batchOf(nodes int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for i := 0; i < nodes; i++ {
		testagent.AppendPush(md, "bench", fmt.Sprintf("bench-node-%04d", i), testagent.Scores[i%len(testagent.Scores)])
	}
	return md
}

func benchCore(b *testing.B, typ string) *core {
	b.Helper()
	set := processortest.NewNopSettings(component.MustNewType(typ))
	set.ID = component.MustNewIDWithName(typ, "bench")
	c, err := acquire(set, rawconfig.New(typ), consumertest.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	if err := c.start(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.shutdown(context.Background()) })
	return c
}

func perPoint(b *testing.B, md pmetric.Metrics) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(md.DataPointCount()), "ns/point")
}

func BenchmarkDataPath(b *testing.B) {
	for _, nodes := range []int{1, 8, 64} {
		md := batchOf(nodes)
		b.Run(fmt.Sprintf("pushes=%d/marshal_only", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := marshaler.MarshalMetrics(md); err != nil {
					b.Fatal(err)
				}
			}
			perPoint(b, md)
		})
		b.Run(fmt.Sprintf("pushes=%d/marshal_unmarshal", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				buf, err := marshaler.MarshalMetrics(md)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := unmarshaler.UnmarshalMetrics(buf); err != nil {
					b.Fatal(err)
				}
			}
			perPoint(b, md)
		})
		for _, typ := range []string{"ingero", "provider_lookup"} {
			c := benchCore(b, typ)
			ctx := requestctx.With(context.Background(), &requestctx.State{Cluster: "bench"})
			b.Run(fmt.Sprintf("pushes=%d/shim_%s", nodes, typ), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if _, err := c.processMetrics(ctx, md); err != nil {
						b.Fatal(err)
					}
				}
				perPoint(b, md)
			})
			if c.Errors() != 0 {
				b.Fatalf("%s: %d data-path errors", typ, c.Errors())
			}
		}
	}
}
