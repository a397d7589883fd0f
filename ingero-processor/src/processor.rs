//! Glue: OTLP batches in -> [`Ingest`] (per-cluster node tables); ticks -> [`TickSide`] ->
//! threshold sink, straggler metrics and a [`Snapshot`] that [`telemetry`] turns into
//! self-metrics and diagnostics.

use std::sync::Arc;
use std::time::Duration;

use component::{
    BatchContext, ComponentId, ConfigErrors, Host, MetricFamily, ProcessOutcome, Processor,
    ResourceMetrics, StartError, Timestamp,
};
use ingero_wire::ThresholdSink;
use parking_lot::{Mutex, RwLock};

use crate::causes::CauseBoard;
use crate::config::IngeroConfig;
use crate::ingest::{Ingest, IngestLimits};
use crate::metrics::Counters;
use crate::table::TableLimits;
use crate::telemetry::{self, Holdings};
use crate::tick::{self, Snapshot, TickSettings, TickSide};

pub use crate::ingest::{MAX_COHORT_BYTES, MAX_ID_BYTES};
pub use crate::tick::MAX_TRANSITION_LOGS_PER_TICK;

/// The `ingero` processor: peer-relative MAD threshold per cluster, published into the
/// threshold extension, plus server-side straggler classification.
pub struct IngeroProcessor {
    cfg: IngeroConfig,
    settings: TickSettings,
    ingest: Ingest,
    tick_side: Mutex<TickSide>,
    snapshot: Mutex<Arc<Snapshot>>,
    sink: RwLock<Option<(ComponentId, Arc<dyn ThresholdSink>)>>,
    causes: Arc<CauseBoard>,
}

impl std::fmt::Debug for IngeroProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngeroProcessor")
            .field("cfg", &self.cfg)
            .field("clusters", &self.ingest.cluster_count())
            .field("sink", &self.sink.read().as_ref().map(|(id, _)| id.clone()))
            .finish_non_exhaustive()
    }
}

fn to_usize(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

impl IngeroProcessor {
    /// Build from a config; the config is validated again here.
    pub fn new(cfg: IngeroConfig) -> Result<Self, ConfigErrors> {
        use component::ComponentConfig;
        cfg.validate()?;
        let settings = TickSettings::from_config(&cfg);
        let limits = IngestLimits {
            table: TableLimits {
                max_nodes: to_usize(cfg.limits.max_nodes_per_cluster),
                max_cohorts: to_usize(cfg.cohorts.max_per_cluster),
                cohorts_enabled: cfg.cohorts.enabled,
                ttl_nanos: settings.ttl_nanos,
            },
            max_clusters: cfg.limits.max_clusters,
            max_clusters_per_tenant: cfg.limits.clusters_per_tenant(),
            max_nodes_per_cluster: cfg.limits.max_nodes_per_cluster,
            max_nodes_total: cfg.limits.max_nodes_total,
            reserved_nodes_per_cluster: cfg.limits.reserved_nodes(),
            max_pool_nodes_per_tenant: cfg.limits.pool_nodes_per_tenant(),
        };
        Ok(IngeroProcessor {
            settings,
            ingest: Ingest::new(limits),
            tick_side: Mutex::new(TickSide::default()),
            snapshot: Mutex::new(Arc::new(Snapshot::default())),
            sink: RwLock::new(None),
            causes: Arc::default(),
            cfg,
        })
    }

    /// The tick period the host should use (`push_interval`).
    pub fn push_interval(&self) -> Duration {
        self.cfg.push_interval
    }

    pub fn config(&self) -> &IngeroConfig {
        &self.cfg
    }

    /// The latest cause per straggler node (the live view reads it).
    pub fn causes(&self) -> &Arc<CauseBoard> {
        &self.causes
    }

    /// Counters of the push path (tests and the host's debug output).
    pub fn counters(&self) -> &Counters {
        self.ingest.counters()
    }

    /// The most the node tables hold: `limits.max_nodes_total` records of
    /// [`NODE_RECORD_BYTES`].
    pub fn node_table_bound(&self) -> usize {
        to_usize(self.cfg.limits.max_nodes_total).saturating_mul(NODE_RECORD_BYTES)
    }
}

/// What one node record may cost the processor, its table entry and its copy in the
/// tick's snapshot, with a node id at its limit: measured 205 B once ticked with 24-byte
/// ids (`tests/processor.rs::node_record_memory`), of which the id's shared allocation is
/// about 48 B; so 192 B besides the id, plus the id's allocation (16 B of counts and
/// [`MAX_ID_BYTES`] of text). With 256-byte ids the same test measures 445 B. Cluster and
/// cohort entries (bounded by `limits.max_clusters` and `cohorts.max_per_cluster`) are not
/// counted.
pub const NODE_RECORD_BYTES: usize = 192 + 16 + MAX_ID_BYTES;

impl IngeroProcessor {
    fn read(&self, data: &[ResourceMetrics], ctx: &BatchContext) -> ProcessOutcome {
        let mut out = ProcessOutcome::default();
        for rm in data {
            self.ingest.resource(rm, ctx, &mut out);
            self.causes.observe(rm, ctx);
        }
        out
    }
}

impl Processor for IngeroProcessor {
    fn start(&self, host: &dyn Host) -> Result<(), StartError> {
        let found = ingero_wire::find_threshold_sink(host);
        match &found {
            Some((id, _)) => {
                tracing::info!(extension = %id, "ingero processor publishes thresholds")
            }
            None => tracing::warn!(
                "no threshold extension (ingero_threshold) found: the ingero processor still \
                 computes thresholds and classifies stragglers, but agents receive no threshold"
            ),
        }
        *self.sink.write() = found;
        if let Some((_, board)) = ingero_wire::view::find_view_board(host) {
            let view: Arc<dyn ingero_wire::view::ClusterViewSource> = self.causes.clone();
            board.register(view);
        }
        Ok(())
    }

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
        let mut side = self.tick_side.lock();
        let tables = self.ingest.clusters();
        let expected = &self.cfg.quorum.expected_nodes;
        let declared = |id: &str| expected.get(id).copied().unwrap_or(0);
        let mut out = side.run(&self.settings, &tables, declared, self.ingest.budget(), now);
        let forgotten = self.ingest.forget_empty(&out.empty);
        self.causes.expire(now, self.settings.ttl_nanos);
        side.forget(&forgotten);
        drop(side);
        out.summaries
            .sort_by(|a, b| a.cluster_id.cmp(&b.cluster_id));

        let sink = self.sink.read().as_ref().map(|(_, s)| s.clone());
        if let Some(sink) = sink {
            sink.publish(tick::reports(&out.summaries), now);
        }
        *self.snapshot.lock() = Arc::new(Snapshot {
            computed_at: Some(now),
            clusters: out.summaries,
        });
        out.metrics
    }

    fn shutdown(&self) {
        *self.sink.write() = None;
    }

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        let snap = self.snapshot.lock().clone();
        let held = Holdings {
            clusters: self.ingest.cluster_count(),
            node_records: self.ingest.budget().used(),
            causes: self.causes.counters().snapshot(),
        };
        telemetry::families(&snap, self.ingest.counters(), held, out);
    }

    fn memory_bound(&self) -> usize {
        self.node_table_bound()
    }

    fn diagnostics(&self) -> Option<serde_json::Value> {
        let snap = self.snapshot.lock().clone();
        let sink = self.sink.read().as_ref().map(|(id, _)| id.to_string());
        Some(telemetry::diagnostics_json(
            &snap,
            self.ingest.counters(),
            sink,
            self.ingest.budget().used(),
        ))
    }
}
