//! The agent's configuration: one serde tree (YAML file, `--config`) that the command-line
//! flags override, validated in one place that reports every problem with its key path.

use std::path::PathBuf;
use std::time::Duration;

use component::ComponentConfig;
use component::config::{ConfigErrors, check, duration};
use serde::{Deserialize, Serialize};

use crate::signals::synthetic::SyntheticScript;

pub const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(10);
pub const MIN_PUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Upper bound of the derived request timeout (`fleet.timeout` not given).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(10);
pub const DEFAULT_WORKLOAD_TYPE: &str = "unknown";
pub const DEFAULT_PERSIST_PATH: &str = crate::health::persist::DEFAULT_PATH;
pub const DEFAULT_PERSIST_STALE_AGE: Duration = crate::health::persist::DEFAULT_STALE_AGE;
pub const DEFAULT_WARMUP_SAMPLES: u64 = crate::health::baseline::DEFAULT_WARMUP_SAMPLES;
pub const DEFAULT_HYSTERESIS: f64 = crate::health::classifier::DEFAULT_HYSTERESIS;
pub const DEFAULT_SIGNAL_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_REMEDIATE_SOCKET: &str = "/tmp/ingero-remediate.sock";
pub const DEFAULT_REMEDIATE_GID: u32 = 65532;
pub const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(10);
pub const DEFAULT_SYNTHETIC_SCRIPT: &str = "0s:1.0";
pub const DEFAULT_SYNTHETIC_RATE: f64 = 1000.0;
pub const DEFAULT_NCCL_MAX_POINTS: usize = 4096;

/// Whether the runtime's kernel-launch probes stay attached (`probes.runtime_launch_probes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeLaunchProbes {
    /// Count at both layers while calibrating; when every runtime launch is seen reaching
    /// the exported driver entry, detach the runtime's launch probes and count at the
    /// driver alone (one trap per launch instead of two).
    #[default]
    Auto,
    /// Keep the runtime's launch probes attached (two traps per runtime launch).
    Always,
}

/// OTLP body encoding of pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Protobuf,
    Json,
}

/// Where `ingero.provider` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ProviderSetting {
    /// Probe cloud metadata services once at start (AWS, GCP, Azure; 1.5 s budget).
    #[default]
    Auto,
    /// Never send `ingero.provider`.
    None,
    Aws,
    Gcp,
    Azure,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// `host:port` or `http(s)://host[:port][/path]`. Empty: no push (local modes only).
    pub endpoint: String,
    pub cluster_id: String,
    /// Empty: the host name.
    pub node_id: String,
    #[serde(with = "duration")]
    pub push_interval: Duration,
    /// Per-request timeout. `None` (not given): derived from the push interval, see
    /// [`FleetConfig::effective_timeout`].
    #[serde(with = "opt_duration", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Base URL of the GET fallback (`/api/v1/threshold` is appended). Empty: no poller.
    pub threshold_url: String,
    #[serde(with = "duration")]
    pub poll_interval: Duration,
    /// Plain http for a bare `host:port`.
    pub insecure: bool,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// File holding a bearer token, re-read on every request (rotation without restart).
    pub token_file: Option<PathBuf>,
    pub world_size: u32,
    pub node_rank: u32,
    pub workload_type: String,
    pub persist_path: PathBuf,
    #[serde(with = "duration")]
    pub persist_stale_age: Duration,
    pub encoding: Encoding,
    pub provider: ProviderSetting,
    /// Other agents' query APIs (`host:port`) that `query`, `explain`, `export` and MCP's
    /// `query_fleet` fan out to when no `--nodes` is given.
    pub nodes: Vec<String>,
    /// How to reach them.
    pub query: crate::fanout::FanoutConfig,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            endpoint: String::new(),
            cluster_id: String::new(),
            node_id: String::new(),
            push_interval: DEFAULT_PUSH_INTERVAL,
            timeout: None,
            threshold_url: String::new(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            insecure: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            token_file: None,
            world_size: 0,
            node_rank: 0,
            workload_type: DEFAULT_WORKLOAD_TYPE.to_string(),
            persist_path: PathBuf::from(DEFAULT_PERSIST_PATH),
            persist_stale_age: DEFAULT_PERSIST_STALE_AGE,
            encoding: Encoding::Protobuf,
            provider: ProviderSetting::Auto,
            nodes: Vec::new(),
            query: crate::fanout::FanoutConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    pub warmup_samples: u64,
    pub classifier_hysteresis: f64,
    /// Rolling window the raw signals are computed over.
    #[serde(with = "duration")]
    pub signal_window: Duration,
    /// GPUs the compute signal is divided by; 0 = NVML's count, else 1.
    pub num_gpus: u32,
    /// Straggler rule: `cusum` (Fleet's persistence-aware rule) or `one-sample` (spec 4.1).
    pub classifier: crate::health::classifier::Rule,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            warmup_samples: DEFAULT_WARMUP_SAMPLES,
            classifier_hysteresis: DEFAULT_HYSTERESIS,
            signal_window: DEFAULT_SIGNAL_WINDOW,
            num_gpus: 0,
            classifier: crate::health::classifier::Rule::Cusum,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemediateConfig {
    /// Serve straggler events on the Unix socket.
    pub enabled: bool,
    pub socket: PathBuf,
    /// Group allowed to connect (socket mode 0770); `null` keeps 0700.
    pub gid: Option<u32>,
}

impl Default for RemediateConfig {
    fn default() -> Self {
        RemediateConfig {
            enabled: false,
            socket: PathBuf::from(DEFAULT_REMEDIATE_SOCKET),
            gid: Some(DEFAULT_REMEDIATE_GID),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbesConfig {
    /// Probe libcudart / libcuda.
    pub cuda: bool,
    /// Probe libnccl and export collectives.
    pub nccl: bool,
    /// How often `/proc/*/maps` is scanned for new libraries.
    #[serde(with = "duration")]
    pub discovery_interval: Duration,
    /// Library directories accepted besides the built-in allow-list.
    pub extra_library_roots: Vec<PathBuf>,
    /// Cap of NCCL points per export (one export per push); overflow is counted.
    pub nccl_max_points: usize,
    /// Watch only these processes (and those of `cgroups`); empty: every process.
    pub pids: Vec<u32>,
    /// Watch only the processes of these cgroup v2 directories and their child cgroups
    /// (absolute, or relative to the cgroup v2 mount).
    pub cgroups: Vec<PathBuf>,
    /// `auto`: count runtime launches at the driver alone once that is shown to miss
    /// none; `always`: keep the runtime's launch probes.
    pub runtime_launch_probes: RuntimeLaunchProbes,
}

impl Default for ProbesConfig {
    fn default() -> Self {
        ProbesConfig {
            cuda: true,
            nccl: true,
            discovery_interval: DEFAULT_DISCOVERY_INTERVAL,
            extra_library_roots: Vec::new(),
            nccl_max_points: DEFAULT_NCCL_MAX_POINTS,
            pids: Vec::new(),
            cgroups: Vec::new(),
            runtime_launch_probes: RuntimeLaunchProbes::Auto,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyntheticConfig {
    /// Drive the agent from a scripted signal instead of eBPF (no GPU, no root needed).
    pub enabled: bool,
    /// `offset:factor` steps, e.g. `0s:1.0,60s:0.8,120s:1.0`, or `@path` to a file with one
    /// step per line.
    pub script: String,
    /// Kernel launches per second at factor 1.0.
    pub base_rate: f64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        SyntheticConfig {
            enabled: false,
            script: DEFAULT_SYNTHETIC_SCRIPT.to_string(),
            base_rate: DEFAULT_SYNTHETIC_RATE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address of the agent's own Prometheus endpoint; empty: not served. `--metrics` sets
    /// it to [`crate::selfmetrics::DEFAULT_LISTEN`] (loopback).
    pub listen: String,
}

/// Detection-edge traces (`otlp.*`): the straggler span over OTLP/HTTP.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpConfig {
    pub enabled: bool,
    /// `host:port` or `http(s)://host:port[/path]`; `/v1/traces` is appended.
    pub endpoint: String,
    /// Plain http for a bare `host:port`.
    pub insecure: bool,
}

impl OtlpConfig {
    fn validate_into(&self, errs: &mut ConfigErrors) {
        if self.endpoint.is_empty() {
            if self.enabled {
                errs.push("otlp.endpoint", "required when otlp.enabled is true");
            }
            return;
        }
        if has_crlf(&self.endpoint) {
            errs.push("otlp.endpoint", "must not contain CR or LF");
            return;
        }
        if let Err(e) = crate::spans::traces_url(&self.endpoint, self.insecure) {
            errs.push("otlp.endpoint", e);
        }
    }
}

/// The local event store (`ingero-agent explain`, `query`, `merge`, `export` read it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Record CUDA/NCCL call durations and the host layers into the database.
    pub enabled: bool,
    pub path: PathBuf,
    /// Node identity written with every row; empty: `fleet.node_id`, else the host name.
    pub node: String,
    /// Roll the file over to `<path>.1` at this size (MiB).
    pub max_size_mb: u64,
    /// Delete rows older than this.
    #[serde(with = "duration")]
    pub max_age: Duration,
    /// Trace the scheduler and block I/O of the watched processes (tracepoints).
    pub host_layers: bool,
}

/// Where the store lives unless configured.
pub const DEFAULT_STORE_PATH: &str = "/var/lib/ingero/ingero.db";

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            enabled: false,
            path: PathBuf::from(DEFAULT_STORE_PATH),
            node: String::new(),
            max_size_mb: 1024,
            max_age: Duration::from_secs(24 * 3600),
            host_layers: true,
        }
    }
}

/// The whole agent configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    pub fleet: FleetConfig,
    pub health: HealthConfig,
    pub remediate: RemediateConfig,
    pub probes: ProbesConfig,
    pub synthetic: SyntheticConfig,
    pub metrics: MetricsConfig,
    pub store: StoreConfig,
    /// Detection-edge traces (off by default).
    pub otlp: OtlpConfig,
    /// The query API (off by default).
    pub api: crate::api::ApiConfig,
}

fn has_crlf(s: &str) -> bool {
    s.contains('\r') || s.contains('\n')
}

fn check_url(errs: &mut ConfigErrors, path: &str, v: &str) {
    if let Some((scheme, _)) = v.split_once("://")
        && scheme != "http"
        && scheme != "https"
    {
        errs.push(
            path,
            format!("scheme {scheme:?} is not supported (http or https)"),
        );
        return;
    }
    if let Err(e) = crate::fleet::url::base_uri(v, false) {
        errs.push(path, e);
    }
}

/// `Option<Duration>` in the duration text format (`5s`, `250ms`); absent or `null` is `None`.
mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => component::config::duration::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(text) => component::config::parse_duration(&text)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

impl FleetConfig {
    /// The per-request timeout: the configured one, else `min(5s, push_interval / 2)` (never
    /// below 100ms), so a short push interval alone is a valid configuration and a request
    /// always finishes (or fails) well before the next tick.
    pub fn effective_timeout(&self) -> Duration {
        self.timeout
            .unwrap_or_else(|| DEFAULT_TIMEOUT.min(self.push_interval / 2).max(MIN_TIMEOUT))
    }

    fn validate_into(&self, errs: &mut ConfigErrors) {
        if !self.endpoint.is_empty() {
            check_url(errs, "fleet.endpoint", &self.endpoint);
            if self.cluster_id.trim().is_empty() {
                errs.push("fleet.cluster_id", "required when fleet.endpoint is set");
            }
        }
        if !self.threshold_url.is_empty() {
            check_url(errs, "fleet.threshold_url", &self.threshold_url);
            if self.cluster_id.trim().is_empty() {
                errs.push(
                    "fleet.cluster_id",
                    "required when fleet.threshold_url is set",
                );
            }
        }
        for (path, v) in [
            ("fleet.cluster_id", &self.cluster_id),
            ("fleet.node_id", &self.node_id),
            ("fleet.workload_type", &self.workload_type),
        ] {
            if has_crlf(v) {
                errs.push(path, "must not contain CR or LF");
            }
        }
        if self.push_interval < MIN_PUSH_INTERVAL {
            errs.push(
                "fleet.push_interval",
                format!("must be >= 1s, got {:?}", self.push_interval),
            );
        }
        if self.poll_interval < MIN_PUSH_INTERVAL {
            errs.push(
                "fleet.poll_interval",
                format!("must be >= 1s, got {:?}", self.poll_interval),
            );
        }
        let timeout = self.effective_timeout();
        if timeout < MIN_TIMEOUT {
            errs.push(
                "fleet.timeout",
                format!("must be >= 100ms, got {timeout:?}"),
            );
        } else if timeout > self.push_interval {
            errs.push("fleet.timeout", "must be <= fleet.push_interval");
        } else if !self.threshold_url.is_empty() && timeout > self.poll_interval {
            errs.push("fleet.timeout", "must be <= fleet.poll_interval");
        }
        let tls = [&self.tls_ca, &self.tls_cert, &self.tls_key];
        let given = tls.iter().filter(|p| p.is_some()).count();
        if given != 0 && given != 3 {
            errs.push(
                "fleet.tls_ca",
                "tls_ca, tls_cert and tls_key must be given together",
            );
        }
        if given > 0 && self.insecure {
            errs.push(
                "fleet.insecure",
                "cannot be combined with TLS client certificates",
            );
        }
        if self.world_size > 0 && self.node_rank >= self.world_size {
            errs.push(
                "fleet.node_rank",
                format!(
                    "must be < world_size ({}), got {}",
                    self.world_size, self.node_rank
                ),
            );
        }
        if self.world_size == 0 && self.node_rank != 0 {
            errs.push("fleet.node_rank", "requires fleet.world_size > 0");
        }
        if self.persist_stale_age.is_zero() {
            errs.push("fleet.persist_stale_age", "must be > 0");
        }
        if let Err(e) = crate::fanout::parse_nodes(&self.nodes)
            && !self.nodes.is_empty()
        {
            errs.push("fleet.nodes", e);
        }
        self.query.validate_into(errs, "fleet.query");
    }
}

impl ComponentConfig for AgentConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::new();
        self.fleet.validate_into(&mut errs);
        self.api.validate_into(&mut errs);
        self.otlp.validate_into(&mut errs);
        let h = &self.health;
        if !(0.0..0.5).contains(&h.classifier_hysteresis) {
            errs.push(
                "health.classifier_hysteresis",
                format!("must be in [0, 0.5), got {}", h.classifier_hysteresis),
            );
        }
        if h.signal_window < Duration::from_secs(1) {
            errs.push("health.signal_window", "must be >= 1s");
        }
        if self.probes.discovery_interval < Duration::from_secs(1) {
            errs.push("probes.discovery_interval", "must be >= 1s");
        }
        if self.probes.pids.contains(&0) {
            errs.push("probes.pids", "0 is not a process id");
        }
        if self.probes.nccl_max_points == 0 {
            errs.push("probes.nccl_max_points", "must be > 0");
        }
        for (i, root) in self.probes.extra_library_roots.iter().enumerate() {
            if !root.is_absolute() {
                errs.push(
                    format!("probes.extra_library_roots[{i}]"),
                    "must be an absolute path",
                );
            }
        }
        if !self.metrics.listen.is_empty()
            && self.metrics.listen.parse::<std::net::SocketAddr>().is_err()
        {
            errs.push(
                "metrics.listen",
                format!(
                    "expected ip:port (e.g. {}), got {:?}",
                    crate::selfmetrics::DEFAULT_LISTEN,
                    self.metrics.listen
                ),
            );
        }
        if self.remediate.socket.as_os_str().is_empty() {
            errs.push("remediate.socket", "must not be empty");
        }
        if self.store.enabled && self.store.path.as_os_str().is_empty() {
            errs.push("store.path", "must not be empty");
        }
        if self.store.max_size_mb == 0 {
            errs.push("store.max_size_mb", "must be > 0");
        }
        if self.store.max_age < Duration::from_secs(60) {
            errs.push("store.max_age", "must be >= 1m");
        }
        if has_crlf(&self.store.node) || self.store.node.contains(':') {
            errs.push(
                "store.node",
                "must not contain ':', CR or LF (ids are {node}:{seq})",
            );
        }
        check::positive_finite(&mut errs, "synthetic.base_rate", self.synthetic.base_rate);
        // A file script is checked when it is read; an inline one is checked here.
        if !self.synthetic.script.starts_with('@')
            && let Err(e) = SyntheticScript::parse(&self.synthetic.script)
        {
            errs.push("synthetic.script", e);
        }
        errs.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::config::{decode, parse_yaml};

    fn paths(e: &ConfigErrors) -> Vec<String> {
        e.iter().map(|e| e.path.clone()).collect()
    }

    #[test]
    fn default_config_validates() {
        AgentConfig::default().validate().unwrap();
    }

    #[test]
    fn otlp_needs_a_valid_endpoint_when_enabled() {
        let with = |enabled: bool, endpoint: &str| {
            let mut c = AgentConfig::default();
            c.otlp.enabled = enabled;
            c.otlp.endpoint = endpoint.into();
            c.validate()
        };
        let msg = |r: Result<(), ConfigErrors>| {
            let e = r.unwrap_err();
            assert_eq!(paths(&e), ["otlp.endpoint"], "{e}");
            e.iter().next().unwrap().message.clone()
        };
        assert!(msg(with(true, "")).contains("required"));
        assert!(msg(with(true, "ftp://collector:4318")).contains("not supported"));
        assert!(msg(with(true, "http://")).contains("no host"));
        assert!(msg(with(false, "collector:4318\nx")).contains("CR or LF"));
        with(true, "collector:4318").unwrap();
        with(true, "https://collector:4318").unwrap();
        // Off and no endpoint: nothing to check.
        with(false, "").unwrap();
        let c: AgentConfig = decode(
            &parse_yaml(b"otlp:\n  enabled: true\n  endpoint: 127.0.0.1:4318\n  insecure: true\n")
                .unwrap(),
        )
        .unwrap();
        assert!(c.otlp.enabled && c.otlp.insecure);
        assert_eq!(c.otlp.endpoint, "127.0.0.1:4318");
        assert!(decode::<AgentConfig>(&parse_yaml(b"otlp:\n  enable: true\n").unwrap()).is_err());
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let mut c = AgentConfig::default();
        c.fleet.endpoint = "ftp://x".into();
        c.fleet.push_interval = Duration::from_millis(500);
        c.fleet.timeout = Some(Duration::from_millis(10));
        c.fleet.tls_ca = Some("/ca".into());
        c.fleet.world_size = 4;
        c.fleet.node_rank = 4;
        c.fleet.workload_type = "a\nb".into();
        c.health.classifier_hysteresis = 0.5;
        c.synthetic.script = "0s:1.0,junk".into();
        let err = c.validate().unwrap_err();
        assert_eq!(
            paths(&err),
            [
                "fleet.endpoint",
                "fleet.cluster_id",
                "fleet.workload_type",
                "fleet.push_interval",
                "fleet.timeout",
                "fleet.tls_ca",
                "fleet.node_rank",
                "health.classifier_hysteresis",
                "synthetic.script",
            ],
            "{err}"
        );
    }

    #[test]
    fn the_timeout_follows_a_short_push_interval_unless_given() {
        let mut c = AgentConfig::default();
        assert_eq!(
            c.fleet.effective_timeout(),
            DEFAULT_TIMEOUT,
            "10s interval: 5s"
        );
        c.fleet.push_interval = Duration::from_secs(2);
        c.validate().unwrap();
        assert_eq!(c.fleet.effective_timeout(), Duration::from_secs(1));
        c.fleet.push_interval = MIN_PUSH_INTERVAL;
        c.validate().unwrap();
        assert_eq!(c.fleet.effective_timeout(), Duration::from_millis(500));
        // An explicit timeout is kept and still checked against the interval.
        c.fleet.timeout = Some(Duration::from_secs(3));
        assert_eq!(paths(&c.validate().unwrap_err()), ["fleet.timeout"]);
        c.fleet.timeout = Some(Duration::from_millis(800));
        c.validate().unwrap();
        assert_eq!(c.fleet.effective_timeout(), Duration::from_millis(800));
        // The YAML form: a duration string, or absent.
        let v = parse_yaml(b"fleet:\n  push_interval: 2s\n  timeout: 750ms\n").unwrap();
        let d = decode::<AgentConfig>(&v).unwrap();
        assert_eq!(d.fleet.timeout, Some(Duration::from_millis(750)));
        let v = parse_yaml(b"fleet:\n  push_interval: 2s\n").unwrap();
        let d = decode::<AgentConfig>(&v).unwrap();
        assert_eq!(d.fleet.effective_timeout(), Duration::from_secs(1));
        let v = parse_yaml(b"fleet:\n  timeout: soon\n").unwrap();
        assert_eq!(
            paths(&decode::<AgentConfig>(&v).unwrap_err()),
            ["fleet.timeout"]
        );
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_path() {
        let v = parse_yaml(b"fleet:\n  endpoint: localhost:4318\n  clusterid: x\n").unwrap();
        let err = decode::<AgentConfig>(&v).unwrap_err();
        assert_eq!(paths(&err), ["fleet.clusterid"]);
    }
}
