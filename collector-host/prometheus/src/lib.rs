//! `fleet-prometheus`: the Prometheus exporter of `ingero-fleet` (component type
//! [`TYPE`] = `prometheus`).
//!
//! A pure library: no sockets, no threads, no clock. The host
//! - calls [`PrometheusExporter::consume`] with every metrics batch the pipeline delivers
//!   (concurrently from many request tasks),
//! - calls [`PrometheusExporter::expire`] on a timer,
//! - serves `GET /metrics` on the configured `endpoint` by calling
//!   [`PrometheusExporter::render`] with its components' self-metrics as `extra`, and
//!   answers with [`CONTENT_TYPE`].
//!
//! # Translation
//! As the OpenTelemetry contrib `prometheusexporter` with translation strategy
//! `UnderscoreEscapingWithSuffixes` (see [`naming`] for the name rules):
//! - gauge -> gauge; monotonic sum -> counter (`_total`); non-monotonic sum -> gauge;
//! - delta sums are accumulated into a cumulative value per series (the sum of every delta
//!   received while the series is live; a series that expired starts again from the next
//!   delta). Delta histograms with the same bounds are accumulated the same way;
//! - histogram -> `_bucket{le}` (cumulative, with `+Inf`), `_sum`, `_count`;
//! - summary -> `{quantile}` series, `_sum`, `_count`;
//! - exponential histogram -> classic histogram at the exponential buckets' own
//!   boundaries (the text format has no native histograms; see [`exp_histogram`]);
//! - data-point attributes become labels; with `resource_to_telemetry_conversion` (on by
//!   default here, see [`config::ResourceToTelemetry`]) so do all resource attributes;
//!   `job`/`instance` come from `service.namespace/service.name` and
//!   `service.instance.id`; `target_info` carries the resource attributes of resources
//!   that have a `job` or `instance` (contrib behaviour; the agent's resource has neither,
//!   so agent data produces no `target_info`).
//! - Deviations from contrib, on purpose: no `otel_scope_*` labels (Fleet's scope is the
//!   constant `ingero.health`, two more labels on every series for nothing); an empty
//!   description gets a generated HELP text (`OTLP metric <name>, unit <unit>`) instead of
//!   an empty one; labels are written sorted by name (client_golang does the same).
//!
//! # Memory and speed
//! Strings and label sets are interned ([`intern`]); a series is 24 bytes in an
//! exact-size slice per resource label set ([`store`]), so a node's labels are stored once.
//! Expiry removes series; when enough was removed, a compaction rebuilds the intern tables
//! without the entries no live series uses. Label sets are built in [`labels`]; translation
//! ([`translate`]) runs under a shared lock and memoises data-point attribute lists, so a
//! known agent's push costs a few lookups and one shard mutex. Measured numbers are in the
//! README.

#![forbid(unsafe_code)]

pub mod cluster_usage;
pub mod config;
pub mod exp_histogram;
pub mod exporter;
pub mod intern;
pub mod labels;
pub mod metrics;
pub mod naming;
pub mod render;
pub mod store;
pub mod text;
pub mod translate;
pub mod value;

pub use config::{PrometheusExporterConfig, ResourceToTelemetry, TranslationStrategy};
pub use exporter::{ConsumeStats, PrometheusExporter};
pub use store::DropReason;
pub use text::CONTENT_TYPE;

/// The component type name in otelcol configs (`exporters: prometheus:`).
pub const TYPE: &str = "prometheus";

/// Stability of the metrics signal.
pub const STABILITY: component::Stability = component::Stability::Alpha;
