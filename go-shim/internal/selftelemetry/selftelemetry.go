// Package selftelemetry publishes a Rust component's self-metrics (Prometheus-named
// families, as JSON from the C ABI) through the collector's own MeterProvider, so they
// appear on the collector's telemetry endpoint (`service.telemetry.metrics`) next to the
// otelcol_* metrics.
package selftelemetry

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Family is one metric family as the C ABI reports it.
type Family struct {
	Name    string   `json:"name"`
	Help    string   `json:"help"`
	Type    string   `json:"type"`
	Samples []Sample `json:"samples"`
}

// Sample is one labelled value.
type Sample struct {
	Labels [][2]string `json:"labels"`
	Value  float64     `json:"value"`
}

// Parse decodes the C ABI's telemetry JSON.
func Parse(b []byte) ([]Family, error) {
	var fams []Family
	if err := json.Unmarshal(b, &fams); err != nil {
		return nil, fmt.Errorf("telemetry JSON: %w", err)
	}
	return fams, nil
}

// Register creates one observable instrument per family `source` reports now (gauges as
// gauges, counters as monotonic counters) and observes every sample on each collection.
// The returned function unregisters the callback.
func Register(mp metric.MeterProvider, scope string, source func() ([]byte, error)) (func() error, error) {
	b, err := source()
	if err != nil {
		return nil, err
	}
	fams, err := Parse(b)
	if err != nil {
		return nil, err
	}
	meter := mp.Meter(scope)
	gauges := map[string]metric.Float64ObservableGauge{}
	counters := map[string]metric.Float64ObservableCounter{}
	var insts []metric.Observable
	for _, f := range fams {
		switch f.Type {
		case "counter":
			c, err := meter.Float64ObservableCounter(f.Name, metric.WithDescription(f.Help))
			if err != nil {
				return nil, err
			}
			counters[f.Name] = c
			insts = append(insts, c)
		default:
			g, err := meter.Float64ObservableGauge(f.Name, metric.WithDescription(f.Help))
			if err != nil {
				return nil, err
			}
			gauges[f.Name] = g
			insts = append(insts, g)
		}
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		b, err := source()
		if err != nil {
			return err
		}
		fams, err := Parse(b)
		if err != nil {
			return err
		}
		for _, f := range fams {
			for _, s := range f.Samples {
				attrs := make([]attribute.KeyValue, 0, len(s.Labels))
				for _, l := range s.Labels {
					attrs = append(attrs, attribute.String(l[0], l[1]))
				}
				opt := metric.WithAttributes(attrs...)
				if c, ok := counters[f.Name]; ok {
					o.ObserveFloat64(c, s.Value, opt)
				} else if g, ok := gauges[f.Name]; ok {
					o.ObserveFloat64(g, s.Value, opt)
				}
			}
		}
		return nil
	}, insts...)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}
