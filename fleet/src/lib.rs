//! Ingero Fleet as a distribution of the `collector-host` library: its component set
//! (the host's built-ins plus the four Ingero component crates), its embedded default
//! config and the [`Distribution`] the `ingero-fleet` binary runs.

pub mod generate;

use collector_host::cli::Distribution;
use collector_host::registry::Components;

/// The config `ingero-fleet` runs with no `--config`: a complete Fleet on loopback.
pub const EMBEDDED_DEFAULT: &str = include_str!("default.yaml");

/// Ingero Fleet's set: the host's built-ins plus the shipped component crates
/// ([`ingero_fleet_components`]: the `ingero`, `nccl_peer_lag` and `provider_lookup`
/// processors and the `ingero_threshold` extension), with requests and resources scoped
/// to clusters ([`ingero_fleet_components::request_scope`]). The host's own families are
/// named `ingero_fleet_*`, the components' name prefixes are reserved on the Prometheus
/// exporter page (where the `ingero` processor's straggler gauge is stored as data), and
/// the exporter leaves the agents' per-point attributes out of label sets unless a config
/// sets `drop_attributes` ([`ingero_wire::family`]).
pub fn components() -> Components {
    let host = Components::host()
        .with_request_scope(ingero_fleet_components::request_scope())
        .with_metric_prefix(ingero_wire::family::HOST_PREFIX)
        .with_reserved_metric_prefixes(ingero_wire::family::RESERVED_PREFIXES)
        .with_pipeline_gauges(ingero_wire::family::PIPELINE_GAUGES)
        .with_prometheus_drop_attributes(ingero_wire::family::DROP_ATTRIBUTES);
    let set = ingero_fleet_components::PROCESSORS
        .iter()
        .fold(host, |set, f| set.with_processor(*f));
    ingero_fleet_components::EXTENSIONS
        .iter()
        .fold(set, |set, f| set.with_extension(*f))
}

/// `ingero-fleet`: [`components`] and [`EMBEDDED_DEFAULT`].
pub fn distribution() -> Distribution {
    Distribution {
        command: "ingero-fleet",
        // The Cargo version, plus the git commit in release builds (build.rs).
        version: env!("INGERO_VERSION_LINE"),
        about: "GPU straggler detection as an OpenTelemetry collector",
        long_about: "Runs the Ingero Fleet service: OTLP receivers, the ingero threshold \
                     processor, the threshold extension and exporters. With no --config, an \
                     embedded default config runs a complete Fleet on loopback.",
        description: "Ingero Fleet, a Rust-native OpenTelemetry collector for GPU straggler detection",
        default_config: EMBEDDED_DEFAULT,
        components: components(),
    }
}

/// Ingero Fleet's `components` YAML.
pub fn components_yaml() -> String {
    let d = distribution();
    d.components
        .components_yaml(d.command, d.description, d.version)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use collector_host::config::{Plan, source};

    #[test]
    fn embedded_default_plans_with_the_fleet_set() {
        let v = source::parse_document("embedded", EMBEDDED_DEFAULT).unwrap();
        assert!(v["service"]["pipelines"]["metrics"].is_object());
        if let Err(e) = Plan::build_with(&v, &components()) {
            panic!("{:?}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn components_yaml_lists_every_type_with_stability() {
        let v: serde_json::Value = serde_norway::from_str(&components_yaml()).unwrap();
        assert_eq!(v["processors"].as_array().unwrap().len(), 3);
        assert_eq!(v["extensions"][0]["stability"]["extension"], "Beta");
        assert_eq!(v["receivers"][0]["stability"]["traces"], "Beta");
        assert_eq!(v["buildinfo"]["command"], "ingero-fleet");
    }
}
