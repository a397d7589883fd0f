//! The shared contract of Ingero Fleet collector components.
//!
//! Components are synchronous and pure: they never open sockets, spawn tasks or read the
//! clock. A host (`ingero-fleet`, or a Go collector through the C ABI) owns I/O and time:
//!
//! - [`Processor::process`] on every metrics batch (may be called concurrently from many
//!   request tasks, so processors use interior synchronisation);
//! - [`Processor::tick`] on a timer with the current time (recomputation, flushing, expiry);
//! - [`Processor::start`] / [`Processor::shutdown`]; `start` is where a processor finds an
//!   extension through the [`Host`], like Go's `host.GetExtensions()`.
//!
//! Config is one serde struct per component (see [`config`]). Nothing here names a wire
//! attribute: a distribution's own names and the interfaces its components share (Fleet's
//! in the `ingero-wire` crate) live beside it, found through [`Extension::provides`]. What
//! a request's and a resource's tenant is (Fleet: the cluster) is a distribution's
//! [`scope::RequestScope`], registered with its component set.

#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod exporter;
pub mod factory;
pub mod listen_addr;
pub mod middleware;
pub mod otlp;
pub mod range;
pub mod recycle;
pub mod scope;
pub mod telemetry;
pub mod text;
pub mod time;

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

pub use config::{ComponentConfig, ConfigError, ConfigErrors, ConfigValue};
pub use otlp::ResourceMetrics;
pub use telemetry::{MetricFamily, MetricType, Sample};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};

/// A component id, `type[/name]` as in otelcol configs (`ingero`, `otlp/agents`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComponentId {
    kind: String,
    name: Option<String>,
}

impl ComponentId {
    /// Parse `type[/name]`. The type follows otelcol's rule `^[a-zA-Z][0-9a-zA-Z_]{0,62}$`;
    /// the name is any non-empty string without whitespace or `/`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (kind, name) = match s.split_once('/') {
            Some((k, n)) => (k, Some(n)),
            None => (s, None),
        };
        let mut chars = kind.chars();
        let valid_type = kind.len() <= 63
            && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_type {
            return Err(format!(
                "invalid component type {kind:?}: must match ^[a-zA-Z][0-9a-zA-Z_]{{0,62}}$"
            ));
        }
        if let Some(n) = name
            && (n.is_empty()
                || n.len() > 1024
                || n.contains('/')
                || n.chars().any(char::is_whitespace))
        {
            return Err(format!("invalid component name {n:?} in id {s:?}"));
        }
        Ok(ComponentId {
            kind: kind.to_string(),
            name: name.map(str::to_string),
        })
    }

    pub fn new(kind: &str) -> Self {
        ComponentId {
            kind: kind.to_string(),
            name: None,
        }
    }

    /// The component type (`ingero` in `ingero/gpu`).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, "{}/{}", self.kind, n),
            None => f.write_str(&self.kind),
        }
    }
}

/// Stability level of a component for a signal, as otelcol reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stability {
    Development,
    Alpha,
    Beta,
    Stable,
    Deprecated,
}

impl fmt::Display for Stability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stability::Development => "Development",
            Stability::Alpha => "Alpha",
            Stability::Beta => "Beta",
            Stability::Stable => "Stable",
            Stability::Deprecated => "Deprecated",
        })
    }
}

/// Request-level facts the host knows about a batch before any processor sees it.
#[derive(Debug, Clone, Default)]
pub struct BatchContext {
    /// Cluster named by the request (`cluster_id` query parameter, else the
    /// `ingero.cluster.id` request header). Resource attributes take precedence.
    pub cluster_id: Option<Arc<str>>,
    /// When the host received the batch.
    pub received_at: Timestamp,
    /// Who sent it: the identity of the request's bearer token (its fingerprint), `None`
    /// without one. Components that share a resource between tenants (the `ingero`
    /// processor's clusters) give each tenant a share of it; every request without a token
    /// counts as one tenant.
    pub tenant: Option<Arc<str>>,
}

/// What a processor did not accept from a batch. Hosts report it as OTLP partial success
/// (HTTP 200 / gRPC OK with `partial_success`), never as a failed request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessOutcome {
    pub rejected_points: u64,
    /// First reason, for the partial-success `error_message`.
    pub message: Option<String>,
}

impl ProcessOutcome {
    pub fn reject(&mut self, n: u64, reason: impl FnOnce() -> String) {
        self.rejected_points += n;
        if self.message.is_none() {
            self.message = Some(reason());
        }
    }

    pub fn merge(&mut self, other: ProcessOutcome) {
        self.rejected_points += other.rejected_points;
        if self.message.is_none() {
            self.message = other.message;
        }
    }
}

/// Failure to start a component.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("required extension not found: {0}")]
    MissingExtension(String),
    #[error("{0}")]
    Other(String),
}

/// What a component can see of its host.
pub trait Host: Send + Sync {
    /// Every started extension with its id, in `service.extensions` order.
    fn extensions(&self) -> Vec<(ComponentId, Arc<dyn Extension>)>;

    /// For an extension at its start: the TLS side the host built from its `tls` block for
    /// the listener it serves itself at `endpoint_key` (see
    /// [`Extension::served_listeners`]); in `collector-host` an `Arc<tls::ListenerTls>`.
    /// `None`: plaintext (no `tls` block), or a host without TLS.
    fn listener_tls(&self, _endpoint_key: &str) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }
}

/// A metrics processor.
pub trait Processor: Send + Sync {
    /// Called once before the first batch; find extensions here.
    fn start(&self, host: &dyn Host) -> Result<(), StartError>;

    /// Inspect, enrich or consume one batch in place. Must not block on I/O.
    fn process(&self, data: &mut Vec<ResourceMetrics>, ctx: &BatchContext) -> ProcessOutcome;

    /// For a processor that only reads batches: [`Processor::process`] on a shared
    /// borrow, `Some` with the outcome. Hosts call this first and `process` only when it
    /// answers `None` (the default); a batch no stage could change keeps what its decoder
    /// knows of it (see [`recycle::Origin`]).
    fn process_shared(
        &self,
        data: &[ResourceMetrics],
        ctx: &BatchContext,
    ) -> Option<ProcessOutcome> {
        let _ = (data, ctx);
        None
    }

    /// Periodic work at `now`. Returns metrics generated by the tick (e.g. peer lag),
    /// which the host sends down the rest of the pipeline.
    fn tick(&self, now: Timestamp) -> Vec<ResourceMetrics>;

    /// Stop. Safe to call more than once; `start` may follow again.
    fn shutdown(&self);

    /// Append this processor's self-metrics.
    fn telemetry(&self, out: &mut Vec<MetricFamily>);

    /// JSON diagnostics for the admin endpoint, if the processor has any.
    fn diagnostics(&self) -> Option<serde_json::Value> {
        None
    }

    /// The most heap this processor's state can hold at its configured caps (bytes; 0:
    /// nothing that grows with the data). The host sets it aside from the memory budget
    /// (`max_bytes`) of every Prometheus exporter in the processor's pipelines, so one
    /// budget covers both.
    fn memory_bound(&self) -> usize {
        0
    }
}

/// An extension: a component outside the data path (threshold store, auth, ...).
pub trait Extension: Send + Sync {
    fn start(&self, host: &dyn Host) -> Result<(), StartError>;

    /// Safe to call more than once.
    fn shutdown(&self);

    /// An interface this extension offers other components, asked for by its type: a
    /// shared trait object such as `Arc<dyn SomeSink>`, boxed (see [`provide`] to answer and
    /// [`provided`] / [`find_provided`] to ask). `None`: not offered. The contract names no
    /// interface; a distribution's crates define them (Fleet's threshold sink and view
    /// board are in `ingero-wire`).
    fn provides(&self, _interface: TypeId) -> Option<Box<dyn Any + Send + Sync>> {
        None
    }

    /// The response middleware this extension offers receivers, if any (see
    /// [`middleware`]); receivers name it in `protocols.*.middlewares`.
    fn response_middleware(&self) -> Option<Arc<dyn middleware::ResponseMiddleware>> {
        None
    }

    /// HTTP listeners the host serves for this extension (e.g. the threshold API).
    fn api_listeners(&self) -> Vec<api::ApiListener> {
        Vec::new()
    }

    /// Listeners this extension binds and serves itself (handlers that read request
    /// bodies). Declared so that the host checks them as its own: address conflicts,
    /// plaintext only on loopback, and the `tls` block (with `host_tls` in the factory's
    /// metadata), whose acceptor [`Host::listener_tls`] then hands over at start.
    fn served_listeners(&self) -> Vec<api::ServedListener> {
        Vec::new()
    }

    /// The authenticator that guards [`Extension::api_listeners`] (`auth:` in its config).
    fn auth(&self) -> Option<&config::AuthRef> {
        None
    }

    /// Append this extension's self-metrics.
    fn telemetry(&self, _out: &mut Vec<MetricFamily>) {}

    /// This extension as `Any`, for a component that knows its concrete type and finds it
    /// through the [`Host`] (a distribution's exporter reaching its own extension, an
    /// extension reaching the host's authenticator). `None`: not offered.
    fn as_any(self: Arc<Self>) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }
}

/// A host with no extensions (unit tests, standalone processors).
#[derive(Debug, Default, Clone, Copy)]
pub struct EmptyHost;

impl Host for EmptyHost {
    fn extensions(&self) -> Vec<(ComponentId, Arc<dyn Extension>)> {
        Vec::new()
    }
}

/// A host holding a fixed list of extensions.
#[derive(Default, Clone)]
pub struct StaticHost {
    pub extensions: Vec<(ComponentId, Arc<dyn Extension>)>,
}

impl fmt::Debug for StaticHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.extensions.iter().map(|(id, _)| id))
            .finish()
    }
}

impl Host for StaticHost {
    fn extensions(&self) -> Vec<(ComponentId, Arc<dyn Extension>)> {
        self.extensions.clone()
    }
}

/// Answer [`Extension::provides`] for interface `T`: `make()` boxed when `interface` is
/// `T`, else `None`. Chain several with `or_else`.
pub fn provide<T: Any + Send + Sync>(
    interface: TypeId,
    make: impl FnOnce() -> T,
) -> Option<Box<dyn Any + Send + Sync>> {
    (interface == TypeId::of::<T>()).then(|| Box::new(make()) as Box<dyn Any + Send + Sync>)
}

/// Interface `T` of `ext`, if it offers one.
pub fn provided<T: Any + Send + Sync>(ext: &(impl Extension + ?Sized)) -> Option<T> {
    ext.provides(TypeId::of::<T>())
        .and_then(|b| b.downcast::<T>().ok())
        .map(|b| *b)
}

/// The first extension in `host` that offers interface `T`, with its id.
pub fn find_provided<T: Any + Send + Sync>(host: &dyn Host) -> Option<(ComponentId, T)> {
    host.extensions()
        .into_iter()
        .find_map(|(id, ext)| provided::<T>(&*ext).map(|t| (id, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_ids_parse_like_otelcol() {
        let id = ComponentId::parse("otlp/agents").unwrap();
        assert_eq!(id.kind(), "otlp");
        assert_eq!(id.name(), Some("agents"));
        assert_eq!(id.to_string(), "otlp/agents");
        assert_eq!(ComponentId::parse("ingero").unwrap().name(), None);
        for bad in ["", "1abc", "a-b", "x/", "x/a b", "x/a/b"] {
            assert!(ComponentId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn outcome_keeps_first_message() {
        let mut o = ProcessOutcome::default();
        o.reject(2, || "first".into());
        o.reject(1, || "second".into());
        let mut other = ProcessOutcome::default();
        other.reject(3, || "third".into());
        o.merge(other);
        assert_eq!(o.rejected_points, 6);
        assert_eq!(o.message.as_deref(), Some("first"));
    }

    trait Greeter: Send + Sync {
        fn greet(&self) -> &'static str;
    }
    struct Hello;
    impl Greeter for Hello {
        fn greet(&self) -> &'static str {
            "hello"
        }
    }
    struct Offering;
    impl Extension for Offering {
        fn start(&self, _: &dyn Host) -> Result<(), StartError> {
            Ok(())
        }
        fn shutdown(&self) {}
        fn provides(&self, interface: TypeId) -> Option<Box<dyn Any + Send + Sync>> {
            provide::<Arc<dyn Greeter>>(interface, || Arc::new(Hello))
        }
    }
    struct Silent;
    impl Extension for Silent {
        fn start(&self, _: &dyn Host) -> Result<(), StartError> {
            Ok(())
        }
        fn shutdown(&self) {}
    }

    #[test]
    fn interfaces_are_found_by_type() {
        let host = StaticHost {
            extensions: vec![
                (
                    ComponentId::new("silent"),
                    Arc::new(Silent) as Arc<dyn Extension>,
                ),
                (ComponentId::new("offering"), Arc::new(Offering)),
            ],
        };
        let (id, g) = find_provided::<Arc<dyn Greeter>>(&host).unwrap();
        assert_eq!(id.kind(), "offering");
        assert_eq!(g.greet(), "hello");
        // Another type is not offered, even by the extension that offers a greeter.
        assert!(provided::<Arc<str>>(&Offering).is_none());
        assert!(find_provided::<Arc<str>>(&host).is_none());
    }
}
