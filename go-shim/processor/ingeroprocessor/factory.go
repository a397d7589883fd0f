// Package ingeroprocessor is the `ingero` processor of Ingero Fleet for Go OpenTelemetry
// Collectors: the peer-relative MAD straggler threshold per cluster, published into the
// ingero_threshold extension. The processing is the Rust component itself, linked from
// libingero_fleet through cgo (see go-shim/README.md).
package ingeroprocessor

import (
	"go.opentelemetry.io/collector/processor"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/shimprocessor"
)

// NewFactory returns the `ingero` processor factory.
func NewFactory() processor.Factory {
	return shimprocessor.NewFactory(Type, Stability)
}
