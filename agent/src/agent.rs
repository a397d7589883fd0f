//! The glue: one tick collects a sample, runs the pure health core, pushes the report,
//! emits straggler events (OTLP and the socket) and exports NCCL points; the loop runs
//! ticks on a jittered timer and persists the baseline on shutdown.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use component::{Clock, Timestamp};
use parking_lot::Mutex;
use rand::Rng;

use crate::events_out::messages::{self, StragglerResolved, StragglerState};
use crate::events_out::uds::UdsServer;
use crate::fleet::client::{PushClient, PushKind, PushResult};
use crate::fleet::payload::{self, GpuInfo, HealthContext, Identity};
use crate::health::Signal;
use crate::health::core::{FleetView, HealthCore, StragglerEmission, TickInput, TickOutcome};
use crate::health::persist::{self, LoadOutcome};
use crate::health::score::AnomalyKind;
use crate::health::threshold::ThresholdCache;
use crate::nccl::NcclOutbox;
use crate::signals::{CgroupTotals, SignalSource};
use crate::status::StatusBoard;

/// Push-interval jitter: uniform ±10 %.
pub const JITTER: f64 = 0.10;
/// Minimum spacing of anomaly WARN lines per signal and kind.
pub const ANOMALY_LOG_INTERVAL: Duration = Duration::from_secs(300);
/// Cap on per-cgroup series.
pub const MAX_CGROUPS: usize = 1024;

/// Everything an [`Agent`] is built from.
pub struct AgentParts {
    pub core: HealthCore,
    pub source: Box<dyn SignalSource>,
    /// `None`: no Fleet endpoint; the agent classifies in local modes only.
    pub push: Option<Arc<PushClient>>,
    pub cache: Arc<Mutex<ThresholdCache>>,
    pub uds: Option<Arc<UdsServer>>,
    pub nccl: Option<NcclOutbox>,
    pub identity: Identity,
    /// Filled by background provider detection when it finishes.
    pub provider: Arc<OnceLock<&'static str>>,
    pub gpu: Option<GpuInfo>,
    pub clock: Arc<dyn Clock>,
    pub status: Arc<StatusBoard>,
    pub push_interval: Duration,
    /// The signal window: the barrier-wait share is taken over it.
    pub signal_window: Duration,
    /// Where the baseline is persisted on shutdown (`None`: never).
    pub persist_path: Option<PathBuf>,
}

impl std::fmt::Debug for AgentParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentParts")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// What one tick did, for tests and the loop.
#[derive(Debug, Clone)]
pub struct TickReport {
    pub now: Timestamp,
    pub outcome: TickOutcome,
    pub health_push: Option<PushResult>,
    pub straggler_push: Option<PushResult>,
    /// The event id of this tick's straggler emission, if any.
    pub event_id: Option<String>,
    pub retry_after: Option<Duration>,
}

pub struct Agent {
    core: HealthCore,
    source: Box<dyn SignalSource>,
    push: Option<Arc<PushClient>>,
    cache: Arc<Mutex<ThresholdCache>>,
    uds: Option<Arc<UdsServer>>,
    nccl: Option<NcclOutbox>,
    identity: Identity,
    provider: Arc<OnceLock<&'static str>>,
    gpu: Option<GpuInfo>,
    cgroups: CgroupTotals,
    clock: Arc<dyn Clock>,
    status: Arc<StatusBoard>,
    push_interval: Duration,
    persist_path: Option<PathBuf>,
    anomaly_log: HashMap<(Signal, AnomalyKind), Timestamp>,
    ticks: u64,
    straggler_events: u64,
    last_raw_throughput: f64,
    gpu_activity: Option<GpuActivity>,
    wait_window: WaitWindow,
    /// The last tick's barrier-wait share and the collectives with a wait since start.
    last_sync_wait: f64,
    barrier_waits: u64,
    /// Runs `explain` over the store for the current straggler episode (with a store).
    explainer: Option<crate::investigate::episode::EpisodeExplainer>,
    /// Detection-edge spans (`otlp.enabled`) and the straggler span while it is open.
    spans: Option<crate::spans::SpanExporter>,
    straggler_span: Option<crate::spans::OpenSpan>,
}

/// Most NCCL points kept for the barrier-wait share.
const MAX_WAIT_POINTS: usize = 8192;

/// The NCCL points of the last signal window: the barrier-wait share is taken over the
/// same time as the launch rate it corrects (over the points since the previous tick, a
/// 1 s window at 2 s pushes mixed a second of a slowdown's waits into the first healthy
/// window after it).
#[derive(Debug)]
struct WaitWindow {
    len: Duration,
    /// The points with each wait replaced by its excess over the rank's usual synchronize
    /// (its own GPU work): see `SyncBaselines`.
    points: std::collections::VecDeque<crate::nccl::NcclPoint>,
    baselines: crate::nccl::SyncBaselines,
    since: Option<Timestamp>,
}

impl WaitWindow {
    fn share(&mut self, new: &[crate::nccl::NcclPoint], now: Timestamp) -> f64 {
        let since = *self.since.get_or_insert(now);
        for p in new {
            if self.points.len() >= MAX_WAIT_POINTS {
                self.points.pop_front();
            }
            self.points.push_back(self.baselines.excess(*p));
        }
        let from = now.saturating_sub(self.len);
        while self.points.front().is_some_and(|p| p.time <= from) {
            self.points.pop_front();
        }
        let span = now.since(since).min(self.len);
        crate::nccl::sync_wait_fraction(self.points.make_contiguous(), span)
    }
}

/// Reads GPU utilization in [0, 1] (NVML), `None` when unknown.
pub type GpuActivity = Box<dyn FnMut() -> Option<f64> + Send>;

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("identity", &self.identity)
            .field("state", &self.core.state())
            .field("ticks", &self.ticks)
            .finish_non_exhaustive()
    }
}

impl Agent {
    pub fn new(p: AgentParts) -> Self {
        Agent {
            core: p.core,
            source: p.source,
            push: p.push,
            cache: p.cache,
            uds: p.uds,
            nccl: p.nccl,
            identity: p.identity,
            provider: p.provider,
            gpu: p.gpu,
            cgroups: CgroupTotals::new(MAX_CGROUPS),
            clock: p.clock,
            status: p.status,
            push_interval: p.push_interval,
            persist_path: p.persist_path,
            anomaly_log: HashMap::new(),
            ticks: 0,
            straggler_events: 0,
            last_raw_throughput: 0.0,
            gpu_activity: None,
            wait_window: WaitWindow {
                len: p.signal_window,
                points: std::collections::VecDeque::new(),
                baselines: Default::default(),
                since: None,
            },
            last_sync_wait: 0.0,
            barrier_waits: 0,
            explainer: None,
            spans: None,
            straggler_span: None,
        }
    }

    /// Export `ingero.detection.straggler` spans through `x`.
    pub fn set_span_exporter(&mut self, x: crate::spans::SpanExporter) {
        self.spans = Some(x);
    }

    /// Attach the cause of each straggler episode, found by `explain` over this store.
    pub fn set_episode_explainer(&mut self, x: crate::investigate::episode::EpisodeExplainer) {
        self.explainer = Some(x);
    }

    /// A GPU utilization reader (NVML): utilization above 0 keeps the node out of IDLE.
    pub fn set_gpu_activity(&mut self, f: GpuActivity) {
        self.gpu_activity = Some(f);
    }

    pub fn core(&self) -> &HealthCore {
        &self.core
    }

    pub fn push_client(&self) -> Option<&Arc<PushClient>> {
        self.push.as_ref()
    }

    /// Restore a persisted baseline if it is fresh; returns whether it was.
    pub fn restore_baseline(&mut self, stale_age: Duration) -> bool {
        let Some(path) = self.persist_path.clone() else {
            return false;
        };
        match persist::load(&path, stale_age, self.clock.now()) {
            LoadOutcome::Fresh(snap) => match self.core.restore(&snap) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), samples = snap.sample_count, "restored persisted baseline; starting active");
                    true
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "persisted baseline not usable; calibrating");
                    false
                }
            },
            LoadOutcome::Missing => false,
            LoadOutcome::Stale => {
                tracing::info!(path = %path.display(), "persisted baseline is stale; discarded");
                false
            }
            LoadOutcome::NewerSchema(v) => {
                tracing::warn!(path = %path.display(), schema_version = v, "persisted baseline has a newer schema; kept, calibrating");
                false
            }
            LoadOutcome::Corrupt { reason, moved_to } => {
                tracing::warn!(path = %path.display(), reason, moved_to = ?moved_to, "persisted baseline is corrupt; quarantined");
                false
            }
            LoadOutcome::Unreadable(e) => {
                tracing::warn!(path = %path.display(), error = e, "persisted baseline unreadable");
                false
            }
        }
    }

    /// Save the baseline if it is warmed up. Called on graceful shutdown.
    pub fn persist_baseline(&self) {
        let Some(path) = &self.persist_path else {
            return;
        };
        let b = self.core.baseliner();
        if b.sample_count() < b.config().warmup_samples {
            tracing::info!(
                samples = b.sample_count(),
                "baseline not warmed up; not persisted"
            );
            return;
        }
        match persist::save(path, &b.snapshot(), self.clock.now()) {
            Ok(()) => {
                tracing::info!(path = %path.display(), samples = b.sample_count(), "baseline persisted")
            }
            Err(e) => tracing::warn!(error = %e, "baseline not persisted"),
        }
    }

    fn log_outcome(&mut self, out: &TickOutcome, now: Timestamp) {
        let t = &out.transition;
        if t.changed() {
            tracing::info!(
                prev = t.prev.as_str(),
                next = t.next.as_str(),
                reason = t.reason.unwrap_or(""),
                "health state transition"
            );
        }
        if let Some((prev, next)) = out.mode_change {
            let threshold = out.report.and_then(|r| r.mode.threshold);
            tracing::info!(
                prev = prev.as_str(),
                next = next.as_str(),
                threshold,
                "detection mode transition"
            );
        }
        if out.degradation_edge {
            let b = self.core.baseliner();
            tracing::warn!(fast = ?b.current(), hard_floor = ?b.hard_floor(), samples = b.sample_count(), "health degradation warning");
        }
        for a in &out.anomalies {
            let key = (a.signal, a.kind);
            let due = self
                .anomaly_log
                .get(&key)
                .is_none_or(|last| now.since(*last) >= ANOMALY_LOG_INTERVAL);
            if due {
                self.anomaly_log.insert(key, now);
                tracing::warn!(
                    signal = a.signal.as_str(),
                    kind = a.kind.as_str(),
                    "non-finite signal treated as 0"
                );
            }
        }
    }

    async fn emit_straggler(
        &mut self,
        e: &StragglerEmission,
        now: Timestamp,
    ) -> (String, Option<PushResult>) {
        let event_id = uuid::Uuid::new_v4().to_string();
        self.straggler_events += 1;
        if e.edge {
            tracing::info!(
                straggler_state = if e.straggler { "STRAGGLER" } else { "HEALTHY" },
                score = e.score,
                threshold = e.threshold,
                mode = e.mode.as_str(),
                dominant_signal = e.dominant_signal,
                event_id = %event_id,
                "straggler_state transition"
            );
        }
        // The episode's cause, as far as explain has found it by now (never waited for).
        // On recovery the span keeps the newest answer of the episode that ends.
        if !e.straggler
            && let (Some(span), Some(x)) = (self.straggler_span.as_mut(), self.explainer.as_ref())
        {
            span.note_cause(x.newest());
        }
        let cause = self
            .explainer
            .as_mut()
            .and_then(|x| x.on_emission(e.straggler, now));
        self.on_span_edge(e, &event_id, cause.as_ref(), now);
        let mut result = None;
        if let Some(push) = &self.push {
            let req = payload::straggler_request(&self.identity, e, &event_id, cause.as_ref(), now);
            let r = push.push(PushKind::StragglerEvent, &req).await;
            if !r.ok() {
                tracing::debug!(
                    error = r.error.as_deref().unwrap_or(""),
                    "straggler event push failed"
                );
            }
            result = Some(r);
        }
        if let Some(uds) = &self.uds {
            let id = &self.identity;
            let (rank, world_size) = messages::rank_fields(id.world_size, id.node_rank);
            if e.straggler {
                uds.send(&StragglerState {
                    kind: messages::TYPE_STRAGGLER_STATE,
                    node_id: &id.node_id,
                    cluster_id: &id.cluster_id,
                    score: e.score,
                    threshold: e.threshold,
                    detection_mode: e.mode.as_str(),
                    dominant_signal: e.dominant_signal,
                    timestamp: messages::timestamp(now),
                    event_id: &event_id,
                    rank,
                    world_size,
                    causal_chain_id: cause.as_ref().map(|c| c.chain_id.as_str()),
                    causal_chains: cause
                        .as_ref()
                        .and_then(|c| serde_json::from_str(&c.chains_json).ok()),
                })
                .await;
            } else {
                uds.send(&StragglerResolved {
                    kind: messages::TYPE_STRAGGLER_RESOLVED,
                    node_id: &id.node_id,
                    cluster_id: &id.cluster_id,
                    timestamp: messages::timestamp(now),
                    event_id: &event_id,
                    rank,
                    world_size,
                })
                .await;
            }
        }
        (event_id, result)
    }

    /// Open the straggler span on the rising edge (with that event's id), keep the newest
    /// cause while it lasts, end and queue it on recovery.
    fn on_span_edge(
        &mut self,
        e: &StragglerEmission,
        event_id: &str,
        cause: Option<&payload::EpisodeCause>,
        now: Timestamp,
    ) {
        let Some(exporter) = &self.spans else {
            return;
        };
        if e.straggler {
            if self.straggler_span.is_none() {
                self.straggler_span = Some(crate::spans::OpenSpan::straggler(
                    &self.identity,
                    self.gpu.as_ref().map(|g| g.model.as_str()),
                    event_id,
                    now,
                ));
            }
            if let Some(span) = self.straggler_span.as_mut() {
                span.note_cause(cause.cloned());
            }
        } else if let Some(span) = self.straggler_span.take() {
            exporter.export(span.end(now));
        }
    }

    /// Run one tick at the clock's current time.
    pub async fn tick(&mut self) -> TickReport {
        let now = self.clock.now();
        self.ticks += 1;
        // NCCL points since the last tick: exported after the health push, and kept for the
        // signal window, whose barrier waits correct the throughput (synchronous training).
        let nccl_points = self
            .nccl
            .as_ref()
            .map(NcclOutbox::drain)
            .unwrap_or_default();
        let sync_wait = self.wait_window.share(&nccl_points, now);
        self.barrier_waits += nccl_points
            .iter()
            .filter(|p| p.barrier_wait_ns.is_some())
            .count() as u64;
        self.last_sync_wait = sync_wait;
        let input = match self.source.collect(now) {
            Ok(s) => {
                self.cgroups.add(&s.per_cgroup);
                self.last_raw_throughput = s.raw.throughput;
                // Work the launch counters may miss: host threads inside CUDA calls (a
                // synchronize waiting on kernels some uncounted layer launched), or the GPU
                // busy according to NVML.
                let gpu_busy = self
                    .gpu_activity
                    .as_mut()
                    .and_then(|f| f())
                    .is_some_and(|u| u > 0.0);
                TickInput {
                    raw: Some(s.raw),
                    kernel_launches: s.kernel_launches,
                    other_work: s.raw.compute > 0.0 || gpu_busy,
                    observed_at: now,
                    sync_wait,
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "collect failed");
                TickInput {
                    raw: None,
                    kernel_launches: 0,
                    other_work: false,
                    observed_at: now,
                    sync_wait: 0.0,
                }
            }
        };
        let fleet = FleetView {
            cached: self.cache.lock().get(),
            fleet_reachable: self.push.as_ref().is_some_and(|p| p.reachable()),
        };
        let outcome = self.core.tick(input, fleet, now);
        if let Some(r) = &outcome.report {
            // One line per tick at debug level (RUST_LOG=ingero_agent=debug): what the score
            // was made of, for an operator asking why a node scored what it did.
            let s = &r.score.signals;
            tracing::debug!(
                score = r.score.value,
                throughput = s.throughput,
                compute = s.compute,
                memory = s.memory,
                cpu = s.cpu,
                penalty = r.score.penalty,
                raw_launches_per_s = self.last_raw_throughput,
                sync_wait,
                state = r.state.as_str(),
                "tick"
            );
        }
        self.log_outcome(&outcome, now);

        let mut health_push = None;
        if let (Some(report), Some(push)) = (&outcome.report, &self.push) {
            let series = self.cgroups.series();
            let ctx = HealthContext {
                identity: &self.identity,
                provider: self.provider.get().copied(),
                gpu: self.gpu.as_ref(),
                per_cgroup: &series,
                now,
            };
            if let Some(req) = payload::health_request(report, &ctx) {
                let r = push.push(PushKind::Health, &req).await;
                if let Some(ra) = r.retry_after {
                    tracing::info!(status = r.status, retry_after = ?ra, "Fleet asked for backoff");
                } else if !r.ok() {
                    tracing::debug!(
                        error = r.error.as_deref().unwrap_or(""),
                        "health push failed"
                    );
                }
                health_push = Some(r);
            }
        }
        let retry_after = health_push.as_ref().and_then(|r| r.retry_after);

        let (mut event_id, mut straggler_push) = (None, None);
        if let Some(e) = outcome.straggler {
            let (id, r) = self.emit_straggler(&e, now).await;
            event_id = Some(id);
            straggler_push = r;
        }
        if let Some(nccl) = self.nccl.as_mut() {
            match &self.push {
                Some(push) => {
                    nccl.export_points(push, &self.identity, nccl_points, now)
                        .await
                }
                None => nccl.discard(&nccl_points),
            }
        }
        self.update_status(&outcome, now);
        TickReport {
            now,
            outcome,
            health_push,
            straggler_push,
            event_id,
            retry_after,
        }
    }

    fn update_status(&self, out: &TickOutcome, now: Timestamp) {
        let cached = self.cache.lock().get();
        let b = self.core.baseliner();
        let push_stats = self.push.as_ref().map(|p| {
            let s = p.stats();
            let last = s.last.lock().clone().map(|(t, kind, r)| {
                let what = match (r.status, &r.error) {
                    (Some(st), None) => format!("{kind:?} HTTP {st}"),
                    (_, Some(e)) => format!("{kind:?} {e}"),
                    (None, None) => format!("{kind:?}"),
                };
                (t, what)
            });
            (
                s.ok.load(Ordering::Relaxed),
                s.failed.load(Ordering::Relaxed),
                last,
            )
        });
        let uds = self.uds.as_ref().map(|u| {
            let s = u.stats();
            (
                s.sent.load(Ordering::Relaxed),
                s.no_client.load(Ordering::Relaxed)
                    + s.write_error.load(Ordering::Relaxed)
                    + s.marshal_error.load(Ordering::Relaxed),
            )
        });
        let nccl = self.nccl.as_ref().map(|n| n.stats());
        self.status.update(|s| {
            s.node_id.clone_from(&self.identity.node_id);
            s.cluster_id.clone_from(&self.identity.cluster_id);
            s.source = self.source.name();
            s.ticks = self.ticks;
            s.state = self.core.state().as_str();
            if let Some(r) = &out.report {
                s.score = Some(r.score.value);
                s.signals = r.score.signals;
                s.mode = r.mode.mode.as_str();
                s.threshold = r.mode.threshold;
                s.degraded = r.degraded;
            }
            if s.mode.is_empty() {
                s.mode = self.core.mode().as_str();
            }
            s.raw_throughput = self.last_raw_throughput;
            s.barrier_wait_share = self.last_sync_wait;
            s.barrier_waits = self.barrier_waits;
            s.quorum_met = cached.map(|c| c.quorum_met);
            s.fleet_reachable = self.push.as_ref().is_some_and(|p| p.reachable());
            s.straggler = self.core.is_straggler();
            s.baseline_samples = b.sample_count();
            s.warmup_samples = b.config().warmup_samples;
            s.straggler_events = self.straggler_events;
            if let Some(x) = &self.spans {
                let st = x.stats();
                s.spans = [
                    st.exported.load(Ordering::Relaxed),
                    st.failed.load(Ordering::Relaxed),
                    st.dropped.load(Ordering::Relaxed),
                ];
            }
            if let Some((ok, failed, last)) = push_stats {
                s.pushes_ok = ok;
                s.pushes_failed = failed;
                s.last_push = last;
            }
            if let Some((sent, dropped)) = uds {
                s.uds_sent = sent;
                s.uds_dropped = dropped;
            }
            if let Some((points, dropped)) = nccl {
                s.nccl_points = points;
                s.nccl_dropped = dropped;
            }
            s.updated_at = now;
        });
    }

    /// The delay before the next tick: the interval ±10 %, plus any server backoff.
    pub fn next_delay(&self, extra: Duration) -> Duration {
        let j = rand::rng().random_range(-JITTER..=JITTER);
        self.push_interval
            .mul_f64(1.0 + j)
            .max(Duration::from_millis(1))
            + extra
    }

    /// Tick on a jittered timer until `shutdown`, then persist the baseline.
    pub async fn run(mut self, mut shutdown: tokio::sync::watch::Receiver<bool>) -> Self {
        let mut extra = Duration::ZERO;
        let tick_timeout = self.push_interval * 2;
        loop {
            let delay = self.next_delay(extra);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = crate::httpserve::stopped(&mut shutdown) => break,
            }
            if *shutdown.borrow() {
                break;
            }
            extra = match tokio::time::timeout(tick_timeout, self.tick()).await {
                Ok(r) => r.retry_after.unwrap_or_default(),
                Err(_) => {
                    tracing::warn!(timeout = ?tick_timeout, "tick exceeded its deadline");
                    Duration::ZERO
                }
            };
        }
        self.persist_baseline();
        if let Some(uds) = &self.uds {
            uds.shutdown().await;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::NcclPoint;

    #[test]
    fn the_barrier_wait_share_covers_the_signal_window() {
        let t0 = Timestamp::from_secs(10_000);
        let at = |ms: u64| t0.saturating_add(Duration::from_millis(ms));
        let point = |ms: u64, wait_ms: u64| NcclPoint {
            time: at(ms),
            op: crate::nccl::op::ALL_REDUCE,
            comm_id_hash: 1,
            rank: 0,
            nranks: 2,
            datatype: 7,
            reduce_op: 0,
            peer_rank: 0,
            count: 1,
            duration_ns: 1,
            op_seq: ms,
            barrier_wait_ns: Some(wait_ms * 1_000_000),
        };
        let mut w = WaitWindow {
            len: Duration::from_secs(1),
            points: std::collections::VecDeque::new(),
            baselines: Default::default(),
            since: None,
        };
        assert_eq!(w.share(&[], t0), 0.0, "no span yet");
        // A tick 2 s later: the rank's synchronize usually takes 5 ms (its own GPU work,
        // the baseline); then one collective every 100 ms, waiting 60 ms more each in the
        // first second and 10 ms more in the second. Over the 1 s window: about 100 ms of
        // 1 s (the baseline has crept up by a few µs per longer wait).
        let mut pts = vec![point(50, 5)];
        pts.extend((1..=20u64).map(|i| point(100 * i, if i <= 10 { 65 } else { 15 })));
        let share = w.share(&pts, at(2_000));
        assert!((share - 0.1).abs() < 0.002, "{share}");
        // Nothing new a second later: the window is empty of waits.
        assert_eq!(w.share(&[], at(3_000)), 0.0);
        assert!(w.points.is_empty());
    }
}
