//go:build !cgo

// Package ffi needs cgo: the Ingero components are a Rust static library linked through cgo.
//
// This file exists so that a build with cgo disabled fails with a message instead of a
// puzzling "undefined" error somewhere else. The OpenTelemetry Collector Builder (OCB)
// builds with CGO_ENABLED=0 unless the manifest says otherwise; add
//
//	dist:
//	  cgo_enabled: true
//
// to builder-config.yaml (or build with CGO_ENABLED=1 and a C toolchain).
package ffi

// The next line deliberately does not compile: the identifier is the instruction.
var _ = ingero_fleet_go_shim_requires_cgo__set_dist_cgo_enabled_true_in_the_OCB_builder_config_or_build_with_CGO_ENABLED_1
