//! `ingero-agent`: the per-node agent (default command) and `ingero-agent sink`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use component::config::{decode, parse_duration, parse_yaml};
use component::{Clock, ComponentConfig, SystemClock};
use ingero_agent::config::{AgentConfig, Encoding, ProviderSetting, RuntimeLaunchProbes};
use ingero_agent::events_out::sink;
use ingero_agent::signals::SignalSource;
use ingero_agent::signals::synthetic::{SyntheticScript, SyntheticSource};
use ingero_agent::{probes, setup, status};

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

#[derive(Parser, Debug)]
#[command(
    name = "ingero-agent",
    version = env!("INGERO_VERSION_LINE"),
    about = "Per-node GPU health agent for Ingero Fleet"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Read straggler events from the remediation socket and serve Prometheus metrics.
    Sink(SinkArgs),
    /// Explain what the GPU work waited on: causal chains from a store.
    Explain(ExplainArgs),
    /// Read-only SQL over a store (or, without SQL, the newest events).
    Query(QueryArgs),
    /// Merge several nodes' stores into one file.
    Merge(MergeArgs),
    /// Export a store as a trace (Chrome Trace Event JSON for the Perfetto UI).
    Export(ExportArgs),
    /// MCP server (stdio, or streamable HTTP with --http): query_fleet and this node's store.
    Mcp(McpArgs),
}

/// Fan-out to other agents' query APIs (`api.enabled` on them).
#[derive(Args, Debug, Default)]
struct FleetArgs {
    /// Agents to ask (host:port, comma-separated or repeated); default: fleet.nodes of --config.
    #[arg(long, value_name = "HOST:PORT,...")]
    nodes: Vec<String>,
    /// Agent config file to read fleet.nodes and fleet.query from.
    #[arg(long)]
    config: Option<PathBuf>,
    /// CA (PEM) the agents' certificates chain to (an agent's generated certificate file).
    #[arg(long)]
    ca_cert: Option<PathBuf>,
    /// Client certificate (PEM) for agents that require one (mTLS).
    #[arg(long)]
    client_cert: Option<PathBuf>,
    #[arg(long)]
    client_key: Option<PathBuf>,
    /// File with the bearer token the agents require.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Plain HTTP (agents with api.no_tls).
    #[arg(long)]
    no_tls: bool,
    /// Per node (default 5s).
    #[arg(long, value_parser = duration_arg)]
    timeout: Option<Duration>,
    /// Warn about a node whose clock is off this host's by more (default 10ms).
    #[arg(long, value_parser = duration_arg)]
    clock_skew_threshold: Option<Duration>,
}

#[derive(Args, Debug)]
struct McpArgs {
    /// This node's store.
    #[arg(long, default_value = ingero_agent::config::DEFAULT_STORE_PATH)]
    db: PathBuf,
    /// This node's name in answers (default: the config's, else the host name).
    #[arg(long)]
    node: Option<String>,
    /// Serve streamable HTTP at http://ADDR/mcp (a loopback address) instead of stdio.
    #[arg(long)]
    http: Option<SocketAddr>,
    #[command(flatten)]
    fleet: FleetArgs,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// Database (default: the agent's own store).
    #[arg(long, default_value = ingero_agent::config::DEFAULT_STORE_PATH)]
    db: PathBuf,
    /// How far back from each node's newest record to look.
    #[arg(long, value_parser = duration_arg, default_value = "5m")]
    since: Duration,
    /// One analysis per process instead of per node.
    #[arg(long)]
    per_process: bool,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    fleet: FleetArgs,
}

#[derive(Args, Debug)]
struct QueryArgs {
    /// One read-only SQL statement; `:since` is bound to the --since cut-off (Unix ns).
    sql: Option<String>,
    #[arg(long, default_value = ingero_agent::config::DEFAULT_STORE_PATH)]
    db: PathBuf,
    /// Without SQL: events this far back from the newest one (with SQL: binds `:since`).
    #[arg(long, value_parser = duration_arg)]
    since: Option<Duration>,
    /// Without SQL: only this op (e.g. cudaStreamSync, cuLaunchKernel, block_write).
    #[arg(long)]
    op: Option<String>,
    /// Without SQL: at most this many rows (per node with --nodes).
    #[arg(long, default_value_t = 50)]
    limit: u64,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    fleet: FleetArgs,
}

#[derive(Args, Debug)]
struct MergeArgs {
    /// Input databases.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output file (must not exist).
    #[arg(short, long)]
    output: PathBuf,
    /// Node name for databases written before the node column (and for rows without one).
    #[arg(long)]
    force_node: Option<String>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum ExportFormat {
    Perfetto,
}

#[derive(Args, Debug)]
struct ExportArgs {
    #[arg(long, value_enum)]
    format: ExportFormat,
    #[arg(long, default_value = ingero_agent::config::DEFAULT_STORE_PATH)]
    db: PathBuf,
    /// Output file (default: standard output).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Only this far back from the newest event.
    #[arg(long, value_parser = duration_arg)]
    since: Option<Duration>,
    #[command(flatten)]
    fleet: FleetArgs,
}

#[derive(Args, Debug, Default)]
struct RunArgs {
    /// YAML config file; flags override its values.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Fleet OTLP/HTTP endpoint: host:port or http(s)://host[:port][/path].
    #[arg(long)]
    fleet_endpoint: Option<String>,
    #[arg(long)]
    fleet_cluster_id: Option<String>,
    /// Node id (default: host name).
    #[arg(long)]
    fleet_node_id: Option<String>,
    #[arg(long, value_parser = duration_arg)]
    fleet_push_interval: Option<Duration>,
    #[arg(long, value_parser = duration_arg)]
    fleet_timeout: Option<Duration>,
    /// Base URL of the threshold GET fallback.
    #[arg(long)]
    fleet_threshold_url: Option<String>,
    #[arg(long, value_parser = duration_arg)]
    fleet_poll_interval: Option<Duration>,
    /// Plain http for a bare host:port endpoint.
    #[arg(long)]
    fleet_insecure: bool,
    #[arg(long)]
    fleet_tls_ca: Option<PathBuf>,
    #[arg(long)]
    fleet_tls_cert: Option<PathBuf>,
    #[arg(long)]
    fleet_tls_key: Option<PathBuf>,
    /// File with a bearer token (re-read on every request).
    #[arg(long)]
    fleet_token_file: Option<PathBuf>,
    /// Export detection-edge spans (`ingero.detection.straggler`) over OTLP/HTTP.
    #[arg(long)]
    otlp_enabled: bool,
    /// Traces endpoint: host:port or http(s)://host:port (`/v1/traces` is appended).
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// Plain http for a bare host:port traces endpoint (`--otlp-insecure=false`: https).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    otlp_insecure: Option<bool>,
    #[arg(long)]
    fleet_world_size: Option<u32>,
    #[arg(long)]
    fleet_node_rank: Option<u32>,
    #[arg(long)]
    fleet_workload_type: Option<String>,
    #[arg(long)]
    fleet_persist_path: Option<PathBuf>,
    #[arg(long, value_parser = duration_arg)]
    fleet_persist_stale_age: Option<Duration>,
    #[arg(long, value_enum)]
    fleet_provider: Option<ProviderSetting>,
    #[arg(long)]
    warmup_samples: Option<u64>,
    #[arg(long)]
    fleet_classifier_hysteresis: Option<f64>,
    /// Straggler rule: cusum (Fleet's persistence-aware rule) or one-sample (spec 4.1).
    #[arg(long, value_enum)]
    classifier: Option<ingero_agent::health::classifier::Rule>,
    #[arg(long, value_parser = duration_arg)]
    signal_window: Option<Duration>,
    #[arg(long)]
    signal_num_gpus: Option<u32>,
    /// Serve straggler events on the remediation Unix socket.
    #[arg(long)]
    remediate: bool,
    #[arg(long)]
    remediate_socket: Option<PathBuf>,
    #[arg(long)]
    remediate_gid: Option<u32>,
    /// OTLP body encoding.
    #[arg(long, value_enum)]
    encoding: Option<Encoding>,
    /// Scripted signals instead of eBPF (no GPU, no root).
    #[arg(long)]
    synthetic: bool,
    /// Synthetic script, e.g. "0s:1.0,60s:0.8,120s:1.0", or @file.
    #[arg(long)]
    synthetic_script: Option<String>,
    /// Synthetic kernel launches per second at factor 1.0.
    #[arg(long)]
    synthetic_rate: Option<f64>,
    /// Do not probe libcudart/libcuda.
    #[arg(long)]
    no_cuda: bool,
    /// Do not probe libnccl.
    #[arg(long)]
    no_nccl: bool,
    /// Extra directory libraries may be attached from (repeatable).
    #[arg(long)]
    probe_library_root: Vec<PathBuf>,
    /// Watch only this process (repeatable; with --cgroup: either matches).
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Watch only the processes of this cgroup v2 directory and its children (repeatable;
    /// absolute, or relative to the cgroup v2 mount, e.g. a pod's kubepods/... path).
    #[arg(long = "cgroup")]
    cgroups: Vec<PathBuf>,
    #[arg(long, value_parser = duration_arg)]
    libnccl_discovery_interval: Option<Duration>,
    /// Runtime launch probes: auto (count at the driver alone once every runtime launch is
    /// seen reaching it) or always (keep them; two probes per runtime launch).
    #[arg(long, value_enum)]
    runtime_launch_probes: Option<RuntimeLaunchProbes>,
    /// Serve the agent's own Prometheus metrics on 127.0.0.1:9465.
    #[arg(long)]
    metrics: bool,
    /// Serve the agent's own Prometheus metrics on this ip:port (implies --metrics).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Live terminal status view instead of log lines.
    #[arg(long)]
    status: bool,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
    /// Record CUDA/NCCL call durations and the host layers into the local store.
    #[arg(long)]
    store: bool,
    /// The store's file (default /var/lib/ingero/ingero.db).
    #[arg(long)]
    store_path: Option<PathBuf>,
    /// Node identity written with every stored row (default: --fleet-node-id, else host name).
    #[arg(long)]
    node: Option<String>,
    /// Roll the store over at this size (MiB).
    #[arg(long)]
    store_max_size_mb: Option<u64>,
    /// Delete stored rows older than this.
    #[arg(long, value_parser = duration_arg)]
    store_max_age: Option<Duration>,
    /// Do not trace the scheduler and block I/O (store CUDA/NCCL calls only).
    #[arg(long)]
    no_host_layers: bool,
    /// Serve the read-only query API (HTTPS, TLS 1.3) for fan-out from other machines.
    #[arg(long)]
    api: bool,
    /// The query API's ip:port (implies --api; default 0.0.0.0:8080).
    #[arg(long)]
    api_listen: Option<String>,
    #[arg(long)]
    api_tls_cert: Option<PathBuf>,
    #[arg(long)]
    api_tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (mTLS).
    #[arg(long)]
    api_client_ca: Option<PathBuf>,
    /// Require this bearer token (file).
    #[arg(long)]
    api_token_file: Option<PathBuf>,
    /// Plain HTTP for the query API (loopback only unless api.allow_plaintext_non_loopback).
    #[arg(long)]
    api_no_tls: bool,
    /// With --api-no-tls: allow a non-loopback listen address (api.allow_plaintext_non_loopback).
    #[arg(long)]
    api_allow_plaintext_non_loopback: bool,
    /// Test only: shift the clock the query API reports by this many ms.
    #[arg(long, hide = true, allow_hyphen_values = true)]
    api_test_clock_offset_ms: Option<i64>,
}

#[derive(Args, Debug)]
struct SinkArgs {
    #[arg(long, default_value = ingero_agent::config::DEFAULT_REMEDIATE_SOCKET)]
    socket_path: PathBuf,
    #[arg(long, default_value = sink::DEFAULT_LISTEN)]
    listen: SocketAddr,
    #[arg(long, value_parser = duration_arg, default_value = "2s")]
    reconnect_delay: Duration,
    #[arg(long, default_value_t = sink::DEFAULT_MAX_TRACKED_NODES)]
    max_tracked_nodes: usize,
    #[arg(long, value_parser = duration_arg, default_value = "60s")]
    readiness_window: Duration,
    #[arg(long)]
    log_json: bool,
}

fn init_logs(json: bool, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if quiet { "warn" } else { "info" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

fn load_config(a: &RunArgs) -> Result<AgentConfig, String> {
    let mut c = match &a.config {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
            let tree = parse_yaml(&bytes).map_err(|e| e.to_string())?;
            decode::<AgentConfig>(&tree).map_err(|e| e.to_string())?
        }
        None => AgentConfig::default(),
    };
    let f = &mut c.fleet;
    macro_rules! set {
        ($dst:expr, $src:expr) => {
            if let Some(v) = $src.clone() {
                $dst = v;
            }
        };
    }
    set!(f.endpoint, a.fleet_endpoint);
    set!(f.cluster_id, a.fleet_cluster_id);
    set!(f.node_id, a.fleet_node_id);
    set!(f.push_interval, a.fleet_push_interval);
    if a.fleet_timeout.is_some() {
        f.timeout = a.fleet_timeout;
    }
    set!(f.threshold_url, a.fleet_threshold_url);
    set!(f.poll_interval, a.fleet_poll_interval);
    set!(f.world_size, a.fleet_world_size);
    set!(f.node_rank, a.fleet_node_rank);
    set!(f.workload_type, a.fleet_workload_type);
    set!(f.persist_path, a.fleet_persist_path);
    set!(f.persist_stale_age, a.fleet_persist_stale_age);
    set!(f.provider, a.fleet_provider);
    set!(f.encoding, a.encoding);
    if a.fleet_insecure {
        f.insecure = true;
    }
    if a.fleet_tls_ca.is_some() {
        f.tls_ca.clone_from(&a.fleet_tls_ca);
    }
    if a.fleet_tls_cert.is_some() {
        f.tls_cert.clone_from(&a.fleet_tls_cert);
    }
    if a.fleet_tls_key.is_some() {
        f.tls_key.clone_from(&a.fleet_tls_key);
    }
    if a.fleet_token_file.is_some() {
        f.token_file.clone_from(&a.fleet_token_file);
    }
    if a.otlp_enabled {
        c.otlp.enabled = true;
    }
    set!(c.otlp.endpoint, a.otlp_endpoint);
    set!(c.otlp.insecure, a.otlp_insecure);
    {
        let api = &mut c.api;
        if a.api || a.api_listen.is_some() {
            api.enabled = true;
        }
        set!(api.listen, a.api_listen);
        if a.api_tls_cert.is_some() {
            api.tls_cert.clone_from(&a.api_tls_cert);
        }
        if a.api_tls_key.is_some() {
            api.tls_key.clone_from(&a.api_tls_key);
        }
        if a.api_client_ca.is_some() {
            api.client_ca.clone_from(&a.api_client_ca);
        }
        if a.api_token_file.is_some() {
            api.token_file.clone_from(&a.api_token_file);
        }
        if a.api_no_tls {
            api.no_tls = true;
        }
        if a.api_allow_plaintext_non_loopback {
            api.allow_plaintext_non_loopback = true;
        }
    }
    let h = &mut c.health;
    set!(h.warmup_samples, a.warmup_samples);
    set!(h.classifier_hysteresis, a.fleet_classifier_hysteresis);
    set!(h.classifier, a.classifier);
    set!(h.signal_window, a.signal_window);
    set!(h.num_gpus, a.signal_num_gpus);
    if a.remediate {
        c.remediate.enabled = true;
    }
    set!(c.remediate.socket, a.remediate_socket);
    if a.remediate_gid.is_some() {
        c.remediate.gid = a.remediate_gid;
    }
    if a.synthetic {
        c.synthetic.enabled = true;
    }
    set!(c.synthetic.script, a.synthetic_script);
    set!(c.synthetic.base_rate, a.synthetic_rate);
    if a.no_cuda {
        c.probes.cuda = false;
    }
    if a.no_nccl {
        c.probes.nccl = false;
    }
    c.probes
        .extra_library_roots
        .extend(a.probe_library_root.iter().cloned());
    c.probes.pids.extend(a.pids.iter().copied());
    c.probes.cgroups.extend(a.cgroups.iter().cloned());
    set!(c.probes.discovery_interval, a.libnccl_discovery_interval);
    set!(c.probes.runtime_launch_probes, a.runtime_launch_probes);
    if a.metrics && c.metrics.listen.is_empty() {
        c.metrics.listen = ingero_agent::selfmetrics::DEFAULT_LISTEN.to_string();
    }
    set!(c.metrics.listen, a.metrics_listen);
    if a.store {
        c.store.enabled = true;
    }
    set!(c.store.path, a.store_path);
    set!(c.store.node, a.node);
    set!(c.store.max_size_mb, a.store_max_size_mb);
    set!(c.store.max_age, a.store_max_age);
    if a.no_host_layers {
        c.store.host_layers = false;
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// SIGTERM or SIGINT, with the handlers registered when this is called rather than when
/// the future is first polled: a mode calls it before starting up, so a signal that arrives
/// while it starts still ends it gracefully instead of killing it by the default action.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut t), Ok(mut i)) => {
                tokio::select! {
                    _ = t.recv() => {}
                    _ = i.recv() => {}
                }
            }
            (Ok(mut one), Err(_)) | (Err(_), Ok(mut one)) => {
                one.recv().await;
            }
            (Err(_), Err(_)) => std::future::pending().await,
        }
    }
}

async fn run_agent(
    mut cfg: AgentConfig,
    show_status: bool,
    api_clock_offset_ms: i64,
) -> Result<(), String> {
    let signal = shutdown_signal();
    if !cfg.synthetic.enabled {
        probes::scope::adopt_identity(&mut cfg);
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut probe_handle = None;
    let mut nvml = None;
    let mut store: Option<ingero_agent::store::Store> = None;
    let mut recorder: Option<probes::Recorder> = None;
    let mut host: Option<probes::host::HostHandle> = None;
    let mut gpu_sampler: Option<ingero_agent::signals::nvml::SamplerHandle> = None;
    let (source, nccl, gpu): (Box<dyn SignalSource>, _, _) = if cfg.synthetic.enabled {
        let script = SyntheticScript::load(&cfg.synthetic.script)
            .map_err(|e| format!("synthetic.script: {e}"))?;
        tracing::info!(script = %cfg.synthetic.script, "synthetic signal source");
        (
            Box::new(SyntheticSource::new(
                script,
                cfg.synthetic.base_rate,
                cfg.health.signal_window,
            )),
            None,
            None,
        )
    } else {
        if cfg.store.enabled {
            let node = ingero_agent::store::node_identity(
                Some(cfg.store.node.as_str()),
                &cfg.fleet.node_id,
            );
            let mut o = ingero_agent::store::StoreOptions::new(&cfg.store.path, node.clone());
            o.max_bytes = cfg.store.max_size_mb.saturating_mul(1 << 20);
            o.max_age = cfg.store.max_age;
            o.world_size = (cfg.fleet.world_size > 0).then_some(cfg.fleet.world_size);
            o.rank = o.world_size.map(|_| cfg.fleet.node_rank);
            o.pid_filter = cfg
                .probes
                .pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let st = ingero_agent::store::Store::start(o).map_err(|e| e.to_string())?;
            tracing::info!(path = %cfg.store.path.display(), node = %node, "event store open");
            recorder = Some(probes::Recorder::new(st.sink()));
            store = Some(st);
        }
        let started = probes::start_recording(&cfg, rx.clone(), recorder.clone())
            .map_err(|e| e.to_string())?;
        if let (Some(r), true) = (&recorder, cfg.store.host_layers) {
            let scope = probes::ProbeOptions::from_config(&cfg)
                .map_err(|e| e.to_string())?
                .scope;
            host = Some(
                probes::host::start(
                    &scope,
                    r.sink.clone(),
                    Duration::from_secs(1),
                    r.gpu_pids.clone(),
                )
                .map_err(|e| e.to_string())?,
            );
        }
        probe_handle = Some(started.handle);
        nvml = started.nvml;
        if let (Some(r), Some(n)) = (&recorder, &nvml) {
            gpu_sampler = Some(
                ingero_agent::signals::nvml::start_sampler(
                    n.clone(),
                    r.sink.clone(),
                    Duration::from_secs(1),
                )
                .map_err(|e| format!("GPU health sampler: {e}"))?,
            );
        }
        (Box::new(started.source), started.nccl, started.gpu)
    };
    let built = setup::build(&cfg, clock.clone(), source, nccl, gpu).map_err(|e| e.to_string())?;
    let mut agent = built.agent;
    if let Some(nvml) = nvml {
        agent.set_gpu_activity(Box::new(move || nvml.gpu_utilization()));
    }
    if store.is_some() {
        // Each straggler episode is sent with its cause, found in this store.
        agent.set_episode_explainer(ingero_agent::investigate::episode::EpisodeExplainer::new(
            cfg.store.path.clone(),
            agent_identity(&cfg),
        ));
    }
    if let Some(x) = setup::span_exporter(&cfg).map_err(|e| e.to_string())? {
        tracing::info!(endpoint = %cfg.otlp.endpoint, "detection spans exported");
        agent.set_span_exporter(x);
    }
    agent.restore_baseline(cfg.fleet.persist_stale_age);
    if cfg.fleet.provider == ProviderSetting::Auto && built.push.is_some() {
        let cell = built.provider.clone();
        tokio::spawn(async move {
            if let Some(p) = ingero_agent::fleet::provider::detect(&Default::default()).await {
                tracing::info!(provider = p, "cloud provider detected");
                let _ = cell.set(p);
            }
        });
    }
    if !cfg.metrics.listen.is_empty() {
        let addr: SocketAddr = cfg
            .metrics
            .listen
            .parse()
            .map_err(|e| format!("metrics.listen: {e}"))?;
        let (listener, bound) = ingero_agent::selfmetrics::bind(addr)
            .await
            .map_err(|e| format!("metrics.listen {addr}: {e}"))?;
        tracing::info!(listen = %bound, "agent metrics endpoint started");
        tokio::spawn(ingero_agent::selfmetrics::serve(
            listener,
            built.status.clone(),
            rx.clone(),
        ));
    }
    if let Some(poller) = built.poller {
        tokio::spawn(poller.run(rx.clone()));
    }
    if cfg.api.enabled {
        let server = ingero_agent::api::ApiServer::bind(ingero_agent::api::ServeOptions {
            config: cfg.api.clone(),
            db: cfg.store.path.clone(),
            node: ingero_agent::store::node_identity(
                Some(cfg.store.node.as_str()),
                &cfg.fleet.node_id,
            ),
            clock_offset_ns: api_clock_offset_ms.saturating_mul(1_000_000),
        })
        .await
        .map_err(|e| format!("api: {e}"))?;
        tracing::info!(
            listen = %server.local_addr,
            tls = !cfg.api.no_tls,
            mtls = cfg.api.client_ca.is_some(),
            "query API started"
        );
        tokio::spawn(server.run(rx.clone()));
    }
    if let Some(st) = &store {
        let c = st.counters().clone();
        let host_c = host.as_ref().map(|h| h.counters.clone());
        let board = built.status.clone();
        let mut stop = rx.clone();
        tokio::spawn(async move {
            use std::sync::atomic::Ordering::Relaxed;
            loop {
                let mut counts = ingero_agent::status::StoreCounts {
                    events_written: c.events_written.load(Relaxed),
                    aggregates_written: c.aggregates_written.load(Relaxed),
                    dropped_queue_full: c.dropped_queue_full.load(Relaxed),
                    dropped_write_error: c.dropped_write_error.load(Relaxed),
                    rollovers: c.rollovers.load(Relaxed),
                    host_drops: Default::default(),
                };
                if let Some(h) = &host_c {
                    for (d, v) in counts.host_drops.iter_mut().zip(&h.kernel_drops) {
                        *d = v.load(Relaxed);
                    }
                }
                board.update(|s| s.store_counts = counts);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = ingero_agent::httpserve::stopped(&mut stop) => return,
                }
            }
        });
    }
    if let Some(h) = &probe_handle {
        let cell = h.status_cell();
        let board = built.status.clone();
        let mut stop = rx.clone();
        tokio::spawn(async move {
            loop {
                let (line, counts) = {
                    let st = cell.lock();
                    let counts = ingero_agent::status::ProbeCounts {
                        launches: st.launches,
                        kernel_drops: st.kernel_drops,
                        cuda_events: st.cuda_events,
                        nccl_events: st.nccl_events,
                        libraries: st.attached.len() as u64,
                        runtime_launch: st.runtime_launch,
                    };
                    (st.summary(), counts)
                };
                board.update(|s| {
                    s.probes = line;
                    s.probe_counts = counts;
                });
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = ingero_agent::httpserve::stopped(&mut stop) => return,
                }
            }
        });
    }
    if show_status {
        tokio::spawn(status::run_terminal_view(
            built.status.clone(),
            clock.clone(),
            Duration::from_secs(1),
            rx.clone(),
        ));
    }
    tracing::info!(
        node_id = %agent_identity(&cfg),
        endpoint = %cfg.fleet.endpoint,
        interval = ?cfg.fleet.push_interval,
        "ingero-agent started"
    );
    let run = tokio::spawn(agent.run(rx.clone()));
    signal.await;
    tracing::info!("shutting down");
    let _ = tx.send(true);
    let _ = run.await;
    if let Some(h) = probe_handle {
        let st = h.status();
        tracing::info!(
            cuda_events = st.cuda_events,
            nccl_events = st.nccl_events,
            ringbuf_full = st.kernel_drops[0],
            entry_missing = st.kernel_drops[1],
            user_read_failed = st.kernel_drops[2],
            launch_counts_full = st.kernel_drops[3],
            launches = ?st.launches,
            runtime_launch_probes = st.runtime_launch.state.as_str(),
            calibration_runtime = st.runtime_launch.runtime,
            calibration_nested = st.runtime_launch.nested,
            decode_errors = st.decode_errors,
            attach_errors = st.attach_errors,
            "probe totals"
        );
        h.stop();
    }
    if let Some(g) = gpu_sampler {
        g.stop();
    }
    if let Some(h) = host {
        let d = &h.counters.kernel_drops;
        let v = |i: usize| d[i].load(std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            threads_full = v(0),
            procs_full = v(1),
            io_inflight_full = v(2),
            io_procs_full = v(3),
            net_procs_full = v(4),
            mem_procs_full = v(5),
            reclaim_threads_full = v(6),
            oom_ringbuf_full = v(7),
            oom_kills = h
                .counters
                .oom_kills
                .load(std::sync::atomic::Ordering::Relaxed),
            "host layer drops"
        );
        h.stop();
    }
    if let Some(st) = store {
        let c = st.counters().clone();
        st.close();
        use std::sync::atomic::Ordering::Relaxed;
        tracing::info!(
            events = c.events_written.load(Relaxed),
            aggregates = c.aggregates_written.load(Relaxed),
            dropped_queue_full = c.dropped_queue_full.load(Relaxed),
            dropped_write_error = c.dropped_write_error.load(Relaxed),
            rollovers = c.rollovers.load(Relaxed),
            "store totals"
        );
    }
    Ok(())
}

fn agent_identity(cfg: &AgentConfig) -> String {
    setup::identity(cfg).node_id
}

async fn run_sink(a: SinkArgs) -> Result<(), String> {
    let signal = shutdown_signal();
    let cfg = sink::SinkConfig {
        socket_path: a.socket_path,
        listen: a.listen,
        reconnect_delay: a.reconnect_delay,
        max_tracked_nodes: a.max_tracked_nodes,
        readiness_window: a.readiness_window,
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let state = Arc::new(parking_lot::Mutex::new(sink::SinkState::new(
        cfg.max_tracked_nodes,
    )));
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| format!("listen {}: {e}", cfg.listen))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(listen = %bound, socket = %cfg.socket_path.display(), "straggler sink started");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let reader = tokio::spawn(sink::read_socket(cfg.clone(), state.clone(), clock.clone()));
    let server = tokio::spawn(sink::serve_http(listener, cfg, state, clock, rx));
    signal.await;
    let _ = tx.send(true);
    reader.abort();
    let _ = server.await;
    Ok(())
}

/// The `:since` cut-off: `d` back from the newest event of the database.
fn cutoff(conn: &rusqlite::Connection, d: Option<Duration>) -> Result<Option<i64>, String> {
    let Some(d) = d else { return Ok(None) };
    let newest: Option<i64> = conn
        .query_row("SELECT MAX(timestamp) FROM events", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    let back = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    Ok(Some(newest.unwrap_or(0).saturating_sub(back)))
}

#[allow(clippy::print_stdout)]
fn run_explain(a: ExplainArgs) -> Result<(), String> {
    use ingero_agent::investigate::explain;
    // Read-write without creating or migrating, to keep the chains; read-only otherwise.
    let rw =
        rusqlite::Connection::open_with_flags(&a.db, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE);
    let (conn, writable) = match rw {
        Ok(c) if a.db.exists() => {
            // The agent may be writing: wait for its transaction instead of failing.
            c.busy_timeout(Duration::from_secs(5))
                .map_err(|e| e.to_string())?;
            (c, true)
        }
        _ => (
            ingero_agent::store::open_read_only(&a.db).map_err(|e| e.to_string())?,
            false,
        ),
    };
    let report = explain::explain(
        &conn,
        &explain::ExplainOptions {
            since: a.since,
            per_process: a.per_process,
        },
    )
    .map_err(|e| e.to_string())?;
    if writable {
        explain::store_chains(&conn, &report.chains).map_err(|e| e.to_string())?;
    } else if !report.chains.is_empty() {
        eprintln!(
            "ingero-agent: {} is read-only: chains not saved",
            a.db.display()
        );
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", explain::render(&report));
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn run_query(a: QueryArgs) -> Result<(), String> {
    use ingero_agent::investigate::query;
    let conn = ingero_agent::store::open_read_only(&a.db).map_err(|e| e.to_string())?;
    let since = cutoff(&conn, a.since)?;
    let sql = match &a.sql {
        Some(s) => s.clone(),
        None => {
            let op = match &a.op {
                Some(name) => Some(
                    ingero_agent::store::schema::op_by_name(name)
                        .ok_or_else(|| format!("unknown op {name:?}"))?,
                ),
                None => None,
            };
            query::shortcut_sql(op, a.limit)
        }
    };
    let t = query::run(&conn, &sql, since.or(Some(i64::MIN))).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", query::render_json(&t));
    } else {
        print!("{}", query::render_table(&t));
    }
    Ok(())
}

fn run_merge(a: MergeArgs) -> Result<(), String> {
    let st = ingero_agent::investigate::merge::merge(&a.inputs, &a.output, a.force_node.as_deref())
        .map_err(|e| e.to_string())?;
    eprintln!(
        "merged {} file(s) into {}: {} events ({} duplicates skipped), {} chains, {} stacks ({} already present), {} aggregate rows, {} sessions",
        a.inputs.len(),
        a.output.display(),
        st.events,
        st.duplicate_events,
        st.chains,
        st.stacks_new,
        st.stacks_shared,
        st.aggregates,
        st.sessions
    );
    Ok(())
}

fn run_export(a: ExportArgs) -> Result<(), String> {
    let ExportFormat::Perfetto = a.format;
    let conn = ingero_agent::store::open_read_only(&a.db).map_err(|e| e.to_string())?;
    let since = cutoff(&conn, a.since)?;
    let n = match &a.output {
        Some(p) => {
            let f = std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let mut w = std::io::BufWriter::new(f);
            ingero_agent::investigate::export::perfetto(&conn, since, &mut w)
        }
        None => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            ingero_agent::investigate::export::perfetto(&conn, since, &mut w)
        }
    }
    .map_err(|e| e.to_string())?;
    eprintln!("exported {n} trace events");
    Ok(())
}

fn read_config(path: &PathBuf) -> Result<AgentConfig, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let tree = parse_yaml(&bytes).map_err(|e| e.to_string())?;
    let c = decode::<AgentConfig>(&tree).map_err(|e| e.to_string())?;
    Ok(c)
}

/// `--nodes` given, or `--config` naming a file with fleet.nodes.
fn fanout_requested(f: &FleetArgs) -> bool {
    !f.nodes.is_empty() || f.config.is_some()
}

/// The nodes and client settings: the flags over the config's fleet.nodes / fleet.query.
fn fanout_target(
    f: &FleetArgs,
    allow_empty: bool,
) -> Result<ingero_agent::fanout::cli::Target, String> {
    let cfg = match &f.config {
        Some(p) => read_config(p)?,
        None => AgentConfig::default(),
    };
    let mut q = cfg.fleet.query.clone();
    if f.ca_cert.is_some() {
        q.ca_cert.clone_from(&f.ca_cert);
    }
    if f.client_cert.is_some() {
        q.client_cert.clone_from(&f.client_cert);
    }
    if f.client_key.is_some() {
        q.client_key.clone_from(&f.client_key);
    }
    if f.token_file.is_some() {
        q.token_file.clone_from(&f.token_file);
    }
    if f.no_tls {
        q.no_tls = true;
    }
    if let Some(t) = f.timeout {
        q.timeout = t;
    }
    if let Some(t) = f.clock_skew_threshold {
        q.clock_skew_threshold = t;
    }
    let lists = if f.nodes.is_empty() {
        cfg.fleet.nodes.clone()
    } else {
        f.nodes.clone()
    };
    let nodes = if lists.is_empty() && allow_empty {
        Vec::new()
    } else {
        ingero_agent::fanout::parse_nodes(&lists)?
    };
    Ok(ingero_agent::fanout::cli::Target { nodes, config: q })
}

fn fanout_exit(r: Result<u8, String>) -> ExitCode {
    match r {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ingero-agent: {e}");
            ExitCode::from(1)
        }
    }
}

async fn fanout_query(a: QueryArgs) -> Result<u8, String> {
    let t = fanout_target(&a.fleet, false)?;
    let sql = match &a.sql {
        Some(s) => s.clone(),
        None => {
            let op = match &a.op {
                Some(name) => Some(
                    ingero_agent::store::schema::op_by_name(name)
                        .ok_or_else(|| format!("unknown op {name:?}"))?,
                ),
                None => None,
            };
            ingero_agent::investigate::query::shortcut_sql(op, a.limit)
        }
    };
    ingero_agent::fanout::cli::query(
        &t,
        &sql,
        a.since,
        a.json,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )
    .await
}

async fn fanout_explain(a: ExplainArgs) -> Result<u8, String> {
    let t = fanout_target(&a.fleet, false)?;
    ingero_agent::fanout::cli::explain(
        &t,
        a.since,
        a.per_process,
        a.json,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )
    .await
}

async fn fanout_export(a: ExportArgs) -> Result<u8, String> {
    let ExportFormat::Perfetto = a.format;
    let t = fanout_target(&a.fleet, false)?;
    let mut err = std::io::stderr();
    match &a.output {
        Some(p) => {
            let f = std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let mut w = std::io::BufWriter::new(f);
            ingero_agent::fanout::cli::export(&t, a.since, &mut w, &mut err).await
        }
        None => {
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            ingero_agent::fanout::cli::export(&t, a.since, &mut w, &mut err).await
        }
    }
}

async fn run_mcp(a: McpArgs) -> Result<(), String> {
    let t = fanout_target(&a.fleet, true)?;
    let cfg = match &a.fleet.config {
        Some(p) => read_config(p)?,
        None => AgentConfig::default(),
    };
    let node = a.node.clone().unwrap_or_else(|| {
        ingero_agent::store::node_identity(Some(cfg.store.node.as_str()), &cfg.fleet.node_id)
    });
    let server = ingero_agent::mcp::AgentMcp::new(ingero_agent::mcp::McpOptions {
        db: a.db.clone(),
        node,
        nodes: t.nodes,
        fanout: t.config,
        max_rows: cfg.api.max_rows,
        query_timeout: cfg.api.query_timeout,
    });
    match a.http {
        None => ingero_agent::mcp::serve_stdio(server).await,
        Some(addr) => {
            let signal = shutdown_signal();
            let listener = ingero_agent::mcp::bind_http(addr).await?;
            let bound = listener.local_addr().map_err(|e| e.to_string())?;
            eprintln!("ingero-agent mcp: serving http://{bound}/mcp");
            let (tx, rx) = tokio::sync::watch::channel(false);
            let srv = tokio::spawn(ingero_agent::mcp::serve_http(server, listener, rx));
            signal.await;
            let _ = tx.send(true);
            let _ = srv.await;
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ingero-agent: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = match cli.command {
        Some(Command::Sink(a)) => {
            init_logs(a.log_json, false);
            rt.block_on(run_sink(a))
        }
        Some(Command::Explain(a)) if fanout_requested(&a.fleet) => {
            return fanout_exit(rt.block_on(fanout_explain(a)));
        }
        Some(Command::Query(a)) if fanout_requested(&a.fleet) => {
            return fanout_exit(rt.block_on(fanout_query(a)));
        }
        Some(Command::Export(a)) if fanout_requested(&a.fleet) => {
            return fanout_exit(rt.block_on(fanout_export(a)));
        }
        Some(Command::Explain(a)) => run_explain(a),
        Some(Command::Query(a)) => run_query(a),
        Some(Command::Merge(a)) => run_merge(a),
        Some(Command::Export(a)) => run_export(a),
        Some(Command::Mcp(a)) => {
            init_logs(false, true);
            rt.block_on(run_mcp(a))
        }
        None => {
            init_logs(cli.run.log_json, cli.run.status);
            match load_config(&cli.run) {
                Ok(cfg) => rt.block_on(run_agent(
                    cfg,
                    cli.run.status,
                    cli.run.api_test_clock_offset_ms.unwrap_or(0),
                )),
                Err(e) => {
                    eprintln!("ingero-agent: invalid configuration:\n{e}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ingero-agent: {e}");
            ExitCode::from(1)
        }
    }
}
