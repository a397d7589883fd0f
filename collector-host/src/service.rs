//! Running a [`Plan`]: bind every listener, start extensions then processors, build the
//! pipelines, tick processors on timers, and shut down gracefully.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use component::api::Visibility;
use component::middleware::{RequestMiddleware, ResponseMiddleware, Transport};
use component::{BatchContext, ComponentId, Extension, Host, MetricFamily, StaticHost, Timestamp};
use fleet_prometheus::PrometheusExporter;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::model::{HealthCheckConfig, MetricsLevel};
use crate::config::{
    ExporterPlan, ExtensionPlan, ListenerTlsPlan, PipelineSignal, Plan, ReceiverPlan,
};
use crate::exporter::debug::DebugExporter;
use crate::exporter::otlp::OtlpExporter;
use crate::exporter::prometheus::PromExporter;
use crate::ingest::Ingest;
use crate::pipeline::{Exporter, Fanout, MetricsPipeline, PassPipeline, Stage};
use crate::receiver::grpc::{self, GrpcReceiver};
use crate::receiver::http::HttpReceiver;
use crate::server::{self, Handler, ServerOptions, response, streaming_response};
use crate::telemetry::{Telemetry, render_text};
use crate::tls::ListenerTls;

/// Run-time options from the command line.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Time in-flight requests get to finish after a shutdown signal.
    pub drain: Duration,
    /// The binary's name in the `<name> is ready` log line.
    pub name: &'static str,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            drain: Duration::from_secs(10),
            name: "ingero-fleet",
        }
    }
}

async fn bind_at(path: &str, endpoint: &str) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let l = server::bind(endpoint)
        .await
        .with_context(|| format!("{path}: cannot listen on {endpoint}"))?;
    let addr = l
        .local_addr()
        .with_context(|| format!("{path}: no local address"))?;
    Ok((l, addr))
}

struct Listeners {
    shutdown: watch::Receiver<bool>,
    drain: Duration,
    tasks: Vec<JoinHandle<()>>,
    /// `tls` per listener endpoint key path (from the plan).
    tls: HashMap<String, ListenerTlsPlan>,
    telemetry: Arc<Telemetry>,
}

impl Listeners {
    /// Load the listener's certificate (when it has a `tls` block) and start its reloader.
    fn tls(
        &self,
        name: &str,
        endpoint_path: &str,
        alpn: &[&'static [u8]],
    ) -> anyhow::Result<Option<Arc<ListenerTls>>> {
        let Some(t) = self.tls.get(endpoint_path) else {
            return Ok(None);
        };
        let tls = ListenerTls::new(
            name,
            &t.tls_path,
            t.config.clone(),
            alpn,
            self.telemetry.tls(name),
        )
        .map_err(|e| anyhow!("{}.{}: {}", t.tls_path, e.key, e.message))?;
        tls.spawn_reloader(self.shutdown.clone());
        Ok(Some(tls))
    }

    /// Serve `handler` on `endpoint`. `open`: the listener takes no token, so on a loopback
    /// address its requests must name an IP address or localhost; with `allowed_hosts`,
    /// they must name an IP address or one of those ([`server::host_guard`]).
    #[allow(clippy::too_many_arguments)]
    async fn http(
        &mut self,
        name: &str,
        path: &str,
        endpoint: &str,
        handler: Handler,
        opts: Option<ServerOptions>,
        open: bool,
        allowed_hosts: Option<&[String]>,
    ) -> anyhow::Result<()> {
        let tls = self.tls(name, path, crate::tls::ALPN_HTTP)?;
        let hosts = allowed_hosts
            .map(component::listen_addr::AllowedHosts::parse)
            .transpose()
            .map_err(|(i, e)| anyhow!("{}.allowed_hosts.{i}: {e}", listener_base(path)))?;
        let (l, addr) = bind_at(path, endpoint).await?;
        tracing::info!(listener = name, addr = %addr, tls = tls.is_some(), "listening");
        let stats = self.telemetry.listener(name);
        let local = open && addr.ip().is_loopback();
        let check = match hosts {
            Some(hosts) => Some(server::HostCheck::Listed { hosts, local }),
            None => local.then_some(server::HostCheck::Local),
        };
        let handler = match check {
            Some(check) => server::host_guard(handler, stats.clone(), check),
            None => handler,
        };
        let mut opts = opts.unwrap_or(ServerOptions {
            name: name.to_string(),
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            tls: None,
            lifecycle: Default::default(),
        });
        opts.tls = tls;
        let rx = self.shutdown.clone();
        let drain = self.drain;
        self.tasks.push(tokio::spawn(server::serve(
            l, opts, handler, rx, drain, stats,
        )));
        Ok(())
    }
}

/// Header-read limit of the listeners other than the OTLP/HTTP receiver.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The key path of a listener's block from that of its endpoint
/// (`extensions.ingero_threshold.agent_endpoint` -> `extensions.ingero_threshold`).
fn listener_base(endpoint_path: &str) -> &str {
    if endpoint_path.starts_with("service.") {
        return endpoint_path;
    }
    endpoint_path
        .rsplit_once('.')
        .map_or(endpoint_path, |(base, _)| base)
}

/// Server options with a listener's configured connection cap and lifecycle limits. The
/// header-read limit stays 10 s: hyper runs it from the end of one HTTP/1.1 response to
/// the next request's headers, so it also closes an HTTP/1.1 connection idle that long
/// when `idle_timeout` is longer.
fn limited(
    name: &str,
    max_connections: usize,
    lifecycle: crate::conn_guard::Lifecycle,
) -> Option<ServerOptions> {
    Some(ServerOptions {
        name: name.to_string(),
        header_read_timeout: HEADER_READ_TIMEOUT,
        max_connections,
        // Set from the plan by `Listeners::http`.
        tls: None,
        lifecycle,
    })
}

fn health_handler(cfg: &HealthCheckConfig, healthy: Arc<AtomicBool>, started: Instant) -> Handler {
    let path = cfg.path.clone();
    Arc::new(move |req, _| {
        let ok = healthy.load(Relaxed);
        let path_ok = req.uri().path() == path;
        let up = started.elapsed();
        Box::pin(async move {
            if !path_ok {
                return response(404, "application/json", r#"{"error":"not found"}"#);
            }
            if ok {
                let body = format!(
                    r#"{{"status":"Server available","uptime":"{}s"}}"#,
                    up.as_secs()
                );
                response(200, "application/json", body)
            } else {
                response(
                    503,
                    "application/json",
                    r#"{"status":"Server not available"}"#,
                )
            }
        })
    })
}

/// Writes a scrape page into the buffer, calling `flush` wherever the buffer's text is
/// final; `flush` may take it (and returns false to stop the render, which then returns
/// false too). See `PrometheusExporter::render_chunked`.
pub type PageRender =
    Arc<dyn Fn(&mut String, &mut dyn FnMut(&mut String) -> bool) -> bool + Send + Sync>;

/// Scrape pages are sent in chunks of about this size, so memory per scrape stays near
/// `SCRAPE_CHUNK_BYTES * (SCRAPE_CHUNKS_QUEUED + 1)` plus one shard's part of one family,
/// whatever the number of series (a 100k-node page of agent pushes is ~145 MB of text).
const SCRAPE_CHUNK_BYTES: usize = 256 * 1024;
const SCRAPE_CHUNKS_QUEUED: usize = 2;
/// A scraper that reads nothing for this long loses the scrape (the render holds the
/// exporter's render gate, which compaction waits for).
const SCRAPE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

fn metrics_handler(render: PageRender) -> Handler {
    Arc::new(move |req, _| {
        let render = render.clone();
        Box::pin(async move {
            if req.uri().path() != "/metrics" {
                return response(404, "text/plain", "not found; scrape /metrics\n");
            }
            if req.method() == http::Method::HEAD {
                return response(200, fleet_prometheus::CONTENT_TYPE, "");
            }
            if req.method() != http::Method::GET {
                return response(405, "text/plain", "GET only\n");
            }
            let (tx, rx) = tokio::sync::mpsc::channel(SCRAPE_CHUNKS_QUEUED);
            let rt = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                let send = |chunk: String| {
                    let chunk = Ok(bytes::Bytes::from(chunk.into_bytes()));
                    rt.block_on(tokio::time::timeout(SCRAPE_STALL_TIMEOUT, tx.send(chunk)))
                        .is_ok_and(|sent| sent.is_ok())
                };
                let mut buf = String::with_capacity(SCRAPE_CHUNK_BYTES);
                let complete = render(&mut buf, &mut |b: &mut String| {
                    b.len() < SCRAPE_CHUNK_BYTES
                        || send(std::mem::replace(
                            b,
                            String::with_capacity(SCRAPE_CHUNK_BYTES),
                        ))
                });
                if !complete || (!buf.is_empty() && !send(buf)) {
                    tracing::debug!("scrape abandoned: the client stopped reading or left");
                    let _ = tx.try_send(Err(std::io::Error::other("scrape abandoned")));
                }
            });
            streaming_response(fleet_prometheus::CONTENT_TYPE, rx)
        })
    })
}

/// Run until `stop` resolves, then shut down gracefully.
pub async fn run(
    plan: Plan,
    opts: RunOptions,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let telemetry = Arc::new(Telemetry::with_prefix(plan.metric_prefix));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let healthy = Arc::new(AtomicBool::new(false));
    let mut listeners = Listeners {
        shutdown: shutdown_rx.clone(),
        drain: opts.drain,
        tasks: Vec::new(),
        tls: plan.listener_tls.clone(),
        telemetry: telemetry.clone(),
    };
    for w in &plan.warnings {
        tracing::warn!("{w}");
    }

    let auth_exts = start_authenticators(&plan, &mut listeners)?;
    let host = start_extensions(&plan, &mut listeners, auth_exts, &healthy, started).await?;
    let used = start_processors(&plan, &host)?;
    let families = component_families(&plan, &host, &used);
    let exporters = build_exporters(&plan, &host, &mut listeners, &families).await?;
    let pipes = build_pipelines(&plan, &used, &exporters.by_id, &telemetry);
    spawn_receivers(&plan, &host, &mut listeners, &pipes).await?;
    let mut timers = spawn_processor_ticks(&plan, &used, &pipes, &telemetry, &shutdown_rx);
    timers.extend(spawn_prometheus_expiry(&exporters.prom, &shutdown_rx));
    serve_self_telemetry(&plan, &mut listeners, &families, &exporters.prom).await?;

    healthy.store(true, Relaxed);
    tracing::info!(
        pipelines = plan.pipelines.len(),
        processors = used.len(),
        startup_ms = started.elapsed().as_millis() as u64,
        "{} is ready",
        opts.name
    );

    stop.await;
    shutdown(
        &plan,
        &opts,
        &healthy,
        &shutdown_tx,
        listeners,
        timers,
        &used,
        &exporters,
        &host,
    )
    .await;
    Ok(())
}

/// The per-listener authentication gate a listener's `auth` names, if any.
fn gate(
    plan: &Plan,
    r: Option<&component::config::AuthRef>,
    listener: &str,
) -> Option<crate::auth::ListenerAuth> {
    plan.authenticator(r).map(|a| a.listener(listener))
}

/// Self-metrics of every Fleet component, gathered on each scrape.
type ComponentFamilies = Arc<dyn Fn() -> Vec<MetricFamily> + Send + Sync>;

/// Load the authenticators and start their reloaders, before everything that listens: a
/// listener never serves unchecked. Returns them as the first extensions of the host.
fn start_authenticators(
    plan: &Plan,
    listeners: &mut Listeners,
) -> anyhow::Result<Vec<(ComponentId, Arc<dyn Extension>)>> {
    let mut host_exts: Vec<(ComponentId, Arc<dyn Extension>)> = Vec::new();
    for (id, e) in &plan.extensions {
        if let ExtensionPlan::Auth(a) = e {
            a.load_initial()
                .map_err(|e| anyhow!("extensions.{id}: {e}"))?;
            listeners.tasks.push(crate::auth::reload::spawn(
                a.clone(),
                listeners.shutdown.clone(),
            ));
            host_exts.push((id.clone(), a.clone() as Arc<dyn Extension>));
        }
    }
    Ok(host_exts)
}

/// The host an extension starts with: the extensions started before it, and the TLS of
/// the listeners it serves itself.
struct ExtensionHost {
    base: StaticHost,
    tls: HashMap<&'static str, Arc<ListenerTls>>,
}

impl Host for ExtensionHost {
    fn extensions(&self) -> Vec<(ComponentId, Arc<dyn Extension>)> {
        self.base.extensions()
    }

    fn listener_tls(&self, endpoint_key: &str) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let t: Arc<dyn std::any::Any + Send + Sync> = self.tls.get(endpoint_key)?.clone();
        Some(t)
    }
}

/// Start the other extensions in plan order (processors find them at start), binding the
/// API and health-check listeners they ask for. Returns the host of every extension.
async fn start_extensions(
    plan: &Plan,
    listeners: &mut Listeners,
    mut host_exts: Vec<(ComponentId, Arc<dyn Extension>)>,
    healthy: &Arc<AtomicBool>,
    started: Instant,
) -> anyhow::Result<StaticHost> {
    for (id, e) in &plan.extensions {
        match e {
            ExtensionPlan::Auth(_) => {}
            ExtensionPlan::Component(e) => {
                // The TLS of the listeners it serves itself, built here like the host's own
                // (certificate reloads, handshake counters).
                let mut tls = HashMap::new();
                for l in e.served_listeners() {
                    let name = format!("{id}/{}", l.name);
                    let path = format!("extensions.{id}.{}", l.endpoint_key);
                    if let Some(t) = listeners.tls(&name, &path, crate::tls::ALPN_HTTP)? {
                        tls.insert(l.endpoint_key, t);
                    }
                }
                // The extensions started so far (the authenticators first) are its host.
                e.start(&ExtensionHost {
                    base: StaticHost {
                        extensions: host_exts.clone(),
                    },
                    tls,
                })
                .map_err(|e| anyhow!("extensions.{id}: {e}"))?;
                host_exts.push((id.clone(), e.clone()));
                for l in e.api_listeners() {
                    let name = format!("{id}/{}", l.name);
                    let open = e.auth().is_none();
                    let handler = match gate(plan, e.auth(), &name) {
                        Some(g) => crate::auth::gate::api_listener(
                            l.route.clone(),
                            l.admin,
                            l.public_prefix,
                            g,
                        ),
                        None => {
                            let route = l.route.clone();
                            server::api_handler(move |r| route(r, Visibility::All))
                        }
                    };
                    listeners
                        .http(
                            &name,
                            &format!("extensions.{id}.{}", l.endpoint_key),
                            &l.endpoint,
                            handler,
                            limited(
                                &name,
                                l.max_connections,
                                crate::conn_guard::Lifecycle {
                                    first_byte_timeout: l.first_byte_timeout,
                                    idle_timeout: l.idle_timeout,
                                    max_connections_per_client: l.max_connections_per_client,
                                },
                            ),
                            open,
                            l.allowed_hosts.as_deref(),
                        )
                        .await?;
                }
            }
            ExtensionPlan::HealthCheck(c) => {
                let mut handler = health_handler(c, healthy.clone(), started);
                if let Some(g) = gate(plan, c.auth.as_ref(), &id.to_string()) {
                    handler =
                        crate::auth::gate::guard(handler, g, crate::auth::Action::Health, false);
                }
                listeners
                    .http(
                        &id.to_string(),
                        &format!("extensions.{id}.endpoint"),
                        &c.endpoint,
                        handler,
                        limited(&id.to_string(), c.max_connections, c.lifecycle()),
                        c.auth.is_none(),
                        c.allowed_hosts.as_deref(),
                    )
                    .await?;
            }
        }
    }
    Ok(StaticHost {
        extensions: host_exts,
    })
}

/// Start the processors some pipeline uses (otelcol ignores unused ones); returns their ids.
fn start_processors(plan: &Plan, host: &StaticHost) -> anyhow::Result<Vec<ComponentId>> {
    let used: Vec<ComponentId> = plan
        .processors
        .keys()
        .filter(|id| plan.pipelines.iter().any(|p| p.processors.contains(id)))
        .cloned()
        .collect();
    for id in &used {
        if let Some(p) = plan.processors.get(id) {
            p.processor
                .start(host)
                .map_err(|e| anyhow!("processors.{id}: {e}"))?;
        }
    }
    Ok(used)
}

/// Self-metrics of every Fleet component; `metric_placement` says which endpoint serves each.
fn component_families(plan: &Plan, host: &StaticHost, used: &[ComponentId]) -> ComponentFamilies {
    let procs: Vec<_> = used
        .iter()
        .filter_map(|id| plan.processors.get(id))
        .map(|p| p.processor.clone())
        .collect();
    let exts: Vec<Arc<dyn Extension>> = host.extensions.iter().map(|(_, e)| e.clone()).collect();
    let exps: Vec<Arc<dyn Exporter>> = plan
        .exporters
        .iter()
        .filter(|(id, _)| plan.pipelines.iter().any(|p| p.exporters.contains(id)))
        .filter_map(|(_, e)| match e {
            ExporterPlan::Component(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    Arc::new(move || {
        let mut out = Vec::new();
        for p in &procs {
            p.telemetry(&mut out);
        }
        for e in &exps {
            e.telemetry(&mut out);
        }
        for e in &exts {
            e.telemetry(&mut out);
        }
        out
    })
}

/// The started exporters, by id and by the kinds that need a timer or a shutdown step.
struct Exporters {
    by_id: HashMap<ComponentId, Arc<dyn Exporter>>,
    prom: Vec<Arc<PrometheusExporter>>,
    forwarders: Vec<Arc<OtlpExporter>>,
    components: Vec<Arc<dyn Exporter>>,
}

/// Build the exporters some pipeline uses, one instance per id, binding each Prometheus
/// exporter's scrape listener.
async fn build_exporters(
    plan: &Plan,
    host: &StaticHost,
    listeners: &mut Listeners,
    component_families: &ComponentFamilies,
) -> anyhow::Result<Exporters> {
    let mut exporters: HashMap<ComponentId, Arc<dyn Exporter>> = HashMap::new();
    let mut prom: Vec<Arc<PrometheusExporter>> = Vec::new();
    let mut forwarders: Vec<Arc<OtlpExporter>> = Vec::new();
    let mut component_exporters: Vec<Arc<dyn Exporter>> = Vec::new();
    for (id, e) in &plan.exporters {
        if !plan.pipelines.iter().any(|p| p.exporters.contains(id)) {
            continue;
        }
        let counters = listeners.telemetry.exporter(&id.to_string());
        let exp: Arc<dyn Exporter> = match e {
            ExporterPlan::Prometheus(c) => {
                let inner = Arc::new(
                    PrometheusExporter::new(c.clone())
                        .map_err(|e| anyhow!("exporters.{id}: {e}"))?
                        .with_scope_key(plan.scope.key().map(|k| k.key()))
                        .with_names(plan.metric_prefix, plan.reserved_metric_prefixes)
                        .with_pipeline_gauges(plan.pipeline_gauges)
                        .with_default_drop_attributes(plan.prometheus_drop_attributes),
                );
                prom.push(inner.clone());
                let fams = component_families.clone();
                let scr = inner.clone();
                let prefix = plan.metric_prefix;
                let mut handler = metrics_handler(Arc::new(move |buf, flush| {
                    let fams = crate::metric_placement::for_exporter(fams(), prefix);
                    scr.render_chunked(Timestamp::now(), &fams, buf, flush)
                }));
                if let Some(g) = gate(plan, c.auth.as_ref(), &id.to_string()) {
                    handler =
                        crate::auth::gate::guard(handler, g, crate::auth::Action::Scrape, true);
                }
                listeners
                    .http(
                        &id.to_string(),
                        &format!("exporters.{id}.endpoint"),
                        &c.endpoint,
                        handler,
                        limited(
                            &id.to_string(),
                            c.max_connections,
                            crate::conn_guard::Lifecycle {
                                first_byte_timeout: c.first_byte_timeout,
                                idle_timeout: c.idle_timeout,
                                max_connections_per_client: c.max_connections_per_client,
                            },
                        ),
                        c.auth.is_none(),
                        c.allowed_hosts.as_deref(),
                    )
                    .await?;
                Arc::new(PromExporter { inner, counters })
            }
            ExporterPlan::Debug(c) => Arc::new(DebugExporter {
                id: id.to_string(),
                cfg: c.clone(),
                counters,
            }),
            ExporterPlan::OtlpGrpc(c) | ExporterPlan::OtlpHttp(c) => {
                let grpc = matches!(e, ExporterPlan::OtlpGrpc(_));
                let f = Arc::new(
                    OtlpExporter::start(&id.to_string(), c.clone(), grpc, counters)
                        .map_err(|e| anyhow!(e))?,
                );
                forwarders.push(f.clone());
                f
            }
            ExporterPlan::Component(e) => {
                e.start(host)
                    .map_err(|err| anyhow!("exporters.{id}: {err}"))?;
                component_exporters.push(e.clone());
                e.clone()
            }
        };
        exporters.insert(id.clone(), exp);
    }
    Ok(Exporters {
        by_id: exporters,
        prom,
        forwarders,
        components: component_exporters,
    })
}

/// The pipelines, each with the receivers that feed it.
struct Pipes {
    metrics: Vec<(Vec<ComponentId>, Arc<MetricsPipeline>)>,
    pass: Vec<(PipelineSignal, Vec<ComponentId>, Arc<PassPipeline>)>,
}

/// Build every pipeline: metrics pipelines run the used processors' stages in order, traces
/// and logs pipelines pass through to their exporters.
fn build_pipelines(
    plan: &Plan,
    used: &[ComponentId],
    exporters: &HashMap<ComponentId, Arc<dyn Exporter>>,
    telemetry: &Arc<Telemetry>,
) -> Pipes {
    let stages: HashMap<ComponentId, Arc<Stage>> = used
        .iter()
        .filter_map(|id| {
            plan.processors.get(id).map(|p| {
                (
                    id.clone(),
                    Arc::new(Stage {
                        id: id.clone(),
                        processor: p.processor.clone(),
                        counters: telemetry.processor(&id.to_string()),
                    }),
                )
            })
        })
        .collect();
    let pick = |ids: &[ComponentId]| -> Vec<Arc<dyn Exporter>> {
        ids.iter()
            .filter_map(|i| exporters.get(i).cloned())
            .collect()
    };
    let mut metrics_pipes: Vec<(Vec<ComponentId>, Arc<MetricsPipeline>)> = Vec::new();
    let mut pass_pipes: Vec<(PipelineSignal, Vec<ComponentId>, Arc<PassPipeline>)> = Vec::new();
    for p in &plan.pipelines {
        match p.signal {
            PipelineSignal::Metrics => metrics_pipes.push((
                p.receivers.clone(),
                Arc::new(MetricsPipeline {
                    name: p.name.clone(),
                    stages: p
                        .processors
                        .iter()
                        .filter_map(|id| stages.get(id).cloned())
                        .collect(),
                    exporters: pick(&p.exporters),
                    telemetry: telemetry.clone(),
                }),
            )),
            s => pass_pipes.push((
                s,
                p.receivers.clone(),
                Arc::new(PassPipeline {
                    name: p.name.clone(),
                    exporters: pick(&p.exporters),
                }),
            )),
        }
    }
    Pipes {
        metrics: metrics_pipes,
        pass: pass_pipes,
    }
}

/// Bind and serve every receiver that feeds some pipeline (OTLP over HTTP and gRPC).
async fn spawn_receivers(
    plan: &Plan,
    host: &StaticHost,
    listeners: &mut Listeners,
    pipes: &Pipes,
) -> anyhow::Result<()> {
    let telemetry = listeners.telemetry.clone();
    for (id, ReceiverPlan::Otlp(cfg)) in &plan.receivers {
        let fanout = Fanout {
            metrics: pipes
                .metrics
                .iter()
                .filter(|(r, _)| r.contains(id))
                .map(|(_, p)| p.clone())
                .collect(),
            traces: pipes
                .pass
                .iter()
                .filter(|(s, r, _)| *s == PipelineSignal::Traces && r.contains(id))
                .map(|(_, _, p)| p.clone())
                .collect(),
            logs: pipes
                .pass
                .iter()
                .filter(|(s, r, _)| *s == PipelineSignal::Logs && r.contains(id))
                .map(|(_, _, p)| p.clone())
                .collect(),
        };
        if fanout.metrics.is_empty() && fanout.traces.is_empty() && fanout.logs.is_empty() {
            continue;
        }
        let request_mw = |r: Option<&component::config::AuthRef>, listener: &str| {
            gate(plan, r, listener)
                .map(|g| Arc::new(g) as Arc<dyn RequestMiddleware>)
                .into_iter()
                .collect::<Vec<_>>()
        };
        let ingest = |transport, proto: &'static str, auth, listener: &str| {
            let response = response_middlewares(plan, host, id, proto);
            Ingest {
                transport,
                fanout: fanout.clone(),
                counters: telemetry.receiver(&id.to_string(), proto),
                request: request_mw(auth, listener),
                http_header_names: response
                    .iter()
                    .flat_map(|m| m.http_header_names())
                    .collect(),
                response,
                limits: cfg.limits.clone(),
                scope: plan.scope.clone(),
            }
        };
        if let Some(h) = &cfg.protocols.http {
            let name = format!("{id}/http");
            let rx = Arc::new(HttpReceiver {
                cfg: h.clone(),
                ingest: ingest(Transport::Http, "http", h.auth.as_ref(), &name),
                in_flight: (h.max_concurrent_requests > 0)
                    .then(|| Arc::new(tokio::sync::Semaphore::new(h.max_concurrent_requests))),
            });
            let opts = ServerOptions {
                name: name.clone(),
                header_read_timeout: h.read_header_timeout.min(h.idle_timeout),
                max_connections: h.max_connections,
                tls: None,
                lifecycle: h.lifecycle(),
            };
            listeners
                .http(
                    &name,
                    &format!("receivers.{id}.protocols.http.endpoint"),
                    &h.endpoint,
                    rx.handler(),
                    Some(opts),
                    h.auth.is_none(),
                    h.allowed_hosts.as_deref(),
                )
                .await?;
        }
        if let Some(g) = &cfg.protocols.grpc {
            let name = format!("{id}/grpc");
            let path = format!("receivers.{id}.protocols.grpc.endpoint");
            let tls = listeners.tls(&name, &path, crate::tls::ALPN_GRPC)?;
            let (l, addr) = bind_at(&path, &g.endpoint).await?;
            tracing::info!(listener = %name, addr = %addr, tls = tls.is_some(), "listening");
            let rx = GrpcReceiver {
                ingest: Arc::new(ingest(Transport::Grpc, "grpc", g.auth.as_ref(), &name)),
            };
            let srx = listeners.shutdown.clone();
            let g = g.clone();
            let drain = listeners.drain;
            let stats = telemetry.listener(&name);
            listeners.tasks.push(tokio::spawn(async move {
                if let Err(e) = grpc::serve(l, g, rx, srx, drain, tls, stats).await {
                    tracing::error!(error = %e, "gRPC server failed");
                }
            }));
        }
    }
    Ok(())
}

/// Tick each used processor on its timer; outputs enter the pipeline after their processor.
fn spawn_processor_ticks(
    plan: &Plan,
    used: &[ComponentId],
    pipes: &Pipes,
    telemetry: &Arc<Telemetry>,
    shutdown_rx: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut timers = Vec::new();
    for id in used {
        let Some(p) = plan.processors.get(id) else {
            continue;
        };
        let targets: Vec<(Arc<MetricsPipeline>, usize)> = pipes
            .metrics
            .iter()
            .filter_map(|(_, pl)| pl.stage_index(id).map(|i| (pl.clone(), i + 1)))
            .collect();
        let proc_ = p.processor.clone();
        let every = p.tick_interval;
        let mut srx = shutdown_rx.clone();
        let tel = telemetry.clone();
        let name = id.to_string();
        timers.push(tokio::spawn(async move {
            let mut iv = tokio::time::interval(every);
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = iv.tick() => {}
                    _ = srx.wait_for(|v| *v) => break,
                }
                let pr = proc_.clone();
                let now = Timestamp::now();
                let out = tokio::task::spawn_blocking(move || {
                    catch_unwind(AssertUnwindSafe(|| pr.tick(now)))
                })
                .await;
                match out {
                    Ok(Ok(data)) if !data.is_empty() => {
                        let ctx = BatchContext {
                            cluster_id: None,
                            received_at: now,
                            tenant: None,
                        };
                        // Nobody waits for a tick's deliveries: they are dropped unread.
                        for (pl, start) in &targets {
                            let mut acks = crate::pipeline::Acks::default();
                            let _ = pl.consume_from(*start, data.clone(), &ctx, &mut acks);
                        }
                    }
                    Ok(Ok(_)) => {}
                    _ => {
                        tel.tick_panics.fetch_add(1, Relaxed);
                        tracing::error!(processor = %name, "tick panicked; continuing");
                    }
                }
            }
        }));
    }
    timers
}

/// Expire stale series of each Prometheus exporter every 15 s.
fn spawn_prometheus_expiry(
    prom: &[Arc<PrometheusExporter>],
    shutdown_rx: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut timers = Vec::new();
    for exp in prom {
        let exp = exp.clone();
        let mut srx = shutdown_rx.clone();
        timers.push(tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_secs(15));
            loop {
                tokio::select! {
                    _ = iv.tick() => {
                        exp.expire(Timestamp::now());
                    }
                    _ = srx.wait_for(|v| *v) => break,
                }
            }
        }));
    }
    timers
}

/// Bind the self-telemetry scrape endpoint, unless metrics are off or no reader is set.
async fn serve_self_telemetry(
    plan: &Plan,
    listeners: &mut Listeners,
    component_families: &ComponentFamilies,
    prom: &[Arc<PrometheusExporter>],
) -> anyhow::Result<()> {
    if plan.telemetry.metrics.level != MetricsLevel::None
        && let Some(r) = plan.telemetry.metrics.readers.first()
    {
        let p = &r.pull.exporter.prometheus;
        let tel = listeners.telemetry.clone();
        let fams = component_families.clone();
        let proms = prom.to_vec();
        let render: PageRender = Arc::new(move |s, _flush| {
            let mut all = tel.families();
            all.extend(crate::metric_placement::for_self_telemetry(
                fams(),
                !proms.is_empty(),
                tel.metric_prefix(),
            ));
            for e in &proms {
                e.telemetry(&mut all);
            }
            render_text(&all, s);
            tel.render_histograms(s);
            true
        });
        let mut handler = metrics_handler(render);
        if let Some(g) = gate(plan, p.auth.as_ref(), "telemetry") {
            handler = crate::auth::gate::guard(handler, g, crate::auth::Action::Scrape, true);
        }
        listeners
            .http(
                "telemetry",
                "service.telemetry.metrics.readers.0.pull.exporter.prometheus",
                &format!("{}:{}", p.host, p.port),
                handler,
                limited("telemetry", 1024, p.lifecycle()),
                p.auth.is_none(),
                p.allowed_hosts.as_deref(),
            )
            .await?;
    }
    Ok(())
}

/// Shut down gracefully: report unhealthy, stop the listeners and wait up to the drain time
/// for in-flight requests, stop the timers, then processors, forwarders (drained), component
/// exporters and extensions, in that order.
#[allow(clippy::too_many_arguments)]
async fn shutdown(
    plan: &Plan,
    opts: &RunOptions,
    healthy: &AtomicBool,
    shutdown_tx: &watch::Sender<bool>,
    listeners: Listeners,
    timers: Vec<JoinHandle<()>>,
    used: &[ComponentId],
    exporters: &Exporters,
    host: &StaticHost,
) {
    tracing::info!(
        drain_s = opts.drain.as_secs_f64(),
        "shutting down: no new connections, draining in-flight requests"
    );
    healthy.store(false, Relaxed);
    let _ = shutdown_tx.send(true);
    let all = futures_join(listeners.tasks);
    if tokio::time::timeout(opts.drain + Duration::from_secs(1), all)
        .await
        .is_err()
    {
        tracing::warn!("some listeners did not stop within the drain time");
    }
    for t in timers {
        t.abort();
    }
    for id in used {
        if let Some(p) = plan.processors.get(id) {
            p.processor.shutdown();
        }
    }
    for f in &exporters.forwarders {
        f.drain(opts.drain).await;
    }
    for e in &exporters.components {
        e.shutdown();
    }
    for (_, e) in &host.extensions {
        e.shutdown();
    }
    tracing::info!("stopped");
}

/// The response middlewares of one receiver protocol: those its `middlewares` list names,
/// or, with no list, the first started extension that offers one.
fn response_middlewares(
    plan: &Plan,
    host: &StaticHost,
    receiver: &ComponentId,
    proto: &'static str,
) -> Vec<Arc<dyn ResponseMiddleware>> {
    let offered = host
        .extensions
        .iter()
        .filter_map(|(id, e)| e.response_middleware().map(|m| (id, m)));
    match plan
        .middlewares
        .get(&(receiver.clone(), proto))
        .cloned()
        .flatten()
    {
        None => offered.map(|(_, m)| m).take(1).collect(),
        Some(ids) => ids
            .iter()
            .filter_map(|mid| {
                host.extensions
                    .iter()
                    .find(|(id, _)| id == mid)
                    .and_then(|(_, e)| e.response_middleware())
            })
            .collect(),
    }
}

async fn futures_join(tasks: Vec<JoinHandle<()>>) {
    for t in tasks {
        let _ = t.await;
    }
}
