//! `ingero-fleet`: a Rust-native OpenTelemetry collector running the Ingero components.
//!
//! The command line, config loading and the service live in the `collector-host` library
//! (`collector_host::cli`); this binary adds the allocator and runs Fleet's distribution
//! (components and embedded default, from this crate's library).

use std::process::ExitCode;

use collector_host::cli;

// mimalloc instead of glibc malloc: on the push path (a request body, a decoded OTLP
// message and its strings per push) glibc's malloc/free were a quarter of server CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The only libm function the binary calls is `pow` (tokio's scheduler weighs its poll-time
/// average with `f64::powf`). Defining it here, from the pure-Rust `libm` crate, lets the
/// linker leave libm.so out (`--as-needed`): 0.3-0.7 MB less idle RSS in the measured runs,
/// since the loader maps and relocates a whole library for one function. Only this binary
/// defines it. Code that calls another libm function brings the library back (harmless;
/// `ldd target/release/ingero-fleet` shows it).
#[unsafe(no_mangle)]
extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

fn main() -> ExitCode {
    cli::main(&ingero_fleet_dist::distribution())
}
