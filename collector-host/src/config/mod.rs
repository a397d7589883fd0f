//! The host's config: loading ([`source`]), typed host-component configs ([`model`]),
//! and the [`Plan`]: the validated, instantiated set of components and pipelines.
//! `validate`, `print-config` and the run path all go through [`Plan::build`], so they
//! accept and reject exactly the same documents.

mod listeners;
pub mod model;
pub mod source;
pub mod tls;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use component::config::{ComponentConfig, ConfigErrors, decode};
use component::{ComponentId, ConfigValue, Processor};
use fleet_prometheus::PrometheusExporterConfig;
use ingero_extension::ThresholdExtension;

use crate::registry::{self, Kind};
use listeners::{check_listener_conflicts, check_plaintext, listener_decls, load_tls, take_tls};
use model::{
    DebugExporterConfig, HealthCheckConfig, OtlpExporterConfig, OtlpReceiverConfig, RawConfig,
    ServerTlsConfig, TelemetryConfig,
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
}

impl std::fmt::Debug for ProcessorPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorPlan")
            .field("kind", &self.kind)
            .field("tick_interval", &self.tick_interval)
            .finish()
    }
}

/// A configured exporter.
#[derive(Debug, Clone)]
pub enum ExporterPlan {
    Prometheus(PrometheusExporterConfig),
    Debug(DebugExporterConfig),
    OtlpGrpc(OtlpExporterConfig),
    OtlpHttp(OtlpExporterConfig),
}

/// A configured extension.
#[derive(Clone)]
pub enum ExtensionPlan {
    Threshold(Arc<ThresholdExtension>),
    HealthCheck(HealthCheckConfig),
    Auth(Arc<crate::auth::AuthExtension>),
}

impl std::fmt::Debug for ExtensionPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExtensionPlan::Threshold(_) => f.write_str("Threshold"),
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
}

/// Decode a section entry: id, registry type, component config.
fn section<T>(
    errs: &mut ConfigErrors,
    section: &str,
    kind: Kind,
    entries: &BTreeMap<String, ConfigValue>,
    mut build: impl FnMut(&str, &ConfigValue, &str) -> Result<T, ConfigErrors>,
) -> BTreeMap<ComponentId, T> {
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
        let Some(info) = registry::lookup(kind, id.kind()) else {
            errs.push(
                path,
                format!(
                    "unknown {} type {:?}; known: {}",
                    kind.singular(),
                    id.kind(),
                    registry::names(kind).join(", ")
                ),
            );
            continue;
        };
        match build(info.name, value, &path) {
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

impl Plan {
    /// Validate `root` completely and instantiate its components (pure: no sockets).
    pub fn build(root: &ConfigValue) -> Result<Plan, ConfigErrors> {
        let raw: RawConfig = if root.is_null() {
            RawConfig::default()
        } else {
            serde_path_to_error::deserialize(root).map_err(|e| {
                let path = e.path().to_string();
                ConfigErrors::from(component::ConfigError::new(
                    if path == "." { String::new() } else { path },
                    e.into_inner().to_string(),
                ))
            })?
        };
        let mut errs = ConfigErrors::new();
        if !raw.connectors.is_empty() {
            errs.push("connectors", "connectors are not supported by ingero-fleet");
        }

        let receivers = section(
            &mut errs,
            "receivers",
            Kind::Receiver,
            &raw.receivers,
            |_, v, _| decode_host::<OtlpReceiverConfig>(v).map(ReceiverPlan::Otlp),
        );
        let processors = section(
            &mut errs,
            "processors",
            Kind::Processor,
            &raw.processors,
            |ty, v, _| registry::create_processor(ty, v),
        );
        let exporters =
            section(
                &mut errs,
                "exporters",
                Kind::Exporter,
                &raw.exporters,
                |ty, v, _| match ty {
                    "prometheus" => {
                        let (v, tls) = take_tls(v)?;
                        decode_host::<PrometheusExporterConfig>(&v)
                            .map(|c| (ExporterPlan::Prometheus(c), tls))
                    }
                    "debug" => decode_host::<DebugExporterConfig>(v)
                        .map(|c| (ExporterPlan::Debug(c), None)),
                    "otlp" => decode_host::<OtlpExporterConfig>(v)
                        .map(|c| (ExporterPlan::OtlpGrpc(c), None)),
                    _ => decode_host::<OtlpExporterConfig>(v)
                        .map(|c| (ExporterPlan::OtlpHttp(c), None)),
                },
            );
        let mut component_tls: BTreeMap<String, ServerTlsConfig> = BTreeMap::new();
        let exporters: BTreeMap<ComponentId, ExporterPlan> = exporters
            .into_iter()
            .map(|(id, (plan, tls))| {
                if let Some(t) = tls {
                    component_tls.insert(format!("exporters.{id}"), t);
                }
                (id, plan)
            })
            .collect();
        let defined_ext = section(
            &mut errs,
            "extensions",
            Kind::Extension,
            &raw.extensions,
            |ty, v, path| match ty {
                ingero_extension::TYPE => {
                    let (v, tls) = take_tls(v)?;
                    ingero_extension::create(&v)
                        .map(|e| (ExtensionPlan::Threshold(Arc::new(e)), tls))
                }
                crate::auth::TYPE => decode_host::<crate::auth::config::AuthConfig>(v).map(|c| {
                    let id = path.strip_prefix("extensions.").unwrap_or(path);
                    (
                        ExtensionPlan::Auth(Arc::new(crate::auth::AuthExtension::new(id, c))),
                        None,
                    )
                }),
                _ => decode_host::<HealthCheckConfig>(v)
                    .map(|c| (ExtensionPlan::HealthCheck(c), None)),
            },
        );
        let defined_ext: BTreeMap<ComponentId, ExtensionPlan> = defined_ext
            .into_iter()
            .map(|(id, (plan, tls))| {
                if let Some(t) = tls {
                    component_tls.insert(format!("extensions.{id}"), t);
                }
                (id, plan)
            })
            .collect();

        let mut extensions = Vec::new();
        for (i, key) in raw.service.extensions.iter().enumerate() {
            let path = format!("service.extensions.{i}");
            match ComponentId::parse(key) {
                Ok(id) => match defined_ext.get(&id) {
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
                &|id| receivers.contains_key(id),
                &|k| raw.receivers.contains_key(k),
            );
            let pr = resolve(
                &p.processors,
                "processors",
                &|id| processors.contains_key(id),
                &|k| raw.processors.contains_key(k),
            );
            let ex = resolve(
                &p.exporters,
                "exporters",
                &|id| exporters.contains_key(id),
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
        // One threshold-publishing processor per process: two would overwrite each other's
        // thresholds in the store.
        let ingero_used: Vec<String> = processors
            .iter()
            .filter(|(id, p)| {
                p.kind == ingero_processor::TYPE
                    && pipelines.iter().any(|pl| pl.processors.contains(id))
            })
            .map(|(id, _)| id.to_string())
            .collect();
        if ingero_used.len() > 1 {
            errs.push(
                "processors",
                format!(
                    "at most one ingero processor may run (found {})",
                    ingero_used.join(", ")
                ),
            );
        }

        // Middlewares must name an enabled ingero_threshold extension.
        let mut middlewares = HashMap::new();
        for (id, ReceiverPlan::Otlp(cfg)) in &receivers {
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
                            Some((_, ExtensionPlan::Threshold(_))) => ids.push(mid),
                            Some(_) => errs.push(path, format!("extension {:?} is not an HTTP/gRPC server middleware", m.id)),
                            None => errs.push(path, format!("middleware {:?} must be an extension listed in service.extensions", m.id)),
                        },
                        Err(e) => errs.push(path, e),
                    }
                }
                middlewares.insert((id.clone(), proto), Some(ids));
            }
        }

        let telemetry = raw.service.telemetry.clone();
        if telemetry.metrics.readers.len() > 1 {
            errs.push(
                "service.telemetry.metrics.readers",
                "at most one pull reader is supported",
            );
        }

        for (path, r) in auth_refs(&receivers, &exporters, &extensions) {
            let path = format!("{path}.auth.authenticator");
            match ComponentId::parse(&r.authenticator) {
                Ok(aid) => match extensions.iter().find(|(e, _)| e == &aid) {
                    Some((_, ExtensionPlan::Auth(_))) => {}
                    Some(_) => errs.push(path, format!("extension {:?} is not an ingero_auth authenticator", r.authenticator)),
                    None => errs.push(path, format!("authenticator {:?} must be an ingero_auth extension listed in service.extensions", r.authenticator)),
                },
                Err(e) => errs.push(path, e),
            }
        }

        let decls = listener_decls(
            &receivers,
            &exporters,
            &extensions,
            &telemetry,
            &component_tls,
        );
        check_listener_conflicts(&mut errs, &decls);
        check_plaintext(&mut errs, &decls, raw.service.allow_plaintext_listeners);
        let (listener_tls, mut warnings) = load_tls(&mut errs, &decls);
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
            receivers,
            processors,
            exporters,
            extensions,
            pipelines,
            telemetry,
            middlewares,
            listener_tls,
            warnings,
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

    /// The first enabled threshold extension.
    pub fn threshold_extension(&self) -> Option<(&ComponentId, &Arc<ThresholdExtension>)> {
        self.extensions.iter().find_map(|(id, e)| match e {
            ExtensionPlan::Threshold(t) => Some((id, t)),
            _ => None,
        })
    }
}

/// Every listener's `auth` reference, with the key path of the listener.
fn auth_refs<'a>(
    receivers: &'a BTreeMap<ComponentId, ReceiverPlan>,
    exporters: &'a BTreeMap<ComponentId, ExporterPlan>,
    extensions: &'a [(ComponentId, ExtensionPlan)],
) -> Vec<(String, &'a component::config::AuthRef)> {
    let mut out = Vec::new();
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
            ExtensionPlan::Threshold(t) => t.config().auth.as_ref(),
            ExtensionPlan::HealthCheck(c) => c.auth.as_ref(),
            ExtensionPlan::Auth(_) => None,
        };
        if let Some(r) = r {
            out.push((format!("extensions.{id}"), r));
        }
    }
    out
}
