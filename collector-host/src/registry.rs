//! The components built into `ingero-fleet`, with their stability, and the processor
//! factories.

use std::sync::Arc;
use std::time::Duration;

use component::{ConfigErrors, ConfigValue, Stability};

use crate::config::ProcessorPlan;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Receiver,
    Processor,
    Exporter,
    Extension,
}

impl Kind {
    pub fn singular(self) -> &'static str {
        match self {
            Kind::Receiver => "receiver",
            Kind::Processor => "processor",
            Kind::Exporter => "exporter",
            Kind::Extension => "extension",
        }
    }
}

/// One built-in component type.
#[derive(Debug, Clone, Copy)]
pub struct ComponentInfo {
    pub kind: Kind,
    /// Canonical type name.
    pub name: &'static str,
    /// Other names accepted in configs (otelcol's renamed types).
    pub aliases: &'static [&'static str],
    /// Stability per signal: (metrics, traces, logs); `None` = signal not supported.
    pub stability: [Option<Stability>; 3],
    pub module: &'static str,
}

use Stability::*;

pub const COMPONENTS: &[ComponentInfo] = &[
    ComponentInfo {
        kind: Kind::Receiver,
        name: "otlp",
        aliases: &[],
        stability: [Some(Beta), Some(Beta), Some(Beta)],
        module: "collector-host/src/receiver",
    },
    ComponentInfo {
        kind: Kind::Processor,
        name: ingero_processor::TYPE,
        aliases: &[],
        stability: [Some(Beta), None, None],
        module: "ingero-processor",
    },
    ComponentInfo {
        kind: Kind::Processor,
        name: nccl_processor::TYPE,
        aliases: &[],
        stability: [Some(Alpha), None, None],
        module: "nccl-processor",
    },
    ComponentInfo {
        kind: Kind::Processor,
        name: provider_processor::TYPE,
        aliases: &[],
        stability: [Some(Alpha), None, None],
        module: "provider-processor",
    },
    ComponentInfo {
        kind: Kind::Exporter,
        name: "prometheus",
        aliases: &[],
        stability: [Some(Beta), None, None],
        module: "collector-host/prometheus",
    },
    ComponentInfo {
        kind: Kind::Exporter,
        name: "debug",
        aliases: &[],
        stability: [Some(Development), Some(Development), Some(Development)],
        module: "collector-host/src/exporter/debug.rs",
    },
    ComponentInfo {
        kind: Kind::Exporter,
        name: "otlp",
        aliases: &["otlp_grpc"],
        stability: [Some(Beta), Some(Beta), Some(Beta)],
        module: "collector-host/src/exporter/otlp.rs",
    },
    ComponentInfo {
        kind: Kind::Exporter,
        name: "otlphttp",
        aliases: &["otlp_http"],
        stability: [Some(Beta), Some(Beta), Some(Beta)],
        module: "collector-host/src/exporter/otlp.rs",
    },
    ComponentInfo {
        kind: Kind::Extension,
        name: ingero_extension::TYPE,
        aliases: &[],
        stability: [Some(Beta), None, None],
        module: "ingero-extension",
    },
    ComponentInfo {
        kind: Kind::Extension,
        name: crate::auth::TYPE,
        aliases: &[],
        stability: [Some(Alpha), None, None],
        module: "collector-host/src/auth",
    },
    ComponentInfo {
        kind: Kind::Extension,
        name: "health_check",
        aliases: &[],
        stability: [Some(Beta), None, None],
        module: "collector-host/src/service.rs",
    },
];

/// Find a component type (or alias) of a kind.
pub fn lookup(kind: Kind, name: &str) -> Option<&'static ComponentInfo> {
    COMPONENTS
        .iter()
        .find(|c| c.kind == kind && (c.name == name || c.aliases.contains(&name)))
}

/// Canonical type names of a kind.
pub fn names(kind: Kind) -> Vec<&'static str> {
    COMPONENTS
        .iter()
        .filter(|c| c.kind == kind)
        .map(|c| c.name)
        .collect()
}

/// Instantiate a processor of a registered type.
pub fn create_processor(ty: &str, cfg: &ConfigValue) -> Result<ProcessorPlan, ConfigErrors> {
    Ok(match ty {
        ingero_processor::TYPE => {
            let p = ingero_processor::create(cfg)?;
            let tick = p.push_interval();
            ProcessorPlan {
                kind: ingero_processor::TYPE,
                processor: Arc::new(p),
                tick_interval: tick,
            }
        }
        nccl_processor::TYPE => {
            let p = nccl_processor::create(cfg)?;
            let tick = p.tick_interval();
            ProcessorPlan {
                kind: nccl_processor::TYPE,
                processor: Arc::new(p),
                tick_interval: tick,
            }
        }
        provider_processor::TYPE => {
            let p = provider_processor::create(cfg)?;
            let tick = p.tick_interval();
            ProcessorPlan {
                kind: provider_processor::TYPE,
                processor: Arc::new(p),
                tick_interval: tick,
            }
        }
        other => {
            return Err(ConfigErrors::from(component::ConfigError::new(
                "",
                format!("unknown processor type {other:?}"),
            )));
        }
    })
    .map(|mut p| {
        if p.tick_interval.is_zero() {
            p.tick_interval = Duration::from_secs(1);
        }
        p
    })
}

/// The `components` subcommand's YAML.
pub fn components_yaml() -> String {
    let mut out = format!(
        "buildinfo:\n  command: ingero-fleet\n  description: Ingero Fleet, a Rust-native OpenTelemetry collector for GPU straggler detection\n  version: {}\n",
        env!("CARGO_PKG_VERSION")
    );
    for (kind, section) in [
        (Kind::Receiver, "receivers"),
        (Kind::Processor, "processors"),
        (Kind::Exporter, "exporters"),
        (Kind::Extension, "extensions"),
    ] {
        out.push_str(&format!("{section}:\n"));
        for c in COMPONENTS.iter().filter(|c| c.kind == kind) {
            out.push_str(&format!("  - name: {}\n    module: {}\n", c.name, c.module));
            if !c.aliases.is_empty() {
                out.push_str(&format!("    aliases: [{}]\n", c.aliases.join(", ")));
            }
            out.push_str("    stability:\n");
            if kind == Kind::Extension {
                if let Some(s) = c.stability[0] {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_the_canonical_type() {
        assert_eq!(
            lookup(Kind::Exporter, "otlp_http").map(|c| c.name),
            Some("otlphttp")
        );
        assert_eq!(
            lookup(Kind::Exporter, "otlp_grpc").map(|c| c.name),
            Some("otlp")
        );
        assert!(lookup(Kind::Processor, "otlp").is_none());
    }

    #[test]
    fn components_yaml_lists_every_type_with_stability() {
        let y = components_yaml();
        let v: serde_json::Value = serde_norway::from_str(&y).unwrap();
        assert_eq!(v["processors"].as_array().unwrap().len(), 3);
        assert_eq!(v["extensions"][0]["stability"]["extension"], "Beta");
        assert_eq!(v["receivers"][0]["stability"]["traces"], "Beta");
    }
}
