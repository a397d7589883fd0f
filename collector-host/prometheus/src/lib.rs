//! `fleet-prometheus`: the Prometheus exporter of `ingero-fleet` (component type
//! [`TYPE`] = `prometheus`). Work in progress: configuration and OTLP -> Prometheus
//! naming rules so far (see [`naming`]).

pub mod config;
pub mod naming;
pub mod text;
pub mod value;

pub use config::{PrometheusExporterConfig, ResourceToTelemetry, TranslationStrategy};
pub use text::CONTENT_TYPE;

/// The component type name in otelcol configs (`exporters: prometheus:`).
pub const TYPE: &str = "prometheus";
