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
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => {}
                _ = i.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn run_agent(mut cfg: AgentConfig, show_status: bool) -> Result<(), String> {
    if !cfg.synthetic.enabled {
        probes::scope::adopt_identity(&mut cfg);
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut probe_handle = None;
    let mut nvml = None;
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
        let started = probes::start(&cfg, rx.clone()).map_err(|e| e.to_string())?;
        probe_handle = Some(started.handle);
        nvml = started.nvml;
        (Box::new(started.source), started.nccl, started.gpu)
    };
    let built = setup::build(&cfg, clock.clone(), source, nccl, gpu).map_err(|e| e.to_string())?;
    let mut agent = built.agent;
    if let Some(nvml) = nvml {
        agent.set_gpu_activity(Box::new(move || nvml.gpu_utilization()));
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
    shutdown_signal().await;
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
    Ok(())
}

fn agent_identity(cfg: &AgentConfig) -> String {
    setup::identity(cfg).node_id
}

async fn run_sink(a: SinkArgs) -> Result<(), String> {
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
    shutdown_signal().await;
    let _ = tx.send(true);
    reader.abort();
    let _ = server.await;
    Ok(())
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
        None => {
            init_logs(cli.run.log_json, cli.run.status);
            match load_config(&cli.run) {
                Ok(cfg) => rt.block_on(run_agent(cfg, cli.run.status)),
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
