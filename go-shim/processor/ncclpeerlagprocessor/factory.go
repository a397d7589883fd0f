// Package ncclpeerlagprocessor is the `nccl_peer_lag` processor of Ingero Fleet for Go
// OpenTelemetry Collectors: per-rank NCCL peer lag, emitted on tick. The processing is the
// Rust component itself, linked from libingero_fleet through cgo (see go-shim/README.md).
package ncclpeerlagprocessor

import (
	"go.opentelemetry.io/collector/processor"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/shimprocessor"
)

// NewFactory returns the `nccl_peer_lag` processor factory.
func NewFactory() processor.Factory {
	return shimprocessor.NewFactory(Type, Stability)
}
