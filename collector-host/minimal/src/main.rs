//! A collector assembled from the `collector-host` library with another component set than
//! `ingero-fleet`: the host's built-ins only (the `otlp` receiver; the `debug`, `otlp`,
//! `otlphttp` and `prometheus` exporters; `ingero_auth`, `health_check`), no processor. Its
//! embedded default prints every metric, trace and log it receives on loopback.

use std::process::ExitCode;

use collector_host::cli::{self, Distribution};
use collector_host::registry::Components;

const DEFAULT_CONFIG: &str = r#"
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:4317}
      http: {endpoint: 127.0.0.1:4318}
exporters:
  debug: {verbosity: basic}
service:
  pipelines:
    metrics: {receivers: [otlp], exporters: [debug]}
    traces: {receivers: [otlp], exporters: [debug]}
    logs: {receivers: [otlp], exporters: [debug]}
"#;

fn main() -> ExitCode {
    cli::main(&Distribution {
        command: "otlp-debug-collector",
        version: env!("CARGO_PKG_VERSION"),
        about: "An OTLP collector that prints what it receives",
        long_about: "Receives OTLP over HTTP and gRPC and writes a summary of every batch to \
                     stderr (the debug exporter). Built from the collector-host library.",
        description: "OTLP receiver and debug exporter, built from the collector-host library",
        default_config: DEFAULT_CONFIG,
        components: Components::host(),
    })
}
