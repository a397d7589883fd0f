//! Building a running agent from a validated [`AgentConfig`]: identity, transport, push
//! client, poller, socket. The binary and the end-to-end tests use the same function.

use std::sync::{Arc, OnceLock};

use component::Clock;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::agent::{Agent, AgentParts};
use crate::config::{AgentConfig, ProviderSetting};
use crate::events_out::uds::UdsServer;
use crate::fleet::client::PushClient;
use crate::fleet::payload::{GpuInfo, Identity};
use crate::fleet::poller::ThresholdPoller;
use crate::fleet::transport::{HttpTransport, TlsFiles};
use crate::fleet::url;
use crate::health::core::{CoreConfig, HealthCore};
use crate::health::threshold::ThresholdCache;
use crate::nccl::NcclOutbox;
use crate::signals::SignalSource;
use crate::status::StatusBoard;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("fleet.endpoint: {0}")]
    Endpoint(String),
    #[error("fleet.threshold_url: {0}")]
    ThresholdUrl(String),
    #[error("TLS: {0}")]
    Transport(#[from] crate::fleet::transport::TransportError),
    #[error("remediation socket: {0}")]
    Socket(#[from] crate::events_out::uds::UdsError),
    #[error("otlp.endpoint: {0}")]
    OtlpEndpoint(String),
}

/// The detection-span exporter when `otlp.enabled` (inside a Tokio runtime): its own
/// client with the fleet's TLS files and timeout, no bearer token.
pub fn span_exporter(cfg: &AgentConfig) -> Result<Option<crate::spans::SpanExporter>, SetupError> {
    let o = &cfg.otlp;
    if !o.enabled {
        return Ok(None);
    }
    let url =
        crate::spans::traces_url(&o.endpoint, o.insecure).map_err(SetupError::OtlpEndpoint)?;
    let f = &cfg.fleet;
    let tls = TlsFiles {
        ca: f.tls_ca.clone(),
        cert: f.tls_cert.clone(),
        key: f.tls_key.clone(),
    };
    let transport = Arc::new(HttpTransport::new(&tls, f.effective_timeout(), None)?);
    Ok(Some(crate::spans::SpanExporter::start(
        transport,
        url,
        crate::spans::resource(&identity(cfg)),
    )))
}

/// What [`build`] returns: the agent, plus the pieces that run beside it.
#[derive(Debug)]
pub struct Built {
    pub agent: Agent,
    pub poller: Option<ThresholdPoller>,
    pub cache: Arc<Mutex<ThresholdCache>>,
    pub status: Arc<StatusBoard>,
    pub push: Option<Arc<PushClient>>,
    pub uds: Option<Arc<UdsServer>>,
    pub provider: Arc<OnceLock<&'static str>>,
}

/// The host name, as the default node id.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown-node".to_string())
}

/// The cgroup path of a `/proc/<pid>/cgroup` text: the v2 `0::` line (even `/`), else the
/// longest v1 path.
pub fn cgroup_path(text: &str) -> Option<String> {
    let mut v1: Option<&str> = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(_ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" {
            return Some(path.to_string());
        }
        if v1.is_none_or(|p| path.len() > p.len()) {
            v1 = Some(path);
        }
    }
    v1.map(str::to_string)
}

/// First 16 hex chars of SHA-256 of a cgroup path.
pub fn hash_cgroup_path(path: &str) -> String {
    let digest = Sha256::digest(path.as_bytes());
    hex::encode(&digest[..8])
}

/// `ingero.cgroup_path_hash` of this process, or empty when it cannot be resolved.
pub fn own_cgroup_hash() -> String {
    std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| cgroup_path(&t))
        .map(|p| hash_cgroup_path(&p))
        .unwrap_or_default()
}

/// The identity stamped on every push.
pub fn identity(cfg: &AgentConfig) -> Identity {
    let f = &cfg.fleet;
    let node_id = f.node_id.trim();
    Identity {
        node_id: if node_id.is_empty() {
            hostname()
        } else {
            node_id.to_string()
        },
        cluster_id: f.cluster_id.trim().to_string(),
        world_size: f.world_size,
        node_rank: f.node_rank,
        workload_type: f.workload_type.clone(),
        cgroup_path_hash: own_cgroup_hash(),
    }
}

/// Ticks whose signal window still reaches back before a wake from IDLE:
/// `ceil(window / interval)`, at least 1.
pub fn settle_ticks(window: std::time::Duration, interval: std::time::Duration) -> u32 {
    let w = window.as_secs_f64();
    let i = interval.as_secs_f64().max(1e-3);
    ((w / i).ceil() as u32).max(1)
}

/// Build the agent. Must run inside a tokio runtime (the socket spawns its accept task).
pub fn build(
    cfg: &AgentConfig,
    clock: Arc<dyn Clock>,
    source: Box<dyn SignalSource>,
    nccl: Option<NcclOutbox>,
    gpu: Option<GpuInfo>,
) -> Result<Built, SetupError> {
    let f = &cfg.fleet;
    let cache = Arc::new(Mutex::new(ThresholdCache::new()));
    let status = Arc::new(StatusBoard::new());
    let needs_http = !f.endpoint.is_empty() || !f.threshold_url.is_empty();
    let transport = if needs_http {
        let tls = TlsFiles {
            ca: f.tls_ca.clone(),
            cert: f.tls_cert.clone(),
            key: f.tls_key.clone(),
        };
        Some(Arc::new(HttpTransport::new(
            &tls,
            f.effective_timeout(),
            f.token_file.clone(),
        )?))
    } else {
        None
    };
    let push = match (&transport, f.endpoint.is_empty()) {
        (Some(t), false) => {
            let u = url::push_url(&f.endpoint, f.insecure, f.cluster_id.trim())
                .map_err(SetupError::Endpoint)?;
            Some(Arc::new(PushClient::new(
                t.clone(),
                u,
                f.encoding,
                cache.clone(),
                clock.clone(),
            )))
        }
        _ => None,
    };
    let poller = match (&transport, f.threshold_url.is_empty()) {
        (Some(t), false) => {
            let u = url::threshold_url(&f.threshold_url, f.insecure, f.cluster_id.trim())
                .map_err(SetupError::ThresholdUrl)?;
            Some(ThresholdPoller::new(
                t.clone(),
                u,
                f.poll_interval,
                cache.clone(),
                clock.clone(),
            ))
        }
        _ => None,
    };
    let uds = if cfg.remediate.enabled {
        Some(Arc::new(UdsServer::bind(
            &cfg.remediate.socket,
            cfg.remediate.gid,
        )?))
    } else {
        None
    };
    let provider = Arc::new(OnceLock::new());
    match f.provider {
        ProviderSetting::Aws => drop(provider.set("aws")),
        ProviderSetting::Gcp => drop(provider.set("gcp")),
        ProviderSetting::Azure => drop(provider.set("azure")),
        ProviderSetting::Auto | ProviderSetting::None => {}
    }
    let core_cfg = CoreConfig {
        hysteresis: cfg.health.classifier_hysteresis,
        rule: cfg.health.classifier,
        settle_ticks: settle_ticks(cfg.health.signal_window, f.push_interval),
        ..CoreConfig::default()
    }
    .with_warmup(cfg.health.warmup_samples);
    status.update(|s| {
        s.endpoint = push
            .as_ref()
            .map(|p| p.url().to_string())
            .unwrap_or_default();
        s.warmup_samples = cfg.health.warmup_samples;
    });
    let agent = Agent::new(AgentParts {
        core: HealthCore::new(core_cfg),
        source,
        push: push.clone(),
        cache: cache.clone(),
        uds: uds.clone(),
        nccl,
        identity: identity(cfg),
        provider: provider.clone(),
        gpu,
        clock,
        status: status.clone(),
        push_interval: f.push_interval,
        signal_window: cfg.health.signal_window,
        persist_path: (!f.persist_path.as_os_str().is_empty()).then(|| f.persist_path.clone()),
    });
    Ok(Built {
        agent,
        poller,
        cache,
        status,
        push,
        uds,
        provider,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_ticks_cover_the_window() {
        use std::time::Duration;
        let s = |w, i| settle_ticks(Duration::from_secs(w), Duration::from_secs(i));
        assert_eq!(s(60, 10), 6);
        assert_eq!(s(1, 1), 1);
        assert_eq!(s(5, 2), 3);
        assert_eq!(s(1, 10), 1);
    }

    #[test]
    fn cgroup_paths_and_hashes() {
        assert_eq!(cgroup_path("0::/\n").as_deref(), Some("/"));
        assert_eq!(
            hash_cgroup_path("/"),
            "8a5edab282632443",
            "the spec's value for the root cgroup"
        );
        assert_eq!(
            cgroup_path("12:memory:/kubepods/pod1/c1\n3:cpu:/kubepods\n").as_deref(),
            Some("/kubepods/pod1/c1")
        );
        assert_eq!(
            cgroup_path("0::/system.slice/x.service\n1:name=systemd:/a").as_deref(),
            Some("/system.slice/x.service")
        );
        assert_eq!(cgroup_path("garbage"), None);
        assert_eq!(own_cgroup_hash().len(), 16);
    }
}
