//! The host's config: loading ([`source`]), typed host-component configs ([`model`]),
//! and the [`Plan`]: the validated, instantiated set of components and pipelines.
//! `validate`, `print-config` and the run path all go through [`Plan::build_with`] (with the binary's components), so they
//! accept and reject exactly the same documents.

mod listeners;
pub mod model;
pub mod payload_limits;
pub mod source;
pub mod tls;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use component::config::{ComponentConfig, ConfigErrors, decode};
use component::{ComponentId, ConfigValue, Extension, Processor};
use fleet_prometheus::PrometheusExporterConfig;

use crate::registry::{Components, Kind};
use listeners::{
    check_listener_conflicts, check_plaintext, listener_decls, load_tls, open_listener_warnings,
    take_tls,
};
use model::{
    DebugExporterConfig, HealthCheckConfig, MetricsLevel, OtlpExporterConfig, OtlpReceiverConfig,
    RawConfig, ServerTlsConfig, TelemetryConfig,
};

/// A configured receiver.
#[derive(Debug, Clone)]
pub enum ReceiverPlan {
    Otlp(OtlpReceiverConfig),
}

/// A configured processor instance (one per id, shared by the pipelines that list it).
pub struct ProcessorPlan {
    pub kind: &'static str,
    pub processor: Arc<dyn Processor>,
    pub tick_interval: Duration,
    /// At most one instance may run in a process (from the factory's metadata).
    pub singleton: bool,
}

impl std::fmt::Debug for ProcessorPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorPlan")
            .field("kind", &self.kind)
            .field("tick_interval", &self.tick_interval)
            .finish()
    }
}

/// A configured exporter: a host built-in, or one built by a distribution's factory.
#[derive(Clone)]
pub enum ExporterPlan {
    Prometheus(PrometheusExporterConfig),
    Debug(DebugExporterConfig),
    OtlpGrpc(OtlpExporterConfig),
    OtlpHttp(OtlpExporterConfig),
    Component(Arc<dyn crate::pipeline::Exporter>),
}

impl std::fmt::Debug for ExporterPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExporterPlan::Prometheus(c) => write!(f, "Prometheus({c:?})"),
            ExporterPlan::Debug(c) => write!(f, "Debug({c:?})"),
            ExporterPlan::OtlpGrpc(c) => write!(f, "OtlpGrpc({c:?})"),
            ExporterPlan::OtlpHttp(c) => write!(f, "OtlpHttp({c:?})"),
            ExporterPlan::Component(_) => f.write_str("Component"),
        }
    }
}

/// A configured extension: one built by a component crate's factory, or a host built-in.
#[derive(Clone)]
pub enum ExtensionPlan {
    Component(Arc<dyn Extension>),
    HealthCheck(Box<HealthCheckConfig>),
    Auth(Arc<crate::auth::AuthExtension>),
}

impl std::fmt::Debug for ExtensionPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExtensionPlan::Component(_) => f.write_str("Component"),
            ExtensionPlan::HealthCheck(c) => write!(f, "HealthCheck({c:?})"),
            ExtensionPlan::Auth(a) => write!(f, "Auth({:?})", a.config),
        }
    }
}

/// Signal of a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineSignal {
    Metrics,
    Traces,
    Logs,
}

#[derive(Debug, Clone)]
pub struct PipelinePlan {
    pub name: String,
    pub signal: PipelineSignal,
    pub receivers: Vec<ComponentId>,
    pub processors: Vec<ComponentId>,
    pub exporters: Vec<ComponentId>,
}

/// The `tls` block that applies to one listener.
#[derive(Debug, Clone)]
pub struct ListenerTlsPlan {
    /// Key path of the block (`receivers.otlp.protocols.http.tls`).
    pub tls_path: String,
    pub config: ServerTlsConfig,
}

/// Everything needed to run, validated.
#[derive(Debug)]
pub struct Plan {
    pub receivers: BTreeMap<ComponentId, ReceiverPlan>,
    pub processors: BTreeMap<ComponentId, ProcessorPlan>,
    pub exporters: BTreeMap<ComponentId, ExporterPlan>,
    /// Enabled extensions, in `service.extensions` order.
    pub extensions: Vec<(ComponentId, ExtensionPlan)>,
    pub pipelines: Vec<PipelinePlan>,
    pub telemetry: TelemetryConfig,
    /// Receiver -> explicit middleware list per protocol (`None` = automatic).
    pub middlewares: HashMap<(ComponentId, &'static str), Option<Vec<ComponentId>>>,
    /// TLS per listener, keyed by the key path of the listener's endpoint
    /// (`receivers.otlp.protocols.http.endpoint`); absent = plaintext.
    pub listener_tls: HashMap<String, ListenerTlsPlan>,
    /// Findings that do not stop the config (`key.path: message`), e.g. a private key
    /// file others can read.
    pub warnings: Vec<String>,
    /// The binary's request scope (`Components::with_request_scope`): receivers, the
    /// ingest screen and token scopes read requests' and resources' scopes through it.
    pub scope: Arc<dyn component::scope::RequestScope>,
    /// The prefix of the host's own metric families (the distribution's,
    /// [`Components::metric_prefix`]).
    pub metric_prefix: component::telemetry::MetricPrefix,
    /// Family name prefixes the distribution's components own
    /// ([`Components::reserved_metric_prefixes`]).
    pub reserved_metric_prefixes: &'static [&'static str],
    /// Gauges the distribution's processors write under a reserved name
    /// ([`Components::pipeline_gauges`]).
    pub pipeline_gauges: &'static [&'static str],
    /// The Prometheus exporter's `drop_attributes` where a config leaves it unset
    /// ([`Components::prometheus_drop_attributes`]).
    pub prometheus_drop_attributes: &'static [&'static str],
}

/// Decode a section entry: id, registry type, component config.
fn section<T>(
    errs: &mut ConfigErrors,
    components: &Components,
    kind: Kind,
    entries: &BTreeMap<String, ConfigValue>,
    mut build: impl FnMut(&'static str, &ComponentId, &ConfigValue) -> Result<T, ConfigErrors>,
) -> BTreeMap<ComponentId, T> {
    let section = kind.section();
    let mut out = BTreeMap::new();
    for (key, value) in entries {
        let path = format!("{section}.{key}");
        let id = match ComponentId::parse(key) {
            Ok(id) => id,
            Err(e) => {
                errs.push(path, e);
                continue;
            }
        };
        let Some(info) = components.lookup(kind, id.kind()) else {
            errs.push(
                path,
                format!(
                    "unknown {} type {:?}; known: {}",
                    kind.singular(),
                    id.kind(),
                    components.names(kind).join(", ")
                ),
            );
            continue;
        };
        match build(info.type_name, &id, value) {
            Ok(v) => {
                out.insert(id, v);
            }
            Err(e) => errs.extend_prefixed(e, &path),
        }
    }
    out
}

fn decode_host<T: ComponentConfig>(v: &ConfigValue) -> Result<T, ConfigErrors> {
    decode::<T>(v)
}

/// The component sections, decoded and instantiated.
struct Sections {
    receivers: BTreeMap<ComponentId, ReceiverPlan>,
    processors: BTreeMap<ComponentId, ProcessorPlan>,
    exporters: BTreeMap<ComponentId, ExporterPlan>,
    /// Every defined extension (enabled or not).
    extensions: BTreeMap<ComponentId, ExtensionPlan>,
    /// `tls` blocks the host took out of component configs, by `section.id`.
    component_tls: BTreeMap<String, ServerTlsConfig>,
}

/// Parse the document into the host's raw shape (the first error stops here).
fn decode_raw(root: &ConfigValue) -> Result<RawConfig, ConfigErrors> {
    if root.is_null() {
        return Ok(RawConfig::default());
    }
    serde_path_to_error::deserialize(root).map_err(|e| {
        let path = e.path().to_string();
        ConfigErrors::from(component::ConfigError::new(
            if path == "." { String::new() } else { path },
            e.into_inner().to_string(),
        ))
    })
}

/// Decode every receiver, processor, exporter and extension entry with its factory.
fn build_sections(errs: &mut ConfigErrors, raw: &RawConfig, components: &Components) -> Sections {
    let receivers = section(
        errs,
        components,
        Kind::Receiver,
        &raw.receivers,
        |_, _, v| decode_host::<OtlpReceiverConfig>(v).map(ReceiverPlan::Otlp),
    );
    let processors = section(
        errs,
        components,
        Kind::Processor,
        &raw.processors,
        |ty, _, v| {
            let f = components.processor(ty).ok_or_else(|| {
                ConfigErrors::from(component::ConfigError::new(
                    "",
                    format!("unknown processor type {ty:?}"),
                ))
            })?;
            let created = f.create(v)?;
            Ok(ProcessorPlan {
                kind: f.metadata().type_name,
                processor: created.processor,
                tick_interval: if created.tick_interval.is_zero() {
                    Duration::from_secs(1)
                } else {
                    created.tick_interval
                },
                singleton: f.metadata().singleton,
            })
        },
    );
    let mut component_tls: BTreeMap<String, ServerTlsConfig> = BTreeMap::new();
    let exporters = section(
        errs,
        components,
        Kind::Exporter,
        &raw.exporters,
        |ty, id, v| match (components.exporter(ty), ty) {
            (Some(f), _) => f.create(id, v).map(|e| (ExporterPlan::Component(e), None)),
            (None, "prometheus") => {
                let (v, tls) = take_tls(v)?;
                decode_host::<PrometheusExporterConfig>(&v)
                    .map(|c| (ExporterPlan::Prometheus(c), tls))
            }
            (None, "debug") => {
                decode_host::<DebugExporterConfig>(v).map(|c| (ExporterPlan::Debug(c), None))
            }
            (None, "otlp") => {
                decode_host::<OtlpExporterConfig>(v).map(|c| (ExporterPlan::OtlpGrpc(c), None))
            }
            (None, _) => {
                decode_host::<OtlpExporterConfig>(v).map(|c| (ExporterPlan::OtlpHttp(c), None))
            }
        },
    );
    let exporters = exporters
        .into_iter()
        .map(|(id, (plan, tls))| {
            if let Some(t) = tls {
                component_tls.insert(format!("exporters.{id}"), t);
            }
            (id, plan)
        })
        .collect();
    let extensions = section(
        errs,
        components,
        Kind::Extension,
        &raw.extensions,
        |ty, id, v| {
            if ty == crate::auth::TYPE {
                return decode_host::<crate::auth::config::AuthConfig>(v).map(|c| {
                    let ext = crate::auth::AuthExtension::new(
                        &id.to_string(),
                        c,
                        components.request_scope().clone(),
                    )
                    .with_metric_prefix(components.metric_prefix());
                    (ExtensionPlan::Auth(Arc::new(ext)), None)
                });
            }
            match components.extension(ty) {
                Some(f) => {
                    let (v, tls) = if f.metadata().host_tls {
                        take_tls(v)?
                    } else {
                        (v.clone(), None)
                    };
                    f.create(id, &v).map(|e| (ExtensionPlan::Component(e), tls))
                }
                None => decode_host::<HealthCheckConfig>(v)
                    .map(|c| (ExtensionPlan::HealthCheck(Box::new(c)), None)),
            }
        },
    );
    let extensions = extensions
        .into_iter()
        .map(|(id, (plan, tls))| {
            if let Some(t) = tls {
                component_tls.insert(format!("extensions.{id}"), t);
            }
            (id, plan)
        })
        .collect();
    Sections {
        receivers,
        processors,
        exporters,
        extensions,
        component_tls,
    }
}

/// The extensions `service.extensions` enables, in its order.
fn enabled_extensions(
    errs: &mut ConfigErrors,
    raw: &RawConfig,
    defined: &BTreeMap<ComponentId, ExtensionPlan>,
) -> Vec<(ComponentId, ExtensionPlan)> {
    let mut extensions = Vec::new();
    for (i, key) in raw.service.extensions.iter().enumerate() {
        let path = format!("service.extensions.{i}");
        match ComponentId::parse(key) {
            Ok(id) => match defined.get(&id) {
                Some(p) if !extensions.iter().any(|(e, _)| e == &id) => {
                    extensions.push((id, p.clone()))
                }
                Some(_) => errs.push(path, format!("extension {key:?} listed twice")),
                None if raw.extensions.contains_key(key) => {} // already reported
                None => errs.push(
                    path,
                    format!("extension {key:?} is not defined under extensions"),
                ),
            },
            Err(e) => errs.push(path, e),
        }
    }
    extensions
}

/// Every `service.pipelines` entry with its components resolved.
fn build_pipelines(errs: &mut ConfigErrors, raw: &RawConfig, s: &Sections) -> Vec<PipelinePlan> {
    let mut pipelines = Vec::new();
    if raw.service.pipelines.is_empty() {
        errs.push(
            "service.pipelines",
            "at least one metrics pipeline is required",
        );
    }
    for (name, p) in &raw.service.pipelines {
        let path = format!("service.pipelines.{name}");
        let signal = match name.split('/').next() {
            Some("metrics") => PipelineSignal::Metrics,
            Some("traces") => PipelineSignal::Traces,
            Some("logs") => PipelineSignal::Logs,
            _ => {
                errs.push(
                    path,
                    "pipeline id must be metrics[/name], traces[/name] or logs[/name]",
                );
                continue;
            }
        };
        let mut resolve = |list: &[String],
                           what: &str,
                           defined: &dyn Fn(&ComponentId) -> bool,
                           raw_has: &dyn Fn(&str) -> bool| {
            let mut ids = Vec::new();
            for (i, key) in list.iter().enumerate() {
                let p = format!("{path}.{what}.{i}");
                match ComponentId::parse(key) {
                    Ok(id) if defined(&id) => {
                        if ids.contains(&id) {
                            errs.push(p, format!("{key:?} listed twice"));
                        } else {
                            ids.push(id);
                        }
                    }
                    Ok(_) if raw_has(key) => {} // its own error was reported
                    Ok(_) => errs.push(p, format!("{key:?} is not defined under {what}")),
                    Err(e) => errs.push(p, e),
                }
            }
            ids
        };
        let r = resolve(
            &p.receivers,
            "receivers",
            &|id| s.receivers.contains_key(id),
            &|k| raw.receivers.contains_key(k),
        );
        let pr = resolve(
            &p.processors,
            "processors",
            &|id| s.processors.contains_key(id),
            &|k| raw.processors.contains_key(k),
        );
        let ex = resolve(
            &p.exporters,
            "exporters",
            &|id| s.exporters.contains_key(id),
            &|k| raw.exporters.contains_key(k),
        );
        if p.receivers.is_empty() {
            errs.push(
                format!("{path}.receivers"),
                "must list at least one receiver",
            );
        }
        if p.exporters.is_empty() {
            errs.push(
                format!("{path}.exporters"),
                "must list at least one exporter",
            );
        }
        if signal != PipelineSignal::Metrics && !p.processors.is_empty() {
            errs.push(
                format!("{path}.processors"),
                "the Ingero processors handle metrics only; traces and logs pipelines pass data through",
            );
        }
        pipelines.push(PipelinePlan {
            name: name.clone(),
            signal,
            receivers: r,
            processors: pr,
            exporters: ex,
        });
    }
    if !raw.service.pipelines.is_empty()
        && !pipelines
            .iter()
            .any(|p| p.signal == PipelineSignal::Metrics)
    {
        errs.push(
            "service.pipelines",
            "at least one metrics pipeline is required",
        );
    }
    pipelines
}

/// A singleton processor type (e.g. `ingero`: two would overwrite each other's
/// thresholds in the store) may run once per process.
fn check_singletons(
    errs: &mut ConfigErrors,
    processors: &BTreeMap<ComponentId, ProcessorPlan>,
    pipelines: &[PipelinePlan],
) {
    let mut by_type: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, p) in processors {
        if p.singleton && pipelines.iter().any(|pl| pl.processors.contains(id)) {
            by_type.entry(p.kind).or_default().push(id.to_string());
        }
    }
    for (ty, used) in by_type {
        if used.len() > 1 {
            errs.push(
                "processors",
                format!(
                    "at most one {ty} processor may run (found {})",
                    used.join(", ")
                ),
            );
        }
    }
}

/// Explicit `middlewares` lists per receiver protocol; each must name an enabled
/// extension that offers a response middleware.
fn middleware_lists(
    errs: &mut ConfigErrors,
    receivers: &BTreeMap<ComponentId, ReceiverPlan>,
    extensions: &[(ComponentId, ExtensionPlan)],
) -> HashMap<(ComponentId, &'static str), Option<Vec<ComponentId>>> {
    let mut middlewares = HashMap::new();
    for (id, ReceiverPlan::Otlp(cfg)) in receivers {
        let protos: [(&'static str, Option<&Vec<model::MiddlewareRef>>); 2] = [
            (
                "http",
                cfg.protocols
                    .http
                    .as_ref()
                    .and_then(|h| h.middlewares.as_ref()),
            ),
            (
                "grpc",
                cfg.protocols
                    .grpc
                    .as_ref()
                    .and_then(|g| g.middlewares.as_ref()),
            ),
        ];
        for (proto, list) in protos {
            let Some(list) = list else {
                middlewares.insert((id.clone(), proto), None);
                continue;
            };
            let mut ids = Vec::new();
            for (i, m) in list.iter().enumerate() {
                let path = format!("receivers.{id}.protocols.{proto}.middlewares.{i}.id");
                match ComponentId::parse(&m.id) {
                    Ok(mid) => match extensions.iter().find(|(e, _)| e == &mid) {
                        Some((_, ExtensionPlan::Component(e)))
                            if e.response_middleware().is_some() =>
                        {
                            ids.push(mid)
                        }
                        Some(_) => errs.push(
                            path,
                            format!("extension {:?} is not an HTTP/gRPC server middleware", m.id),
                        ),
                        None => errs.push(
                            path,
                            format!(
                                "middleware {:?} must be an extension listed in service.extensions",
                                m.id
                            ),
                        ),
                    },
                    Err(e) => errs.push(path, e),
                }
            }
            middlewares.insert((id.clone(), proto), Some(ids));
        }
    }
    middlewares
}

/// Every listener's `auth` must name an enabled `ingero_auth` extension.
fn check_auth_refs(
    errs: &mut ConfigErrors,
    s: &Sections,
    extensions: &[(ComponentId, ExtensionPlan)],
    telemetry: &TelemetryConfig,
) {
    for (path, r) in auth_refs(&s.receivers, &s.exporters, extensions, telemetry) {
        let path = format!("{path}.auth.authenticator");
        match ComponentId::parse(&r.authenticator) {
            Ok(aid) => match extensions.iter().find(|(e, _)| e == &aid) {
                Some((_, ExtensionPlan::Auth(_))) => {}
                Some(_) => errs.push(
                    path,
                    format!("extension {:?} is not an ingero_auth authenticator", r.authenticator),
                ),
                None => errs.push(
                    path,
                    format!(
                        "authenticator {:?} must be an ingero_auth extension listed in service.extensions",
                        r.authenticator
                    ),
                ),
            },
            Err(e) => errs.push(path, e),
        }
    }
}

impl Plan {
    /// Validate `root` completely against `components` and instantiate its components
    /// (pure: no sockets).
    pub fn build_with(root: &ConfigValue, components: &Components) -> Result<Plan, ConfigErrors> {
        let raw = decode_raw(root)?;
        let mut errs = ConfigErrors::new();
        if !raw.connectors.is_empty() {
            errs.push("connectors", "connectors are not supported by ingero-fleet");
        }
        let mut sections = build_sections(&mut errs, &raw, components);
        let extensions = enabled_extensions(&mut errs, &raw, &sections.extensions);
        let pipelines = build_pipelines(&mut errs, &raw, &sections);
        check_singletons(&mut errs, &sections.processors, &pipelines);
        reserve_processor_memory(&mut errs, &mut sections, &pipelines);
        let middlewares = middleware_lists(&mut errs, &sections.receivers, &extensions);
        let telemetry = raw.service.telemetry.clone();
        if telemetry.metrics.readers.len() > 1 {
            errs.push(
                "service.telemetry.metrics.readers",
                "at most one pull reader is supported",
            );
        }
        check_auth_refs(&mut errs, &sections, &extensions, &telemetry);
        let mut telemetry = telemetry;
        let telemetry_warning = self_telemetry_auth(&mut telemetry, &sections, &extensions);
        let decls = listener_decls(
            &sections.receivers,
            &sections.exporters,
            &extensions,
            &telemetry,
            &sections.component_tls,
        );
        check_listener_conflicts(&mut errs, &decls);
        check_plaintext(&mut errs, &decls, raw.service.allow_plaintext_listeners);
        check_self_telemetry(&mut errs, &telemetry);
        let (listener_tls, mut warnings) = load_tls(&mut errs, &decls);
        warnings.extend(telemetry_warning);
        warnings.extend(open_listener_warnings(&decls));
        for (id, e) in &extensions {
            if let ExtensionPlan::Auth(a) = e {
                warnings.extend(
                    a.file_warnings()
                        .iter()
                        .map(|w| format!("extensions.{id}.{w}")),
                );
            }
        }
        errs.into_result()?;
        Ok(Plan {
            receivers: sections.receivers,
            processors: sections.processors,
            exporters: sections.exporters,
            extensions,
            pipelines,
            telemetry,
            middlewares,
            listener_tls,
            warnings,
            scope: components.request_scope().clone(),
            metric_prefix: components.metric_prefix(),
            reserved_metric_prefixes: components.reserved_metric_prefixes(),
            pipeline_gauges: components.pipeline_gauges(),
            prometheus_drop_attributes: components.prometheus_drop_attributes(),
        })
    }

    /// The authenticator a listener's `auth` names (validated by `build`).
    pub fn authenticator(
        &self,
        r: Option<&component::config::AuthRef>,
    ) -> Option<Arc<crate::auth::AuthExtension>> {
        let r = r?;
        self.extensions.iter().find_map(|(id, e)| match e {
            ExtensionPlan::Auth(a) if id.to_string() == r.authenticator => Some(a.clone()),
            _ => None,
        })
    }
}

/// The self-telemetry listener's lifecycle limits and `allowed_hosts`.
fn check_self_telemetry(errs: &mut ConfigErrors, telemetry: &TelemetryConfig) {
    for (i, r) in telemetry.metrics.readers.iter().enumerate() {
        let p = &r.pull.exporter.prometheus;
        let base = format!("service.telemetry.metrics.readers.{i}.pull.exporter.prometheus");
        model::check_lifecycle(
            errs,
            &format!("{base}."),
            p.first_byte_timeout,
            p.idle_timeout,
        );
        component::listen_addr::check_allowed_hosts(
            errs,
            &format!("{base}.allowed_hosts"),
            p.allowed_hosts.as_deref(),
        );
    }
}

/// One memory budget for an exporter and the processors that feed it: the most the
/// processors of a Prometheus exporter's pipelines can hold ([`Processor::memory_bound`],
/// the ingero processor's node tables at `limits.max_nodes_total`) is set aside from the
/// exporter's `max_bytes`, so what is left bounds the exporter's estimate and the
/// processors' tables together stay within `max_bytes`. A processor in two pipelines of
/// the exporter is counted once.
fn reserve_processor_memory(
    errs: &mut ConfigErrors,
    sections: &mut Sections,
    pipelines: &[PipelinePlan],
) {
    for (id, e) in &mut sections.exporters {
        let ExporterPlan::Prometheus(c) = e else {
            continue;
        };
        let mut counted: Vec<&ComponentId> = Vec::new();
        let mut reserve = 0usize;
        for p in pipelines.iter().filter(|p| p.exporters.contains(id)) {
            for pid in &p.processors {
                if counted.contains(&pid) {
                    continue;
                }
                counted.push(pid);
                if let Some(plan) = sections.processors.get(pid) {
                    reserve = reserve.saturating_add(plan.processor.memory_bound());
                }
            }
        }
        if reserve == 0 {
            continue;
        }
        let min = fleet_prometheus::config::MIN_BYTES_PER_CLUSTER;
        match c.max_bytes.checked_sub(reserve).filter(|left| *left >= min) {
            Some(left) => c.max_bytes = left,
            None => errs.push(
                format!("exporters.{id}.max_bytes"),
                format!(
                    "{} must exceed the node tables of the processors in its pipelines \
                     ({reserve} bytes: limits.max_nodes_total x the bytes of a node record) \
                     by at least {min}; raise it or lower limits.max_nodes_total",
                    c.max_bytes
                ),
            ),
        }
    }
}

/// Every listener's `auth` reference, with the key path of the listener.
/// Self-telemetry without its own `auth` follows the first `prometheus` exporter's (the
/// same scrapers read both). With neither while another listener requires a token, the
/// returned warning says who can read it.
fn self_telemetry_auth(
    telemetry: &mut TelemetryConfig,
    s: &Sections,
    extensions: &[(ComponentId, ExtensionPlan)],
) -> Option<String> {
    if telemetry.metrics.level == MetricsLevel::None {
        return None;
    }
    let others: Vec<String> = auth_refs(&s.receivers, &s.exporters, extensions, telemetry)
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    let exporter_auth = s.exporters.values().find_map(|e| match e {
        ExporterPlan::Prometheus(c) => c.auth.clone(),
        _ => None,
    });
    let has_exporter = s
        .exporters
        .values()
        .any(|e| matches!(e, ExporterPlan::Prometheus(_)));
    let reader = telemetry.metrics.readers.first_mut()?;
    let p = &mut reader.pull.exporter.prometheus;
    if p.auth.is_some() {
        return None;
    }
    if let Some(a) = exporter_auth {
        p.auth = Some(a);
        return None;
    }
    let first = others.first()?;
    let what = if has_exporter {
        "the collector's own telemetry"
    } else {
        "every cluster's component families (no prometheus exporter runs)"
    };
    Some(format!(
        "service.telemetry.metrics.readers.0.pull.exporter.prometheus: no auth, so anyone who \
         can reach {}:{} reads {what}, while {first} requires a token; set \
         service.telemetry.metrics.readers.0.pull.exporter.prometheus.auth",
        p.host, p.port
    ))
}

fn auth_refs<'a>(
    receivers: &'a BTreeMap<ComponentId, ReceiverPlan>,
    exporters: &'a BTreeMap<ComponentId, ExporterPlan>,
    extensions: &'a [(ComponentId, ExtensionPlan)],
    telemetry: &'a TelemetryConfig,
) -> Vec<(String, &'a component::config::AuthRef)> {
    let mut out = Vec::new();
    for (i, r) in telemetry.metrics.readers.iter().enumerate() {
        if let Some(a) = &r.pull.exporter.prometheus.auth {
            out.push((
                format!("service.telemetry.metrics.readers.{i}.pull.exporter.prometheus"),
                a,
            ));
        }
    }
    for (id, ReceiverPlan::Otlp(c)) in receivers {
        if let Some(r) = c.protocols.http.as_ref().and_then(|h| h.auth.as_ref()) {
            out.push((format!("receivers.{id}.protocols.http"), r));
        }
        if let Some(r) = c.protocols.grpc.as_ref().and_then(|g| g.auth.as_ref()) {
            out.push((format!("receivers.{id}.protocols.grpc"), r));
        }
    }
    for (id, e) in exporters {
        if let ExporterPlan::Prometheus(c) = e
            && let Some(r) = &c.auth
        {
            out.push((format!("exporters.{id}"), r));
        }
    }
    for (id, e) in extensions {
        let r = match e {
            ExtensionPlan::Component(e) => e.auth(),
            ExtensionPlan::HealthCheck(c) => c.auth.as_ref(),
            ExtensionPlan::Auth(_) => None,
        };
        if let Some(r) = r {
            out.push((format!("extensions.{id}"), r));
        }
    }
    out
}

#[cfg(test)]
mod memory_budget_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn plan(yaml: &str) -> Result<Plan, Vec<String>> {
        let v = component::config::parse_yaml(yaml.as_bytes()).unwrap();
        Plan::build_with(&v, &crate::registry::Components::fleet())
            .map_err(|e| e.iter().map(|e| e.to_string()).collect())
    }

    fn config(max_bytes: usize, nodes: u32, processors: &str) -> String {
        format!(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:4318\n\
             processors:\n  ingero: {{limits: {{max_nodes_total: {nodes}, max_clusters: 4}}}}\n\
             exporters:\n  prometheus: {{endpoint: 127.0.0.1:9464, max_bytes: {max_bytes}}}\n  debug:\n\
             service:\n  pipelines:\n    metrics: {{receivers: [otlp], processors: [{processors}], exporters: [prometheus]}}\n    \
             metrics/2: {{receivers: [otlp], processors: [{processors}], exporters: [prometheus, debug]}}\n  \
             telemetry: {{metrics: {{level: none}}}}\n"
        )
    }

    fn exporter_max_bytes(p: &Plan) -> usize {
        p.exporters
            .values()
            .find_map(|e| match e {
                ExporterPlan::Prometheus(c) => Some(c.max_bytes),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn the_node_tables_are_set_aside_from_the_exporters_max_bytes() {
        let record = ingero_processor::processor::NODE_RECORD_BYTES;
        // The ingero processor in both of the exporter's pipelines: counted once.
        let p = plan(&config(64 << 20, 10_000, "ingero")).unwrap();
        assert_eq!(exporter_max_bytes(&p), (64 << 20) - 10_000 * record);
        // Without a processor that holds anything, the exporter keeps the whole budget.
        let p = plan(&config(64 << 20, 10_000, "")).unwrap();
        assert_eq!(exporter_max_bytes(&p), 64 << 20);
        // A budget the node tables alone would fill is refused by name.
        let errs = plan(&config(10_000 * record, 10_000, "ingero")).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("exporters.prometheus.max_bytes: ")
                && errs[0].contains("limits.max_nodes_total"),
            "{errs:?}"
        );
    }
}
