// Package providerlookupprocessor is the `provider_lookup` processor of Ingero Fleet for
// Go OpenTelemetry Collectors: provider lookup, GPU rate tables and straggler cost. The
// processing is the Rust component itself, linked from libingero_fleet through cgo (see
// go-shim/README.md).
package providerlookupprocessor

import (
	"go.opentelemetry.io/collector/processor"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/shimprocessor"
)

// NewFactory returns the `provider_lookup` processor factory.
func NewFactory() processor.Factory {
	return shimprocessor.NewFactory(Type, Stability)
}
