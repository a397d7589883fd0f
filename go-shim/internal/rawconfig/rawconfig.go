// Package rawconfig is the config struct of every shim component: it keeps the user's
// config subtree as it was written and hands it, as JSON, to the Rust validator and
// constructor, so the Go collector accepts and rejects exactly what ingero-fleet does.
package rawconfig

import (
	"encoding/json"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/confmap"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/ffi"
)

// Config is a component's config subtree, validated by Rust.
type Config struct {
	componentType string
	raw           map[string]any
}

var (
	_ confmap.Unmarshaler = (*Config)(nil)
	_ confmap.Marshaler   = (*Config)(nil)
)

// New is the default config of a component type (all Rust defaults).
func New(componentType string) *Config {
	return &Config{componentType: componentType}
}

// FromMap is a config with the given subtree (tests).
func FromMap(componentType string, raw map[string]any) *Config {
	return &Config{componentType: componentType, raw: raw}
}

// Unmarshal keeps the subtree as written (after the collector's env expansion).
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	if conf == nil {
		c.raw = nil
		return nil
	}
	c.raw = conf.ToStringMap()
	return nil
}

// Marshal writes the subtree back (print-config). A value receiver, so the collector's
// encoder finds it on the dereferenced struct.
func (c Config) Marshal(conf *confmap.Conf) error {
	if len(c.raw) == 0 {
		return nil
	}
	return conf.Marshal(c.raw)
}

// JSON is the subtree as JSON bytes; `null` for all defaults.
func (c *Config) JSON() ([]byte, error) {
	if len(c.raw) == 0 {
		return []byte("null"), nil
	}
	b, err := json.Marshal(c.raw)
	if err != nil {
		return nil, fmt.Errorf("config is not representable as JSON: %w", err)
	}
	return b, nil
}

// Validate runs the Rust validator. Every problem is returned, one error each, with its key
// path relative to the component (the collector prefixes the component id).
func (c *Config) Validate() error {
	b, err := c.JSON()
	if err != nil {
		return err
	}
	if err := ffi.ValidateConfig(c.componentType, b); err != nil {
		var fe *ffi.Error
		if errors.As(err, &fe) && fe.Code == ffi.CodeInvalidConfig {
			return errors.Join(fe.Lines()...)
		}
		return err
	}
	return nil
}
