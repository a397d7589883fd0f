//! Glue: OTLP batches in, cluster trackers in between, lag metrics and telemetry out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use component::otlp::{ResourceMetrics, get_str, resource_attrs};
use component::wire::resource;
use component::{
    BatchContext, ConfigErrors, Host, MetricFamily, ProcessOutcome, Processor, StartError,
    Timestamp,
};
use parking_lot::{Mutex, RwLock};
use serde_json::json;

use crate::config::NcclConfig;
use crate::ingest::{NcclPoint, collect_points, format_comm_hash, is_nccl_metric};
use crate::metrics::{
    BUFFERED_POINTS, ClusterSource, Counters, Counts, DropReason, LABEL_CLUSTER_ID, OPEN_BUCKETS,
    TRACKED_COMMS,
};
use crate::output;
use crate::settings::Settings;
use crate::tracker::ClusterTracker;

type Tracker = Arc<Mutex<ClusterTracker>>;

/// The `nccl_peer_lag` processor. Every method takes `&self`; state is behind one mutex per
/// cluster (batches of different clusters never contend) and a read-mostly cluster map.
#[derive(Debug)]
pub struct NcclPeerLagProcessor {
    cfg: NcclConfig,
    settings: Settings,
    clusters: RwLock<HashMap<Arc<str>, Tracker>>,
    counters: Counters,
}

impl NcclPeerLagProcessor {
    /// A processor from a typed config; validates it first.
    pub fn new(cfg: NcclConfig) -> Result<Self, ConfigErrors> {
        use component::ComponentConfig;
        cfg.validate()?;
        Ok(NcclPeerLagProcessor {
            settings: Settings::new(&cfg),
            cfg,
            clusters: RwLock::new(HashMap::new()),
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

impl Processor for NcclPeerLagProcessor {
    fn start(&self, _host: &dyn Host) -> Result<(), StartError> {
        Ok(())
    }

    /// Reads the NCCL points of the batch and leaves the batch unchanged. Lag points are
    /// returned by `tick`, never appended here.
    fn process(&self, data: &mut Vec<ResourceMetrics>, ctx: &BatchContext) -> ProcessOutcome {
        let mut counts = Counts::default();
        let mut pts = Vec::new();
        for rm in data.iter() {
            self.ingest_resource(rm, ctx, &mut pts, &mut counts);
        }
        self.counters.add(&counts);
        ProcessOutcome::default()
    }

    fn tick(&self, now: Timestamp) -> Vec<ResourceMetrics> {
        let mut out = Vec::new();
        let mut counts = Counts::default();
        for (cluster, tracker) in self.trackers() {
            let records = {
                let mut t = tracker.lock();
                t.tick(now, &self.settings, &mut counts);
                t.drain()
            };
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
        let mut comms = MetricFamily::gauge(
            TRACKED_COMMS,
            "Communicators tracked per cluster (capped by limits.max_comms_per_cluster).",
        );
        let mut open = MetricFamily::gauge(
            OPEN_BUCKETS,
            "Open collective instances (time buckets and op_seq instances) per cluster.",
        );
        let mut buffered = MetricFamily::gauge(
            BUFFERED_POINTS,
            "NCCL points held in open instances per cluster.",
        );
        for (cluster, tracker) in self.trackers() {
            let t = tracker.lock();
            let l = [(LABEL_CLUSTER_ID, cluster.as_ref())];
            comms.push(&l, t.tracked_comms() as f64);
            open.push(&l, t.open_instances() as f64);
            buffered.push(&l, t.buffered_points() as f64);
        }
        out.push(comms);
        out.push(open);
        out.push(buffered);
    }

    fn diagnostics(&self) -> Option<serde_json::Value> {
        let mut clusters = Vec::new();
        for (cluster, tracker) in self.trackers() {
            let t = tracker.lock();
            let mut comms: Vec<_> = t
                .comms()
                .map(|(id, c)| {
                    json!({
                        "comm_id_hash": format_comm_hash(*id),
                        "nranks": c.nranks,
                        "open_instances": c.open_instances(),
                        "last_seen_unix_nano": c.last_seen.as_nanos(),
                    })
                })
                .collect();
            comms.sort_by(|a, b| a["comm_id_hash"].as_str().cmp(&b["comm_id_hash"].as_str()));
            clusters.push(json!({
                "cluster_id": cluster.as_ref(),
                "tracked_comms": t.tracked_comms(),
                "open_buckets": t.open_instances(),
                "buffered_points": t.buffered_points(),
                "pending_output": t.pending_output(),
                "communicators": comms,
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
