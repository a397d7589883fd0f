//! Configuration of the `prometheus` exporter. Key names follow the contrib
//! `prometheusexporter` where a key applies; `max_series` is ours.

use std::collections::BTreeMap;
use std::time::Duration;

use component::ComponentConfig;
use component::config::ConfigErrors;
use serde::{Deserialize, Serialize};

use crate::naming::{is_valid_label_name, is_valid_metric_name};

/// Where the host serves the scrape page. Loopback by default, like every Fleet listener;
/// contrib examples use port 8889 to stay clear of the collector's own 8888.
pub const DEFAULT_ENDPOINT: &str = "127.0.0.1:8889";
/// How long a series is kept (and rendered) after its last update.
pub const DEFAULT_METRIC_EXPIRATION: Duration = Duration::from_secs(5 * 60);
/// Resource attributes become labels by default (see [`ResourceToTelemetry`]).
pub const DEFAULT_RESOURCE_TO_TELEMETRY: bool = true;
/// Unit and type suffixes (`_seconds`, `_total`, `_ratio`) are added by default.
pub const DEFAULT_ADD_METRIC_SUFFIXES: bool = true;
/// Most series held at once; new series beyond it are dropped and counted.
pub const DEFAULT_MAX_SERIES: usize = 2_000_000;
/// `max_series_per_cluster`: one cluster (tenant) may hold at most half of the default
/// `max_series`, so no one tenant can fill the page for the others.
pub const DEFAULT_MAX_SERIES_PER_CLUSTER: usize = 1_000_000;
/// `max_bytes_per_cluster`: 256 MiB of estimated bytes (`cluster_usage`) per cluster.
/// An agent node (13 series) is charged about 2.8 KB by that estimate, so a cluster of
/// ordinary agent data reaches `max_series_per_cluster` (about 77,000 nodes, ~210 MiB)
/// first; what the byte cap stops is a cluster whose series carry long label values or
/// metric names.
pub const DEFAULT_MAX_BYTES_PER_CLUSTER: usize = 256 << 20;
/// `max_bytes`: estimated bytes of every cluster together, 512 MiB. By the estimate's
/// ratio to real memory measured for one cluster at its byte cap, that is well under
/// 1 GiB of resident memory, so the default fits a modest pod; one cluster alone still
/// has its whole `max_bytes_per_cluster`.
pub const DEFAULT_MAX_BYTES: usize = 512 << 20;
/// `max_series_per_tenant` and `max_bytes_per_tenant` when unset: the global bound less
/// a quarter, so one tenant always leaves a quarter to the others.
pub const DEFAULT_TENANT_LEFT_DIVISOR: usize = 4;
/// Smallest `max_bytes_per_cluster`: below it not even one resource with one series fits.
pub const MIN_BYTES_PER_CLUSTER: usize = 1024;
/// `resource_to_telemetry_conversion` block.
///
/// Enabled by default, unlike contrib (where it defaults to `false`). Fleet's data is per
/// node: the agent's resource carries `ingero.node.id` and `ingero.cluster.id` but no
/// `service.name` / `service.instance.id`, so there is no `job`/`instance` to tell nodes
/// apart. Without promoting resource attributes to labels every node's
/// `ingero_node_health_score_ratio` would be the same series and the nodes would overwrite
/// each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceToTelemetry {
    pub enabled: bool,
}

impl Default for ResourceToTelemetry {
    fn default() -> Self {
        ResourceToTelemetry {
            enabled: DEFAULT_RESOURCE_TO_TELEMETRY,
        }
    }
}

/// contrib's `translation_strategy`, restricted to the escaping strategies (the classic
/// Prometheus text format 0.0.4 this exporter writes cannot carry UTF-8 names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum TranslationStrategy {
    /// Invalid characters to `_`, unit and type suffixes added.
    UnderscoreEscapingWithSuffixes,
    /// Invalid characters to `_`, no suffixes.
    UnderscoreEscapingWithoutSuffixes,
}

/// The exporter's configuration (`exporters.prometheus`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrometheusExporterConfig {
    /// `host:port` the host serves the scrape page on. The exporter itself opens nothing.
    pub endpoint: String,
    /// Prefix for every translated metric name (`namespace_metric`). Not applied to
    /// self-metrics passed to `render` as `extra`.
    pub namespace: String,
    /// Labels added to every translated series; they win over data labels of the same name.
    pub const_labels: BTreeMap<String, String>,
    /// Resource and data-point attribute keys never turned into labels (exact OTLP keys).
    /// Points that differ only in these land on one series. `[]` keeps every attribute;
    /// unset (`None`): the distribution's list
    /// ([`PrometheusExporter::with_default_drop_attributes`]; none unless it gives one).
    ///
    /// [`PrometheusExporter::with_default_drop_attributes`]: crate::PrometheusExporter::with_default_drop_attributes
    #[serde(deserialize_with = "list", skip_serializing_if = "Option::is_none")]
    pub drop_attributes: Option<Vec<String>>,
    /// A series not updated for this long is no longer rendered and is freed by `expire`.
    #[serde(with = "component::config::duration")]
    pub metric_expiration: Duration,
    pub resource_to_telemetry_conversion: ResourceToTelemetry,
    /// contrib's (deprecated there) switch; `translation_strategy`, when set, wins.
    pub add_metric_suffixes: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub translation_strategy: Option<TranslationStrategy>,
    /// Most series held; points that would create more are dropped and counted.
    pub max_series: usize,
    /// Most series held for resources of one cluster (the value of the host's scope key
    /// attribute, `ingero.cluster.id` in Ingero's distributions); points that would
    /// create more for that cluster are dropped and counted (`cluster_series_limit`).
    pub max_series_per_cluster: usize,
    /// Most estimated bytes (series records, metric names and label text as stored,
    /// counted as if nothing were shared) held for resources of one cluster;
    /// points that would take more are dropped and counted (`cluster_bytes_limit`).
    pub max_bytes_per_cluster: usize,
    /// Most estimated bytes held for every cluster together (`bytes_limit`).
    pub max_bytes: usize,
    /// Most series the clusters of one tenant (the bearer token whose push created each
    /// cluster; pushes without a token are one tenant) hold together
    /// (`tenant_series_limit`); unset: three quarters of `max_series`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_series_per_tenant: Option<usize>,
    /// Most estimated bytes the clusters of one tenant hold together
    /// (`tenant_bytes_limit`); unset: three quarters of `max_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes_per_tenant: Option<usize>,
    /// Bearer-token check on the scrape endpoint (`auth: {authenticator: ingero_auth}`),
    /// enforced by the host; a scrape needs a token scoped to every cluster (`"*"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<component::config::AuthRef>,
    /// Open scrape connections beyond which new ones are closed at accept (0 = unlimited).
    pub max_connections: usize,
    /// Scrape connections open at once from one client address (0 = unlimited); beyond it
    /// a new connection evicts that address's least recently used idle one, or is closed
    /// at accept when none is idle.
    pub max_connections_per_client: usize,
    /// A scrape connection that sends no byte this long after accept (or after its TLS
    /// handshake) is closed (> 0).
    #[serde(with = "component::config::duration")]
    pub first_byte_timeout: Duration,
    /// A scrape connection with no request in service this long is closed (> 0).
    #[serde(with = "component::config::duration")]
    pub idle_timeout: Duration,
    /// Host names (`fleet.example.com`, or `host:port` for one port only) scrapes may be
    /// addressed to besides IP addresses; others are refused with 403, by the host.
    /// Unset: no such check, except that a loopback endpoint without `auth` takes only
    /// local names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for PrometheusExporterConfig {
    fn default() -> Self {
        PrometheusExporterConfig {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            namespace: String::new(),
            const_labels: BTreeMap::new(),
            drop_attributes: None,
            metric_expiration: DEFAULT_METRIC_EXPIRATION,
            resource_to_telemetry_conversion: ResourceToTelemetry::default(),
            add_metric_suffixes: DEFAULT_ADD_METRIC_SUFFIXES,
            translation_strategy: None,
            max_series: DEFAULT_MAX_SERIES,
            max_series_per_cluster: DEFAULT_MAX_SERIES_PER_CLUSTER,
            max_bytes_per_cluster: DEFAULT_MAX_BYTES_PER_CLUSTER,
            max_bytes: DEFAULT_MAX_BYTES,
            max_series_per_tenant: None,
            max_bytes_per_tenant: None,
            auth: None,
            max_connections: 1024,
            max_connections_per_client: 1024,
            first_byte_timeout: component::listen_addr::DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: component::listen_addr::DEFAULT_IDLE_TIMEOUT,
            allowed_hosts: None,
        }
    }
}

impl PrometheusExporterConfig {
    /// Whether unit/type suffixes are added, after `translation_strategy` precedence.
    pub fn with_suffixes(&self) -> bool {
        match self.translation_strategy {
            Some(TranslationStrategy::UnderscoreEscapingWithSuffixes) => true,
            Some(TranslationStrategy::UnderscoreEscapingWithoutSuffixes) => false,
            None => self.add_metric_suffixes,
        }
    }

    /// `metric_expiration` in whole seconds, rounded up (series ages are kept in seconds).
    pub fn expiration_secs(&self) -> u32 {
        let d = self.metric_expiration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        u32::try_from(secs).unwrap_or(u32::MAX)
    }
}

/// `drop_attributes`, when present, is a list: `null` is refused (a config leaves the key
/// out for the distribution's list).
fn list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Vec::<String>::deserialize(d).map(Some)
}

/// Check `host:port` (`127.0.0.1:8889`, `[::1]:8889`, `0.0.0.0:9090`, `localhost:8889`).
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    if endpoint.trim().is_empty() {
        return Err("must not be empty (host:port, e.g. 127.0.0.1:8889)".into());
    }
    let Some((host, port)) = endpoint.rsplit_once(':') else {
        return Err(format!("{endpoint:?} is not host:port"));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!(
            "{endpoint:?}: port {port:?} is not a number in 0..=65535"
        ));
    }
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        !host.contains(':') && !host.chars().any(|c| c.is_whitespace() || c == '/')
    };
    if !host_ok {
        return Err(format!("{endpoint:?}: invalid host {host:?}"));
    }
    Ok(())
}

impl ComponentConfig for PrometheusExporterConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::new();
        if let Err(e) = check_endpoint(&self.endpoint) {
            errs.push("endpoint", e);
        }
        if !self.namespace.is_empty() && !is_valid_metric_name(&self.namespace) {
            errs.push(
                "namespace",
                format!(
                    "{:?} is not a valid metric name prefix: must match [a-zA-Z_:][a-zA-Z0-9_:]*",
                    self.namespace
                ),
            );
        }
        for name in self.const_labels.keys() {
            let path = format!("const_labels.{name}");
            if !is_valid_label_name(name) {
                errs.push(
                    path,
                    "not a valid label name: must match [a-zA-Z_][a-zA-Z0-9_]*",
                );
            } else if name.starts_with("__") {
                errs.push(path, "label names starting with __ are reserved");
            } else if name == "le" || name == "quantile" {
                errs.push(path, "reserved for histogram and summary series");
            }
        }
        for (i, key) in self.drop_attributes.iter().flatten().enumerate() {
            if key.is_empty() {
                errs.push(format!("drop_attributes[{i}]"), "must not be empty");
            }
        }
        if self.metric_expiration < Duration::from_secs(1) {
            errs.push("metric_expiration", "must be at least 1s");
        }
        if self.max_series == 0 {
            errs.push("max_series", "must be >= 1");
        }
        if self.max_series_per_cluster == 0 {
            errs.push("max_series_per_cluster", "must be >= 1");
        }
        if self.max_bytes_per_cluster < MIN_BYTES_PER_CLUSTER {
            errs.push(
                "max_bytes_per_cluster",
                format!("must be >= {MIN_BYTES_PER_CLUSTER} (one small series)"),
            );
        }
        if self.max_bytes < MIN_BYTES_PER_CLUSTER {
            errs.push(
                "max_bytes",
                format!("must be >= {MIN_BYTES_PER_CLUSTER} (one small series)"),
            );
        }
        if let Some(n) = self.max_series_per_tenant
            && (n == 0 || n > self.max_series)
        {
            errs.push(
                "max_series_per_tenant",
                format!("must be between 1 and max_series ({})", self.max_series),
            );
        }
        if let Some(n) = self.max_bytes_per_tenant
            && (n < MIN_BYTES_PER_CLUSTER || n > self.max_bytes)
        {
            errs.push(
                "max_bytes_per_tenant",
                format!(
                    "must be between {MIN_BYTES_PER_CLUSTER} and max_bytes ({})",
                    self.max_bytes
                ),
            );
        }
        for (key, d) in [
            ("first_byte_timeout", self.first_byte_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if d.is_zero() {
                errs.push(key, "must be > 0");
            }
        }
        component::listen_addr::check_allowed_hosts(
            &mut errs,
            "allowed_hosts",
            self.allowed_hosts.as_deref(),
        );
        errs.into_result()
    }
}

impl PrometheusExporterConfig {
    /// The effective per-tenant shares (a share of the whole is no bound of its own: the
    /// global one refuses first, under its own name).
    pub fn tenant_caps(&self) -> crate::cluster_usage::ClusterCaps {
        let share = |set: Option<usize>, whole: usize| match set
            .unwrap_or(whole - whole / DEFAULT_TENANT_LEFT_DIVISOR)
        {
            n if n >= whole => usize::MAX,
            n => n.max(1),
        };
        crate::cluster_usage::ClusterCaps {
            max_series: share(self.max_series_per_tenant, self.max_series),
            max_bytes: share(self.max_bytes_per_tenant, self.max_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        for ok in [
            "127.0.0.1:8889",
            "0.0.0.0:9090",
            "[::1]:8889",
            "localhost:0",
            ":8889",
        ] {
            assert!(check_endpoint(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            " ",
            "8889",
            "host:port",
            "host:70000",
            "::1:8889",
            "[::1:8889",
            "a b:1",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn translation_strategy_wins_over_add_metric_suffixes() {
        let mut cfg = PrometheusExporterConfig {
            add_metric_suffixes: false,
            ..Default::default()
        };
        assert!(!cfg.with_suffixes());
        cfg.translation_strategy = Some(TranslationStrategy::UnderscoreEscapingWithSuffixes);
        assert!(cfg.with_suffixes());
        cfg.add_metric_suffixes = true;
        cfg.translation_strategy = Some(TranslationStrategy::UnderscoreEscapingWithoutSuffixes);
        assert!(!cfg.with_suffixes());
    }

    #[test]
    fn expiration_rounds_up_to_seconds() {
        let cfg = PrometheusExporterConfig {
            metric_expiration: Duration::from_millis(1500),
            ..Default::default()
        };
        assert_eq!(cfg.expiration_secs(), 2);
        assert_eq!(PrometheusExporterConfig::default().expiration_secs(), 300);
    }
}
