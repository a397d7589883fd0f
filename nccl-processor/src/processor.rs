//! Glue: OTLP batches in, cluster trackers in between, lag metrics and telemetry out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use component::otlp::{ResourceMetrics, get_str, resource_attrs};
use component::{
    BatchContext, ConfigErrors, Host, MetricFamily, ProcessOutcome, Processor, StartError,
    Timestamp,
};
use ingero_wire::resource;
use ingero_wire::view::{ClusterViewSource, PeerLagView, find_view_board};
use parking_lot::{Mutex, RwLock};
use serde_json::json;

use crate::config::NcclConfig;
use crate::ingest::{NcclPoint, collect_points, format_comm_hash, is_nccl_metric};
use crate::metrics::{
    ClusterSource, Counters, Counts, DropReason, LABEL_CLUSTER_ID, LABEL_COMM_ID_HASH,
    LABEL_OP_TYPE, LABEL_RANK, LABEL_STATE,
};
use crate::output;
use crate::report::{comm_reports, named_ranks, peer_lag_view};
use crate::settings::Settings;
use crate::tracker::{ClusterTracker, Transition};

/// Naming transitions logged per tick and cluster; the rest are summarised in one line.
const LOG_TRANSITIONS_PER_TICK: usize = 16;

type Tracker = Arc<Mutex<ClusterTracker>>;
type Trackers = Arc<RwLock<HashMap<Arc<str>, Tracker>>>;

/// What the live view reads: the trackers (shared with the processor) and the settings.
#[derive(Debug)]
struct LiveView {
    clusters: Trackers,
    settings: Settings,
}

impl ClusterViewSource for LiveView {
    fn peer_lag(&self, cluster: &str) -> Option<PeerLagView> {
        let t = self.clusters.read().get(cluster).cloned()?;
        let t = t.lock();
        Some(peer_lag_view(&t, &self.settings))
    }
}

/// The `nccl_peer_lag` processor. Every method takes `&self`; state is behind one mutex per
/// cluster (batches of different clusters never contend) and a read-mostly cluster map.
#[derive(Debug)]
pub struct NcclPeerLagProcessor {
    cfg: NcclConfig,
    settings: Settings,
    clusters: Trackers,
    counters: Counters,
    view: Arc<LiveView>,
}

impl NcclPeerLagProcessor {
    /// A processor from a typed config; validates it first.
    pub fn new(cfg: NcclConfig) -> Result<Self, ConfigErrors> {
        use component::ComponentConfig;
        cfg.validate()?;
        let settings = Settings::new(&cfg);
        let clusters: Trackers = Arc::default();
        Ok(NcclPeerLagProcessor {
            view: Arc::new(LiveView {
                clusters: Arc::clone(&clusters),
                settings: settings.clone(),
            }),
            settings,
            cfg,
            clusters,
            counters: Counters::default(),
        })
    }

    pub fn config(&self) -> &NcclConfig {
        &self.cfg
    }

    /// How often the host must call [`Processor::tick`].
    pub fn tick_interval(&self) -> Duration {
        self.cfg.tick_interval
    }

    /// The counters so far (for tests and host-side checks).
    pub fn counts(&self) -> Counts {
        self.counters.snapshot()
    }

    fn tracker(&self, cluster: &str) -> Option<Tracker> {
        if let Some(t) = self.clusters.read().get(cluster) {
            return Some(t.clone());
        }
        let mut map = self.clusters.write();
        if let Some(t) = map.get(cluster) {
            return Some(t.clone());
        }
        if map.len() >= self.cfg.limits.max_clusters as usize {
            return None;
        }
        let t = Arc::new(Mutex::new(ClusterTracker::new(&self.settings)));
        map.insert(Arc::from(cluster), t.clone());
        Some(t)
    }

    fn trackers(&self) -> Vec<(Arc<str>, Tracker)> {
        let mut v: Vec<_> = self
            .clusters
            .read()
            .iter()
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    fn log_transitions(&self, cluster: &str, transitions: &[Transition], dropped: u64) {
        for t in transitions.iter().take(LOG_TRANSITIONS_PER_TICK) {
            let comm = format_comm_hash(t.comm);
            let op = self.settings.ops.name(t.op);
            if t.named {
                tracing::info!(
                    cluster_id = cluster,
                    comm_id_hash = %comm,
                    op_type = op,
                    rank = t.rank,
                    lag_ms = t.median_lag_ms.unwrap_or(0.0),
                    behind = t.behind,
                    window = t.window,
                    period_steps = t.period,
                    "NCCL rank is behind its peers"
                );
            } else {
                tracing::info!(
                    cluster_id = cluster,
                    comm_id_hash = %comm,
                    op_type = op,
                    rank = t.rank,
                    "NCCL rank no longer behind its peers"
                );
            }
        }
        let more = transitions.len().saturating_sub(LOG_TRANSITIONS_PER_TICK) as u64 + dropped;
        if more > 0 {
            tracing::info!(
                cluster_id = cluster,
                more,
                "further NCCL rank transitions not logged"
            );
        }
    }

    fn ingest_resource(
        &self,
        rm: &ResourceMetrics,
        ctx: &BatchContext,
        pts: &mut Vec<NcclPoint>,
        counts: &mut Counts,
    ) {
        let metrics = || rm.scope_metrics.iter().flat_map(|sm| sm.metrics.iter());
        if !metrics().any(is_nccl_metric) {
            return;
        }
        pts.clear();
        collect_points(
            metrics(),
            &self.settings.ops,
            self.settings.point_limits,
            pts,
            counts,
        );
        if pts.is_empty() {
            return;
        }
        let attrs = resource_attrs(rm);
        let n = pts.len() as u64;
        let cluster: &str = match get_str(attrs, resource::CLUSTER_ID).filter(|c| !c.is_empty()) {
            Some(c) => c,
            None => match ctx.cluster_id.as_deref().filter(|c| !c.is_empty()) {
                Some(c) => {
                    self.counters.fallback(ClusterSource::BatchContext, n);
                    c
                }
                None if !self.cfg.default_cluster_id.is_empty() => {
                    self.counters.fallback(ClusterSource::Default, n);
                    &self.cfg.default_cluster_id
                }
                None => {
                    for _ in 0..n {
                        counts.refuse(DropReason::NoCluster);
                    }
                    return;
                }
            },
        };
        let Some(tracker) = self.tracker(cluster) else {
            for _ in 0..n {
                counts.refuse(DropReason::CapClusters);
            }
            return;
        };
        let node: Option<Arc<str>> = get_str(attrs, resource::NODE_ID)
            .filter(|s| !s.is_empty())
            .map(Arc::from);
        tracker
            .lock()
            .ingest(node.as_ref(), pts, ctx.received_at, &self.settings, counts);
    }
}

/// Decode, validate and build the processor from its config subtree.
pub fn create(cfg: &component::ConfigValue) -> Result<NcclPeerLagProcessor, ConfigErrors> {
    let cfg: NcclConfig = component::config::decode(cfg)?;
    NcclPeerLagProcessor::new(cfg)
}

impl NcclPeerLagProcessor {
    fn read(&self, data: &[ResourceMetrics], ctx: &BatchContext) -> ProcessOutcome {
        let mut counts = Counts::default();
        let mut pts = Vec::new();
        for rm in data {
            self.ingest_resource(rm, ctx, &mut pts, &mut counts);
        }
        self.counters.add(&counts);
        ProcessOutcome::default()
    }
}

impl Processor for NcclPeerLagProcessor {
    /// Registers the peer-lag heat map with the live view, when an extension serves one.
    fn start(&self, host: &dyn Host) -> Result<(), StartError> {
        if let Some((_, board)) = find_view_board(host) {
            let view: Arc<dyn ClusterViewSource> = self.view.clone();
            board.register(view);
        }
        Ok(())
    }

    /// Reads the NCCL points of the batch and leaves the batch unchanged. Lag points are
    /// returned by `tick`, never appended here.
    fn process(&self, data: &mut Vec<ResourceMetrics>, ctx: &BatchContext) -> ProcessOutcome {
        self.read(data, ctx)
    }

    // The processor only reads batches.
    fn process_shared(
        &self,
        data: &[ResourceMetrics],
        ctx: &BatchContext,
    ) -> Option<ProcessOutcome> {
        Some(self.read(data, ctx))
    }

    fn tick(&self, now: Timestamp) -> Vec<ResourceMetrics> {
        let mut out = Vec::new();
        let mut counts = Counts::default();
        for (cluster, tracker) in self.trackers() {
            let (records, transitions, dropped) = {
                let mut t = tracker.lock();
                t.tick(now, &self.settings, &mut counts);
                let (tr, n) = t.take_transitions();
                (t.drain(), tr, n)
            };
            self.log_transitions(&cluster, &transitions, dropped);
            output::build(&cluster, records, &self.settings.ops, now, &mut out);
        }
        self.clusters.write().retain(|_, t| !t.lock().is_idle());
        self.counters.add(&counts);
        out
    }

    fn shutdown(&self) {
        let mut counts = Counts::default();
        for (_, tracker) in self.trackers() {
            tracker.lock().discard(&mut counts);
        }
        self.counters.add(&counts);
    }

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        self.counters.families(out);
        let mut comms = crate::metrics::spec::TRACKED_COMMS.family();
        let mut open = crate::metrics::spec::OPEN_BUCKETS.family();
        let mut buffered = crate::metrics::spec::BUFFERED_POINTS.family();
        let mut series = crate::metrics::spec::RANK_SERIES.family();
        let mut clocks = crate::metrics::spec::MONOTONIC_CLOCKS.family();
        let mut lag = crate::metrics::spec::RANK_LAG_SECONDS.family();
        let mut ratio = crate::metrics::spec::RANK_BEHIND_RATIO.family();
        let mut period = crate::metrics::spec::RANK_LAG_PERIOD_STEPS.family();
        for (cluster, tracker) in self.trackers() {
            let (n_comms, n_open, n_buffered, n_series, settled, calibrating, named) = {
                let t = tracker.lock();
                let settled = t.node_clocks().filter(|(_, c)| c.is_settled()).count();
                (
                    t.tracked_comms(),
                    t.open_instances(),
                    t.buffered_points(),
                    t.rank_series(),
                    settled,
                    t.node_clocks().count() - settled,
                    named_ranks(&t, &self.settings),
                )
            };
            let l = [(LABEL_CLUSTER_ID, cluster.as_ref())];
            comms.push(&l, n_comms as f64);
            open.push(&l, n_open as f64);
            buffered.push(&l, n_buffered as f64);
            series.push(&l, n_series as f64);
            for (state, n) in [("settled", settled), ("calibrating", calibrating)] {
                clocks.push(
                    &[(LABEL_CLUSTER_ID, cluster.as_ref()), (LABEL_STATE, state)],
                    n as f64,
                );
            }
            for r in named {
                let comm = format_comm_hash(r.comm);
                let rank = r.rank.to_string();
                let labels = [
                    (LABEL_CLUSTER_ID, cluster.as_ref()),
                    (LABEL_COMM_ID_HASH, comm.as_str()),
                    (LABEL_OP_TYPE, self.settings.ops.name(r.op)),
                    (LABEL_RANK, rank.as_str()),
                ];
                lag.push(&labels, r.median_lag_ms.unwrap_or(0.0) / 1000.0);
                ratio.push(&labels, r.behind_ratio);
                if let Some(p) = r.period_steps {
                    period.push(&labels, f64::from(p));
                }
            }
        }
        out.push(comms);
        out.push(open);
        out.push(buffered);
        out.push(series);
        out.push(clocks);
        out.push(lag);
        out.push(ratio);
        out.push(period);
    }

    fn diagnostics(&self) -> Option<serde_json::Value> {
        let mut clusters = Vec::new();
        for (cluster, tracker) in self.trackers() {
            let t = tracker.lock();
            let (comms, left_out) = comm_reports(&t, &self.settings);
            let mut clocks: Vec<_> = t
                .node_clocks()
                .map(|(node, c)| {
                    json!({
                        "node_id": node.as_ref(),
                        "offset_ns": c.offset_ns(),
                        "arrival_offset_ns": c.arrival_offset_ns(),
                        "refined": c.is_refined(),
                        "settled": c.is_settled(),
                        "anchor": c.is_anchor(),
                        "refinements": c.refinements(),
                        "refinements_refused": c.rejected(),
                        "deliveries": c.batches(),
                    })
                })
                .collect();
            clocks.sort_by(|a, b| a["node_id"].as_str().cmp(&b["node_id"].as_str()));
            clusters.push(json!({
                "cluster_id": cluster.as_ref(),
                "tracked_comms": t.tracked_comms(),
                "open_buckets": t.open_instances(),
                "buffered_points": t.buffered_points(),
                "rank_series": t.rank_series(),
                "pending_output": t.pending_output(),
                "monotonic_clocks": clocks,
                "communicators": comms,
                "communicators_left_out": left_out,
            }));
        }
        let c = self.counters.snapshot();
        let dropped: serde_json::Map<String, serde_json::Value> = DropReason::ALL
            .iter()
            .map(|r| (r.label().to_string(), json!(c.dropped(*r))))
            .collect();
        Some(json!({
            "type": crate::TYPE,
            "clusters": clusters,
            "dropped": dropped,
            "lag_points_emitted": c.lag_points,
        }))
    }
}
