//! Names of everything this processor emits, and its self-metric counters.
//!
//! OTLP output: [`ingero_wire::metric::NCCL_PEER_LAG_MS`] with the `nccl.*` attributes
//! from [`ingero_wire::attr`]; resource attribute [`ATTR_LAG_CLOCK`]. Self-metrics (Prometheus names)
//! are the `*_TOTAL` / gauge constants below.

use std::sync::atomic::{AtomicU64, Ordering};

use component::MetricFamily;

/// Instrumentation scope of the emitted lag metrics.
pub const SCOPE_NAME: &str = "ingero-fleet/nccl_peer_lag";
/// Unit of the lag gauge.
pub const LAG_UNIT: &str = "ms";
/// Resource attribute of the lag output saying how the entry times were put on one axis:
/// [`CLOCK_WALL`] (every rank sent wall-clock times) or [`CLOCK_MONOTONIC`] (at least one
/// rank's monotonic time was shifted by an arrival-estimated offset; see `clock.rs`).
pub const ATTR_LAG_CLOCK: &str = "nccl.peer_lag.clock";
pub const CLOCK_WALL: &str = "wall";
pub const CLOCK_MONOTONIC: &str = "monotonic_estimated";

// Self-metric families (Prometheus names), declared once: the name constants, their specs
// (`spec::*`: type, unit, help, labels) and `FAMILIES`, in exposition order.
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    POINTS_TOTAL: counter "ingero_nccl_points_total", unit "1", labels [LABEL_OUTCOME],
        help "NCCL points seen by the nccl_peer_lag processor, by outcome.";
    DROPPED_TOTAL: counter "ingero_nccl_dropped_total", unit "1", labels [LABEL_REASON],
        help "NCCL points discarded by the nccl_peer_lag processor, by reason.";
    CLUSTER_FALLBACK_TOTAL: counter "ingero_nccl_cluster_fallback_total", unit "1",
        labels [LABEL_SOURCE],
        help "NCCL points whose cluster came from the request or from default_cluster_id.";
    COLLECTIVES_TOTAL: counter "ingero_nccl_collectives_total", unit "1", labels [LABEL_OUTCOME],
        help "Collective instances closed, by outcome (complete, partial, under_quorum).";
    LAG_POINTS_TOTAL: counter "ingero_nccl_lag_points_total", unit "1", labels [],
        help "nccl.collective.peer_lag_ms points emitted.";
    TRACKED_COMMS: gauge "ingero_nccl_tracked_comms", unit "1", labels [LABEL_CLUSTER_ID],
        help "Communicators tracked per cluster (capped by limits.max_comms_per_cluster).";
    OPEN_BUCKETS: gauge "ingero_nccl_open_buckets", unit "1", labels [LABEL_CLUSTER_ID],
        help "Open collective instances (time buckets and op_seq instances) per cluster.";
    BUFFERED_POINTS: gauge "ingero_nccl_buffered_points", unit "1", labels [LABEL_CLUSTER_ID],
        help "NCCL points held in open instances per cluster.";
    RANK_SERIES: gauge "ingero_nccl_rank_series", unit "1", labels [LABEL_CLUSTER_ID],
        help "Rolling per-rank windows held per cluster (capped by limits.max_rank_series_per_cluster).";
    MONOTONIC_CLOCKS: gauge "ingero_nccl_monotonic_clocks", unit "1",
        labels [LABEL_CLUSTER_ID, LABEL_STATE],
        help "Nodes with monotonic NCCL clocks per cluster, by calibration state.";
    /// Median lag of a named rank, in seconds (Prometheus base unit; the OTLP lag output and
    /// the diagnostics stay in milliseconds, as the wire contract names them).
    RANK_LAG_SECONDS: gauge "ingero_nccl_rank_lag_seconds", unit "s",
        labels [LABEL_CLUSTER_ID, LABEL_COMM_ID_HASH, LABEL_OP_TYPE, LABEL_RANK],
        help "Median lag (seconds) over the behind steps of ranks named chronic or periodic.";
    RANK_BEHIND_RATIO: gauge "ingero_nccl_rank_behind_ratio", unit "1",
        labels [LABEL_CLUSTER_ID, LABEL_COMM_ID_HASH, LABEL_OP_TYPE, LABEL_RANK],
        help "Fraction of the recent steps a named rank was behind on.";
    RANK_LAG_PERIOD_STEPS: gauge "ingero_nccl_rank_lag_period_steps", unit "1",
        labels [LABEL_CLUSTER_ID, LABEL_COMM_ID_HASH, LABEL_OP_TYPE, LABEL_RANK],
        help "Steps between recurring lag episodes of a named rank, when periodic.";
}

pub const LABEL_OUTCOME: &str = "outcome";
pub const LABEL_REASON: &str = "reason";
pub const LABEL_SOURCE: &str = "source";
pub const LABEL_CLUSTER_ID: &str = "cluster_id";
pub const LABEL_COMM_ID_HASH: &str = "comm_id_hash";
pub const LABEL_OP_TYPE: &str = "op_type";
pub const LABEL_RANK: &str = "rank";
pub const LABEL_STATE: &str = "state";

/// What happened to an incoming NCCL point (label `outcome` of [`POINTS_TOTAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Placed into a collective instance.
    Accepted,
    /// Refused; the reason is counted in [`DROPPED_TOTAL`].
    Dropped,
    /// Not used for alignment by design (`nccl.collective.bytes` / `barrier_wait_ms`,
    /// point-to-point or unlisted operation types, single-rank communicators).
    Ignored,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Accepted, Outcome::Dropped, Outcome::Ignored];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Dropped => "dropped",
            Outcome::Ignored => "ignored",
        }
    }
}

/// Why a point was dropped (label `reason` of [`DROPPED_TOTAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The cluster already tracks `limits.max_comms_per_cluster` communicators.
    CapComms,
    /// The cluster's open-bucket or buffered-point cap is full.
    CapBuckets,
    /// `limits.max_clusters` clusters are already tracked.
    CapClusters,
    /// The cluster already tracks `limits.max_nodes_per_cluster` monotonic clocks.
    CapNodes,
    /// The lag output queue (`limits.max_pending_output`) was full.
    CapOutput,
    /// Arrived after its collective instance was emitted or discarded.
    Late,
    /// `comm_id_hash` all zeros or `nranks` 0.
    UnknownComm,
    /// No cluster from the resource, the request or `default_cluster_id`.
    NoCluster,
    /// Malformed: missing or out-of-range attributes, zero timestamp, `nranks` over the
    /// limit or disagreeing with the communicator's, `op_seq` reused by another operation.
    Invalid,
    /// The instance already held a point of the same rank (time buckets: the window is
    /// wider than this communicator's spacing between collectives).
    Duplicate,
    /// The node's monotonic clock offset has too few delivery samples yet.
    ClockWarmup,
    /// The instance reached neither all ranks nor the quorum within its grace period.
    UnderQuorum,
    /// Discarded by `shutdown` (open instances and unsent output).
    Shutdown,
    /// A rank's step was not added to rolling statistics: the cluster already holds
    /// `limits.max_rank_series_per_cluster` rank windows (its lag point is still emitted).
    CapRankSeries,
}

impl DropReason {
    pub const ALL: [DropReason; 14] = [
        DropReason::CapComms,
        DropReason::CapBuckets,
        DropReason::CapClusters,
        DropReason::CapNodes,
        DropReason::CapOutput,
        DropReason::Late,
        DropReason::UnknownComm,
        DropReason::NoCluster,
        DropReason::Invalid,
        DropReason::Duplicate,
        DropReason::ClockWarmup,
        DropReason::UnderQuorum,
        DropReason::Shutdown,
        DropReason::CapRankSeries,
    ];

    pub fn label(self) -> &'static str {
        match self {
            DropReason::CapComms => "cap_comms",
            DropReason::CapBuckets => "cap_buckets",
            DropReason::CapClusters => "cap_clusters",
            DropReason::CapNodes => "cap_nodes",
            DropReason::CapOutput => "cap_output",
            DropReason::Late => "late",
            DropReason::UnknownComm => "unknown_comm",
            DropReason::NoCluster => "no_cluster",
            DropReason::Invalid => "invalid",
            DropReason::Duplicate => "duplicate",
            DropReason::ClockWarmup => "clock_warmup",
            DropReason::UnderQuorum => "under_quorum",
            DropReason::Shutdown => "shutdown",
            DropReason::CapRankSeries => "cap_rank_series",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Where a point's cluster came from when the resource did not name one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterSource {
    BatchContext,
    Default,
}

/// How a collective instance ended (label `outcome` of [`COLLECTIVES_TOTAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollectiveOutcome {
    /// Every rank arrived.
    Complete,
    /// Emitted with a quorum after its grace period.
    Partial,
    /// Discarded: under quorum after its grace period.
    UnderQuorum,
}

/// Counts gathered while holding a cluster lock, added to [`Counters`] once per batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub outcomes: [u64; 3],
    pub dropped: [u64; DropReason::ALL.len()],
    pub collectives: [u64; 3],
    pub lag_points: u64,
}

impl Counts {
    pub fn outcome(&mut self, o: Outcome, n: u64) {
        self.outcomes[o as usize] += n;
    }

    pub fn drop_points(&mut self, r: DropReason, n: u64) {
        self.dropped[r.index()] += n;
    }

    /// A point refused at ingest: outcome `dropped` plus its reason.
    pub fn refuse(&mut self, r: DropReason) {
        self.outcome(Outcome::Dropped, 1);
        self.drop_points(r, 1);
    }

    pub fn collective(&mut self, o: CollectiveOutcome) {
        self.collectives[o as usize] += 1;
    }

    pub fn dropped(&self, r: DropReason) -> u64 {
        self.dropped[r.index()]
    }

    pub fn merge(&mut self, o: &Counts) {
        for (a, b) in self.outcomes.iter_mut().zip(o.outcomes) {
            *a += b;
        }
        for (a, b) in self.dropped.iter_mut().zip(o.dropped) {
            *a += b;
        }
        for (a, b) in self.collectives.iter_mut().zip(o.collectives) {
            *a += b;
        }
        self.lag_points += o.lag_points;
    }
}

/// Process-lifetime counters (monotonic, lock-free).
#[derive(Debug, Default)]
pub struct Counters {
    outcomes: [AtomicU64; 3],
    dropped: [AtomicU64; DropReason::ALL.len()],
    collectives: [AtomicU64; 3],
    lag_points: AtomicU64,
    fallback: [AtomicU64; 2],
}

impl Counters {
    pub fn add(&self, c: &Counts) {
        for (a, b) in self.outcomes.iter().zip(c.outcomes) {
            if b > 0 {
                a.fetch_add(b, Ordering::Relaxed);
            }
        }
        for (a, b) in self.dropped.iter().zip(c.dropped) {
            if b > 0 {
                a.fetch_add(b, Ordering::Relaxed);
            }
        }
        for (a, b) in self.collectives.iter().zip(c.collectives) {
            if b > 0 {
                a.fetch_add(b, Ordering::Relaxed);
            }
        }
        if c.lag_points > 0 {
            self.lag_points.fetch_add(c.lag_points, Ordering::Relaxed);
        }
    }

    pub fn fallback(&self, s: ClusterSource, n: u64) {
        self.fallback[s as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// A snapshot as plain counts (tests, diagnostics).
    pub fn snapshot(&self) -> Counts {
        let mut c = Counts::default();
        for (a, b) in c.outcomes.iter_mut().zip(&self.outcomes) {
            *a = b.load(Ordering::Relaxed);
        }
        for (a, b) in c.dropped.iter_mut().zip(&self.dropped) {
            *a = b.load(Ordering::Relaxed);
        }
        for (a, b) in c.collectives.iter_mut().zip(&self.collectives) {
            *a = b.load(Ordering::Relaxed);
        }
        c.lag_points = self.lag_points.load(Ordering::Relaxed);
        c
    }

    pub fn fallback_count(&self, s: ClusterSource) -> u64 {
        self.fallback[s as usize].load(Ordering::Relaxed)
    }

    /// The counter families (every label value present, zeros included, so dashboards
    /// see the series before the first event).
    pub fn families(&self, out: &mut Vec<MetricFamily>) {
        let s = self.snapshot();
        let mut points = spec::POINTS_TOTAL.family();
        for o in Outcome::ALL {
            points.push(&[(LABEL_OUTCOME, o.label())], s.outcomes[o as usize] as f64);
        }
        out.push(points);
        let mut dropped = spec::DROPPED_TOTAL.family();
        for r in DropReason::ALL {
            dropped.push(&[(LABEL_REASON, r.label())], s.dropped(r) as f64);
        }
        out.push(dropped);
        out.push(
            spec::CLUSTER_FALLBACK_TOTAL
                .family()
                .with(
                    &[(LABEL_SOURCE, "batch_context")],
                    self.fallback_count(ClusterSource::BatchContext) as f64,
                )
                .with(
                    &[(LABEL_SOURCE, "default")],
                    self.fallback_count(ClusterSource::Default) as f64,
                ),
        );
        out.push(
            spec::COLLECTIVES_TOTAL
                .family()
                .with(&[(LABEL_OUTCOME, "complete")], s.collectives[0] as f64)
                .with(&[(LABEL_OUTCOME, "partial")], s.collectives[1] as f64)
                .with(&[(LABEL_OUTCOME, "under_quorum")], s.collectives[2] as f64),
        );
        out.push(
            spec::LAG_POINTS_TOTAL
                .family()
                .with(&[], s.lag_points as f64),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_unique_and_indices_match() {
        let mut seen = std::collections::HashSet::new();
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert!(seen.insert(r.label()));
        }
    }

    #[test]
    fn counts_merge_and_reach_the_families() {
        let mut a = Counts::default();
        a.refuse(DropReason::Late);
        a.outcome(Outcome::Accepted, 3);
        a.collective(CollectiveOutcome::Partial);
        let mut b = Counts::default();
        b.refuse(DropReason::Late);
        b.drop_points(DropReason::UnderQuorum, 4);
        a.merge(&b);
        let c = Counters::default();
        c.add(&a);
        c.fallback(ClusterSource::Default, 2);
        let s = c.snapshot();
        assert_eq!(s.dropped(DropReason::Late), 2);
        assert_eq!(s.dropped(DropReason::UnderQuorum), 4);
        assert_eq!(s.outcomes, [3, 2, 0]);
        let mut fams = Vec::new();
        c.families(&mut fams);
        let dropped = fams.iter().find(|f| f.name == DROPPED_TOTAL).unwrap();
        assert_eq!(dropped.samples.len(), DropReason::ALL.len());
        let late = dropped
            .samples
            .iter()
            .find(|s| s.labels[0].1 == "late")
            .unwrap();
        assert_eq!(late.value, 2.0);
        let fb = fams
            .iter()
            .find(|f| f.name == CLUSTER_FALLBACK_TOTAL)
            .unwrap();
        assert_eq!(fb.samples[1].value, 2.0);
    }
}
