//! The component set of a binary: the host's built-ins (the `otlp` receiver, the
//! exporters, `ingero_auth`, `health_check`) plus the factories of the component crates it
//! picks. Config validation, the `components` subcommand and the run path all read it.

use std::sync::Arc;

use component::Stability::{self, *};
pub use component::factory::{ExporterFactory, ExtensionFactory, Kind, Metadata, ProcessorFactory};
pub use component::scope::{NoScope, RequestScope};
use component::telemetry::MetricPrefix;

const fn host(
    kind: Kind,
    type_name: &'static str,
    aliases: &'static [&'static str],
    stability: [Option<Stability>; 3],
    module: &'static str,
    host_tls: bool,
    description: &'static str,
) -> Metadata {
    Metadata {
        kind,
        type_name,
        aliases,
        stability,
        module,
        singleton: false,
        host_tls,
        description,
        reads: None,
    }
}

/// The `otlp` receiver (OTLP/HTTP and OTLP/gRPC).
pub static OTLP_RECEIVER: Metadata = host(
    Kind::Receiver,
    "otlp",
    &[],
    [Some(Beta), Some(Beta), Some(Beta)],
    "collector-host/src/receiver",
    false,
    "OTLP/gRPC and OTLP/HTTP (protobuf, JSON; metrics, traces, logs); threshold headers on metric pushes",
);
pub static PROMETHEUS_EXPORTER: Metadata = host(
    Kind::Exporter,
    "prometheus",
    &[],
    [Some(Beta), None, None],
    "collector-host/prometheus",
    true,
    "Prometheus text exposition of the pipeline's data",
);
pub static DEBUG_EXPORTER: Metadata = host(
    Kind::Exporter,
    "debug",
    &[],
    [Some(Development), Some(Development), Some(Development)],
    "collector-host/src/exporter/debug.rs",
    false,
    "print batches to stderr",
);
pub static OTLP_EXPORTER: Metadata = host(
    Kind::Exporter,
    "otlp",
    &["otlp_grpc"],
    [Some(Beta), Some(Beta), Some(Beta)],
    "collector-host/src/exporter/otlp.rs",
    false,
    "forward to another collector (queue, retry)",
);
pub static OTLPHTTP_EXPORTER: Metadata = host(
    Kind::Exporter,
    "otlphttp",
    &["otlp_http"],
    [Some(Beta), Some(Beta), Some(Beta)],
    "collector-host/src/exporter/otlp.rs",
    false,
    "forward to another collector (queue, retry)",
);
pub static AUTH_EXTENSION: Metadata = host(
    Kind::Extension,
    crate::auth::TYPE,
    &[],
    [Some(Alpha), None, None],
    "collector-host/src/auth",
    false,
    "bearer tokens scoped to clusters, rotation, audit log, rate limits",
);
pub static HEALTH_CHECK_EXTENSION: Metadata = host(
    Kind::Extension,
    "health_check",
    &[],
    [Some(Beta), None, None],
    "collector-host/src/service.rs",
    false,
    "200 while serving, 503 while starting or draining",
);

/// What a binary is built with: the host's built-ins plus the picked factories, the
/// request scope its receivers, ingest screen and token scopes use, and how the host names
/// its own metric families.
#[derive(Debug, Clone)]
pub struct Components {
    processors: Vec<&'static dyn ProcessorFactory>,
    exporters: Vec<&'static dyn ExporterFactory>,
    extensions: Vec<&'static dyn ExtensionFactory>,
    scope: Arc<dyn RequestScope>,
    metric_prefix: MetricPrefix,
    reserved_metric_prefixes: &'static [&'static str],
    pipeline_gauges: &'static [&'static str],
    prometheus_drop_attributes: &'static [&'static str],
}

impl Default for Components {
    fn default() -> Self {
        Components::host()
    }
}

impl Components {
    /// The host's built-ins only: an OTLP collector with no processors.
    pub fn host() -> Self {
        Components {
            processors: Vec::new(),
            exporters: Vec::new(),
            extensions: Vec::new(),
            scope: Arc::new(NoScope),
            metric_prefix: crate::telemetry::HOST_METRIC_PREFIX,
            reserved_metric_prefixes: &[],
            pipeline_gauges: &[],
            prometheus_drop_attributes: &[],
        }
    }

    /// Name the host's own metric families (connections, TLS, receiver drops, the
    /// `ingero_auth` extension's and the Prometheus exporter's counters) under `prefix`
    /// instead of [`HOST_METRIC_PREFIX`](crate::telemetry::HOST_METRIC_PREFIX). The
    /// OpenTelemetry Collector's `otelcol_*` families keep their names.
    pub fn with_metric_prefix(mut self, prefix: MetricPrefix) -> Self {
        self.metric_prefix = prefix;
        self
    }

    /// Name prefixes of the families the picked components write on the Prometheus
    /// exporter page: pushed data that would translate to one of them is refused, as it is
    /// for the host's own prefix.
    pub fn with_reserved_metric_prefixes(mut self, prefixes: &'static [&'static str]) -> Self {
        self.reserved_metric_prefixes = prefixes;
        self
    }

    /// OTLP gauges the picked processors put into the pipeline under a name of a reserved
    /// prefix ([`with_reserved_metric_prefixes`](Self::with_reserved_metric_prefixes)):
    /// the Prometheus exporter stores them as data (as gauges only). None by default.
    pub fn with_pipeline_gauges(mut self, names: &'static [&'static str]) -> Self {
        self.pipeline_gauges = names;
        self
    }

    /// The attribute keys the Prometheus exporter leaves out of label sets when a config
    /// does not set its `drop_attributes` (attributes the distribution's data carries whose
    /// values change with every point). None by default: the library's exporter keeps
    /// every attribute unless configured.
    pub fn with_prometheus_drop_attributes(mut self, keys: &'static [&'static str]) -> Self {
        self.prometheus_drop_attributes = keys;
        self
    }

    /// The gauges given to [`with_pipeline_gauges`](Self::with_pipeline_gauges).
    pub fn pipeline_gauges(&self) -> &'static [&'static str] {
        self.pipeline_gauges
    }

    /// The Prometheus exporter's default `drop_attributes`
    /// ([`with_prometheus_drop_attributes`](Self::with_prometheus_drop_attributes)).
    pub fn prometheus_drop_attributes(&self) -> &'static [&'static str] {
        self.prometheus_drop_attributes
    }

    /// The prefix of the host's own metric families.
    pub fn metric_prefix(&self) -> MetricPrefix {
        self.metric_prefix
    }

    /// The name prefixes reserved for the picked components' families (besides
    /// [`metric_prefix`](Self::metric_prefix)).
    pub fn reserved_metric_prefixes(&self) -> &'static [&'static str] {
        self.reserved_metric_prefixes
    }

    /// Ingero Fleet's set, for the library's own unit tests only: the Ingero component
    /// crates are dev-dependencies here. Binaries take theirs from the `ingero-fleet`
    /// crate (`ingero_fleet_dist::components`).
    #[cfg(test)]
    pub(crate) fn fleet() -> Self {
        Components::host()
            .with_processor(&ingero_processor::FACTORY)
            .with_processor(&nccl_processor::FACTORY)
            .with_processor(&provider_processor::FACTORY)
            .with_extension(&ingero_extension::FACTORY)
            .with_request_scope(Arc::new(ingero_wire::scope::ClusterScope))
            .with_pipeline_gauges(ingero_wire::family::PIPELINE_GAUGES)
            .with_prometheus_drop_attributes(ingero_wire::family::DROP_ATTRIBUTES)
    }

    pub fn with_processor(mut self, f: &'static dyn ProcessorFactory) -> Self {
        self.processors.push(f);
        self
    }

    pub fn with_exporter(mut self, f: &'static dyn ExporterFactory) -> Self {
        self.exporters.push(f);
        self
    }

    pub fn with_extension(mut self, f: &'static dyn ExtensionFactory) -> Self {
        self.extensions.push(f);
        self
    }

    /// The scope of requests and resources (the tenant a distribution partitions by;
    /// [`NoScope`] unless one is registered). Its ids must fit an attribute value at the
    /// smallest `limits.max_attribute_value_bytes` a config may set.
    pub fn with_request_scope(mut self, scope: Arc<dyn RequestScope>) -> Self {
        assert!(
            scope.max_id_len() <= crate::config::payload_limits::MIN_ATTRIBUTE_VALUE_BYTES,
            "a request scope's ids must fit the smallest attribute value limit"
        );
        self.scope = scope;
        self
    }

    /// The registered request scope.
    pub fn request_scope(&self) -> &Arc<dyn RequestScope> {
        &self.scope
    }

    /// Every component type, by kind (receivers, processors, exporters, extensions); within
    /// a kind, picked factories before host built-ins.
    pub fn all(&self) -> Vec<&'static Metadata> {
        let mut out: Vec<&'static Metadata> = vec![&OTLP_RECEIVER];
        out.extend(self.processors.iter().map(|f| f.metadata()));
        out.extend(self.exporters.iter().map(|f| f.metadata()));
        out.extend([
            &PROMETHEUS_EXPORTER,
            &DEBUG_EXPORTER,
            &OTLP_EXPORTER,
            &OTLPHTTP_EXPORTER,
        ]);
        out.extend(self.extensions.iter().map(|f| f.metadata()));
        out.extend([&AUTH_EXTENSION, &HEALTH_CHECK_EXTENSION]);
        out
    }

    /// Find a component type (or alias) of a kind.
    pub fn lookup(&self, kind: Kind, name: &str) -> Option<&'static Metadata> {
        self.all()
            .into_iter()
            .find(|m| m.kind == kind && m.is_named(name))
    }

    /// Canonical type names of a kind.
    pub fn names(&self, kind: Kind) -> Vec<&'static str> {
        self.all()
            .into_iter()
            .filter(|m| m.kind == kind)
            .map(|m| m.type_name)
            .collect()
    }

    pub fn processor(&self, type_name: &str) -> Option<&'static dyn ProcessorFactory> {
        self.processors
            .iter()
            .copied()
            .find(|f| f.metadata().is_named(type_name))
    }

    pub fn exporter(&self, type_name: &str) -> Option<&'static dyn ExporterFactory> {
        self.exporters
            .iter()
            .copied()
            .find(|f| f.metadata().is_named(type_name))
    }

    pub fn extension(&self, type_name: &str) -> Option<&'static dyn ExtensionFactory> {
        self.extensions
            .iter()
            .copied()
            .find(|f| f.metadata().is_named(type_name))
    }

    /// The `components` subcommand's YAML (otelcol's shape).
    pub fn components_yaml(&self, command: &str, description: &str, version: &str) -> String {
        let mut out = format!(
            "buildinfo:\n  command: {command}\n  description: {description}\n  version: {version}\n"
        );
        let all = self.all();
        for kind in Kind::ALL {
            out.push_str(&format!("{}:\n", kind.section()));
            for c in all.iter().filter(|c| c.kind == kind) {
                out.push_str(&format!(
                    "  - name: {}\n    module: {}\n",
                    c.type_name, c.module
                ));
                if !c.aliases.is_empty() {
                    out.push_str(&format!("    aliases: [{}]\n", c.aliases.join(", ")));
                }
                out.push_str("    stability:\n");
                if kind == Kind::Extension {
                    if let Some(s) = c.first_stability() {
                        out.push_str(&format!("      extension: {s}\n"));
                    }
                } else {
                    for (i, sig) in ["metrics", "traces", "logs"].iter().enumerate() {
                        if let Some(Some(s)) = c.stability.get(i) {
                            out.push_str(&format!("      {sig}: {s}\n"));
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_the_canonical_type() {
        let c = Components::fleet();
        assert_eq!(
            c.lookup(Kind::Exporter, "otlp_http").map(|c| c.type_name),
            Some("otlphttp")
        );
        assert_eq!(
            c.lookup(Kind::Exporter, "otlp_grpc").map(|c| c.type_name),
            Some("otlp")
        );
        assert!(c.lookup(Kind::Processor, "otlp").is_none());
    }

    #[test]
    fn components_yaml_lists_every_type_with_stability() {
        let y = Components::fleet().components_yaml("ingero-fleet", "test", "0");
        let v: serde_json::Value = serde_norway::from_str(&y).unwrap();
        assert_eq!(v["processors"].as_array().unwrap().len(), 3);
        assert_eq!(v["extensions"][0]["stability"]["extension"], "Beta");
        assert_eq!(v["receivers"][0]["stability"]["traces"], "Beta");
    }

    #[test]
    fn the_host_set_has_no_processors_and_no_ingero_extension() {
        let c = Components::host();
        assert!(c.names(Kind::Processor).is_empty());
        assert_eq!(
            c.names(Kind::Extension),
            [crate::auth::TYPE, "health_check"]
        );
        assert!(c.lookup(Kind::Extension, "ingero_threshold").is_none());
        assert!(Components::fleet().processor("ingero").is_some());
    }
}
