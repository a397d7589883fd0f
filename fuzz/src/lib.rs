//! Fuzz targets of ingero-fleet, as plain functions of the input bytes.
//!
//! Each `fuzz_*` binary hands AFL++'s inputs to one of these functions; `fuzz-tool replay`
//! runs saved inputs through the same functions outside AFL (how a crash is reproduced and
//! how the seed corpora are checked). A target panics (so AFL records a crash) when the
//! code under test panics or when one of the invariants in its doc does not hold.

pub mod config;
pub mod ffi;
pub mod otlp;
pub mod seeds;

/// A target: runs one input, panics on a failed invariant.
pub type Target = fn(&[u8]);

/// The targets, by the name `fuzz-tool` and the scripts use.
pub const TARGETS: [(&str, Target); 4] = [
    ("otlp_proto", otlp::otlp_proto),
    ("otlp_json", otlp::otlp_json),
    ("config", config::config),
    ("ffi", ffi::ffi),
];

/// A target by name.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
