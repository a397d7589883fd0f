//! Provider precedence: operator rule > agent value > semantic conventions > default.

use std::sync::Arc;

use component::otlp::{self, KeyValue};
use ingero_wire::resource;
use serde::Serialize;

use crate::provider::{self, ProviderAliases};
use crate::rules::RuleSet;

/// Whether a resource comes from an Ingero agent (or from Fleet's own processors, which
/// write the same identifiers), and so gets `ingero.provider`. The spec's agent resources
/// always carry `ingero.node.id` (health pushes, straggler events, the NCCL exporter) and
/// usually `ingero.cluster.id`; processor outputs carry `ingero.cluster.id`. A resource
/// that already names `ingero.provider`, or whose metrics have the agent's names
/// (`ingero.*`, `nccl.*`), counts too. Anything else (an OTel SDK's or telemetrygen's
/// resource, a resource-less batch) is left as it came: no `ingero_provider="unknown"` label
/// on series and `target_info` that have nothing to do with GPUs.
pub fn looks_like_agent(rm: &otlp::ResourceMetrics) -> bool {
    let attrs = otlp::resource_attrs(rm);
    let ids = [resource::NODE_ID, resource::CLUSTER_ID, resource::PROVIDER];
    attrs.iter().any(|kv| ids.contains(&kv.key.as_str()))
        || rm
            .scope_metrics
            .iter()
            .flat_map(|s| &s.metrics)
            .any(|m| m.name.starts_with("ingero.") || m.name.starts_with("nccl."))
}

/// Where a resource's provider came from, in precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderSource {
    /// An operator rule (its 0-based index in the rules file).
    Rule(usize),
    /// The agent's `ingero.provider` on this resource.
    Agent,
    /// `cloud.provider`, `cloud.platform` or `host.type`.
    SemanticConvention,
    /// `default_provider`.
    Default,
}

impl ProviderSource {
    pub fn label(self) -> &'static str {
        match self {
            ProviderSource::Rule(_) => "rule",
            ProviderSource::Agent => "agent",
            ProviderSource::SemanticConvention => "semconv",
            ProviderSource::Default => "default",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            ProviderSource::Rule(_) => 0,
            ProviderSource::Agent => 1,
            ProviderSource::SemanticConvention => 2,
            ProviderSource::Default => 3,
        }
    }
}

pub(crate) const SOURCES: [&str; 4] = ["rule", "agent", "semconv", "default"];

/// A resource's provider and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub provider: Arc<str>,
    pub source: ProviderSource,
}

/// The first provider the precedence gives (see the crate README).
pub(crate) fn resolve(
    rules: &RuleSet,
    aliases: &ProviderAliases,
    default_provider: &Arc<str>,
    attrs: &[KeyValue],
    pinned: Option<Resolution>,
    invalid: &mut u64,
) -> Resolution {
    if let Some(rule) = rules.first_match(attrs) {
        return Resolution {
            provider: Arc::clone(&rule.provider),
            source: ProviderSource::Rule(rule.index),
        };
    }
    let mut norm = |raw: &str| match aliases.normalise(raw) {
        Ok(p) => Some(p),
        Err(_) => {
            *invalid += 1;
            None
        }
    };
    if let Some(p) = otlp::get_str(attrs, resource::PROVIDER).and_then(&mut norm) {
        return Resolution {
            provider: p,
            source: ProviderSource::Agent,
        };
    }
    // A push without its own value (straggler event, trace exporter, processor output)
    // takes what the same node's health push resolved to by rule or agent value.
    if let Some(r) = pinned {
        return r;
    }
    let semconv = otlp::get_str(attrs, resource::CLOUD_PROVIDER)
        .and_then(&mut norm)
        .or_else(|| {
            otlp::get_str(attrs, resource::CLOUD_PLATFORM)
                .and_then(provider::provider_from_cloud_platform)
                .and_then(&mut norm)
        })
        .or_else(|| {
            otlp::get_str(attrs, resource::HOST_TYPE)
                .and_then(provider::provider_from_host_type)
                .and_then(&mut norm)
        });
    match semconv {
        Some(p) => Resolution {
            provider: p,
            source: ProviderSource::SemanticConvention,
        },
        None => Resolution {
            provider: Arc::clone(default_provider),
            source: ProviderSource::Default,
        },
    }
}
