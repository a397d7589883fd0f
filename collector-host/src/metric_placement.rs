//! Which Prometheus endpoint serves which component self-metric: one place per metric.
//!
//! otelcol users scrape both the self-telemetry endpoint (`service.telemetry.metrics`,
//! 8888 by default) and the prometheus exporter (8889), so a family served on both is
//! counted twice by every `sum`. The split:
//!
//! - **Exporter endpoint** (data): every family of the processors and of the threshold
//!   extension: thresholds, stragglers, node counts, cost, provider attribution, NCCL lag,
//!   and the counters that qualify them (points accepted or rejected, caps, reloads). Most
//!   carry `cluster_id`; they sit with the pipeline data, behind the exporter's
//!   cluster-scoped bearer check (a scrape needs a token for every cluster).
//! - **Self-telemetry endpoint** (the collector's own health): the host's `otelcol_*`,
//!   connection, TLS and latency families (see `telemetry.rs`), and the `ingero_auth`
//!   extension's families (`<prefix>auth_*` under the distribution's metric prefix,
//!   [`HOST_HEALTH_PARTS`]), which count listener decisions and token reloads, never a
//!   cluster.
//!
//! A config with no prometheus exporter serves the data families on the self-telemetry
//! endpoint instead, so they are never lost and still appear once.
//!
//! The rule goes by family name, not by the labels of the moment, so a family never moves
//! between endpoints when its first cluster appears.

use component::MetricFamily;
use component::telemetry::MetricPrefix;

/// Name prefixes, after the distribution's metric prefix, of component families that are
/// collector health, not fleet data.
pub const HOST_HEALTH_PARTS: &[&str] = &["auth_"];

/// Where a component family is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The prometheus exporter (`exporters.prometheus.endpoint`, 8889 by default).
    Exporter,
    /// The self-telemetry endpoint (`service.telemetry.metrics`, 8888 by default).
    SelfTelemetry,
}

/// The endpoint of a component family, when a prometheus exporter is running; `prefix` is
/// the host's metric prefix.
pub fn endpoint_of(family: &str, prefix: MetricPrefix) -> Endpoint {
    let health = family
        .strip_prefix(prefix.as_str())
        .is_some_and(|rest| HOST_HEALTH_PARTS.iter().any(|p| rest.starts_with(p)));
    if health {
        Endpoint::SelfTelemetry
    } else {
        Endpoint::Exporter
    }
}

/// The component families a prometheus exporter endpoint serves.
pub fn for_exporter(mut fams: Vec<MetricFamily>, prefix: MetricPrefix) -> Vec<MetricFamily> {
    fams.retain(|f| endpoint_of(&f.name, prefix) == Endpoint::Exporter);
    fams
}

/// The component families the self-telemetry endpoint serves: the health families, and
/// every family when no prometheus exporter runs (`exporter_running == false`).
pub fn for_self_telemetry(
    mut fams: Vec<MetricFamily>,
    exporter_running: bool,
    prefix: MetricPrefix,
) -> Vec<MetricFamily> {
    if exporter_running {
        fams.retain(|f| endpoint_of(&f.name, prefix) == Endpoint::SelfTelemetry);
    }
    fams
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: MetricPrefix = MetricPrefix::new("ingero_fleet_");

    fn fams() -> Vec<MetricFamily> {
        [
            "ingero_fleet_stragglers",
            "ingero_fleet_points_total",
            "ingero_nccl_rank_lag_seconds",
            "ingero_provider_nodes",
            "ingero_threshold_published_clusters",
            "ingero_fleet_auth_requests_total",
            "ingero_fleet_auth_tokens",
        ]
        .iter()
        .map(|n| MetricFamily::gauge(n, "h"))
        .collect()
    }

    fn names(f: &[MetricFamily]) -> Vec<&str> {
        f.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn every_family_is_served_exactly_once() {
        let exp = for_exporter(fams(), FLEET);
        let tel = for_self_telemetry(fams(), true, FLEET);
        assert_eq!(exp.len() + tel.len(), fams().len());
        for f in &exp {
            assert!(!names(&tel).contains(&f.name.as_str()), "{} twice", f.name);
        }
        assert_eq!(
            names(&tel),
            [
                "ingero_fleet_auth_requests_total",
                "ingero_fleet_auth_tokens"
            ]
        );
        assert!(names(&exp).contains(&"ingero_fleet_stragglers"));
    }

    #[test]
    fn without_an_exporter_self_telemetry_serves_everything() {
        assert_eq!(
            names(&for_self_telemetry(fams(), false, FLEET)),
            names(&fams())
        );
    }

    /// The auth families are health under the prefix the host was given, and only there.
    #[test]
    fn health_follows_the_host_prefix() {
        let generic = crate::telemetry::HOST_METRIC_PREFIX;
        assert_eq!(
            endpoint_of("collector_host_auth_tokens", generic),
            Endpoint::SelfTelemetry
        );
        assert_eq!(
            endpoint_of("ingero_fleet_auth_tokens", generic),
            Endpoint::Exporter
        );
        assert_eq!(
            endpoint_of("ingero_fleet_auth_tokens", FLEET),
            Endpoint::SelfTelemetry
        );
        assert_eq!(endpoint_of("ingero_fleet_authx", FLEET), Endpoint::Exporter);
    }
}
