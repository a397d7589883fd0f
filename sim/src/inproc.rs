//! Fleet in process on a simulated clock: the real `ingero` and `nccl_peer_lag`
//! processors and the real `ingero_threshold` extension (its store answers the push
//! headers, its admin routes the diagnostics), driven by `process` / `tick` with the
//! simulated time, as the host's pipeline drives them. No sockets, no HTTP, no wall clock:
//! this is how the large node-tick counts are run.

use std::sync::Arc;

use component::api::ApiRequest;
use component::otlp::{self, ExportMetricsServiceRequest};
use component::{BatchContext, ComponentId, Extension, Processor, StaticHost, Timestamp};
use ingero_extension::{DIAGNOSTICS_PATH, ThresholdExtension, ThresholdExtensionConfig};
use ingero_processor::{IngeroConfig, IngeroProcessor};
use ingero_wire::resource;
use nccl_processor::NcclPeerLagProcessor;
use nccl_processor::config::NcclConfig;

use crate::agent::HealthAnswer;
use crate::record::NamedRank;

/// The cluster state Fleet's admin diagnostics report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClusterView {
    pub threshold: Option<f64>,
    pub median: Option<f64>,
    pub quorum_met: bool,
    pub panic: bool,
}

pub struct InProcessFleet {
    ingero: IngeroProcessor,
    nccl: NcclPeerLagProcessor,
    ext: Arc<ThresholdExtension>,
}

impl std::fmt::Debug for InProcessFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessFleet").finish_non_exhaustive()
    }
}

impl InProcessFleet {
    pub fn new(cfg: IngeroConfig) -> Result<Self, String> {
        let ingero = IngeroProcessor::new(cfg).map_err(|e| e.to_string())?;
        let nccl = NcclPeerLagProcessor::new(NcclConfig::default()).map_err(|e| e.to_string())?;
        let ext = Arc::new(ThresholdExtension::new(ThresholdExtensionConfig::default()));
        let host = StaticHost {
            extensions: vec![(
                ComponentId::new(ingero_extension::TYPE),
                Arc::clone(&ext) as Arc<dyn Extension>,
            )],
        };
        ingero.start(&host).map_err(|e| e.to_string())?;
        nccl.start(&host).map_err(|e| e.to_string())?;
        Ok(InProcessFleet { ingero, nccl, ext })
    }

    /// One push through the pipeline (`ingero`, then `nccl_peer_lag`); the answer carries
    /// the headers the extension's store gives this cluster now. Returns the answer and
    /// the points refused.
    pub fn push(
        &self,
        cluster: &str,
        req: ExportMetricsServiceRequest,
        now: Timestamp,
    ) -> (HealthAnswer, u64) {
        let mut batch = req.resource_metrics;
        let ctx = BatchContext {
            cluster_id: Some(Arc::from(cluster)),
            received_at: now,
            tenant: None,
        };
        let o = self.ingero.process(&mut batch, &ctx);
        let n = self.nccl.process(&mut batch, &ctx);
        let mut a = HealthAnswer {
            ok: true,
            ..HealthAnswer::default()
        };
        if let Some(h) = self.ext.store().push_headers(cluster) {
            let [(_, t), (_, q)] = h.pairs();
            a.threshold = t.to_str().ok().map(str::to_string);
            a.quorum_met = q.to_str().ok().map(str::to_string);
        }
        (a, o.rejected_points + n.rejected_points)
    }

    /// The `ingero` processor's tick: the node ids it flags as stragglers now.
    pub fn tick_ingero(&self, now: Timestamp) -> Vec<String> {
        self.ingero
            .tick(now)
            .iter()
            .filter_map(|rm| otlp::get_str(otlp::resource_attrs(rm), resource::NODE_ID))
            .map(str::to_string)
            .collect()
    }

    pub fn tick_nccl(&self, now: Timestamp) {
        let _lags = self.nccl.tick(now);
    }

    /// The cluster as the admin API's diagnostics answer it.
    pub fn cluster_view(&self, cluster: &str) -> ClusterView {
        let query = format!("cluster_id={cluster}");
        let resp = self.ext.route_admin(&ApiRequest {
            method: "GET",
            path: DIAGNOSTICS_PATH,
            query: Some(&query),
        });
        if resp.status != 200 {
            return ClusterView::default();
        }
        serde_json::from_slice::<serde_json::Value>(&resp.body)
            .map(|v| cluster_view_of(&v))
            .unwrap_or_default()
    }

    /// Ranks the `nccl_peer_lag` processor names (chronic or periodic), from its
    /// diagnostics.
    pub fn named_ranks(&self) -> Vec<NamedRank> {
        self.nccl
            .diagnostics()
            .map(|d| named_ranks_of(&d))
            .unwrap_or_default()
    }
}

/// [`ClusterView`] from a `GET /api/v1/diagnostics?cluster_id=` body.
pub fn cluster_view_of(v: &serde_json::Value) -> ClusterView {
    let d = &v["diagnostics"];
    ClusterView {
        threshold: v["threshold"].as_f64(),
        median: d["median"].as_f64(),
        quorum_met: v["quorum_met"].as_bool().unwrap_or(false),
        panic: d["panic_mode"].as_bool().unwrap_or(false),
    }
}

/// Named ranks from the `nccl_peer_lag` processor's diagnostics JSON.
pub fn named_ranks_of(d: &serde_json::Value) -> Vec<NamedRank> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let arr = |v: &serde_json::Value| v.as_array().unwrap_or(&empty).clone();
    for c in arr(&d["clusters"]) {
        for comm in arr(&c["communicators"]) {
            for op in arr(&comm["ops"]) {
                for r in arr(&op["worst_ranks"]) {
                    if r["named"].as_bool() != Some(true) {
                        continue;
                    }
                    let (Some(rank), Some(lag)) = (r["rank"].as_u64(), r["median_lag_ms"].as_f64())
                    else {
                        continue;
                    };
                    out.push(NamedRank {
                        rank: u32::try_from(rank).unwrap_or(u32::MAX),
                        median_lag_ms: lag,
                        period_steps: r["period_steps"]
                            .as_u64()
                            .and_then(|p| u32::try_from(p).ok()),
                        chronic: r["chronic"].as_bool().unwrap_or(false),
                    });
                }
            }
        }
    }
    out
}
