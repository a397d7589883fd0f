//! Read-only views of a cluster's per-rank statistics: the named (chronic or periodic)
//! ranks for the labelled telemetry gauges, and the worst ranks per communicator for
//! diagnostics.

use std::sync::Arc;

use ingero_wire::view::{
    MAX_VIEW_RANKS, MAX_VIEW_STREAMS, PeerLagStream, PeerLagView, RankLagCell,
};
use serde::Serialize;

use crate::ingest::{OpTypes, format_comm_hash};
use crate::settings::Settings;
use crate::stats::{RankParams, RankWindow};
use crate::tracker::ClusterTracker;

/// One rank of one `(comm, op_type)` as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankReport {
    #[serde(skip)]
    pub comm: u64,
    #[serde(skip)]
    pub op: u8,
    pub rank: u32,
    pub node_id: Option<Arc<str>>,
    /// Median lag over the behind steps in the window.
    pub median_lag_ms: Option<f64>,
    pub last_lag_ms: Option<f64>,
    pub behind_steps: usize,
    pub window_steps: usize,
    pub behind_ratio: f64,
    pub period_steps: Option<u32>,
    pub chronic: bool,
    pub named: bool,
}

impl RankReport {
    fn new(
        comm: u64,
        op: u8,
        rank: u32,
        node: Option<Arc<str>>,
        w: &RankWindow,
        p: &RankParams,
    ) -> Self {
        RankReport {
            comm,
            op,
            rank,
            node_id: node,
            median_lag_ms: w.median_behind_lag_ms(),
            last_lag_ms: w.last_lag_ms(),
            behind_steps: w.behind_count(),
            window_steps: w.len(),
            behind_ratio: w.behind_ratio(),
            period_steps: w.period(),
            chronic: w.is_chronic(p),
            named: w.is_named(p),
        }
    }

    /// "rank 5 is 290 ms behind on ncclAllReduce of comm 00000000deadbeef, 41 of the last 50
    /// steps, every 14 steps"
    pub fn summary(&self, ops: &OpTypes) -> String {
        let mut s = format!(
            "rank {} is {:.0} ms behind on {} of comm {}, {} of the last {} steps",
            self.rank,
            self.median_lag_ms.unwrap_or(0.0),
            ops.name(self.op),
            format_comm_hash(self.comm),
            self.behind_steps,
            self.window_steps
        );
        if let Some(p) = self.period_steps {
            s.push_str(&format!(", every {p} steps"));
        }
        s
    }

    /// Worst first: named, then more behind steps, then larger lag.
    fn order(a: &RankReport, b: &RankReport) -> std::cmp::Ordering {
        b.named
            .cmp(&a.named)
            .then(b.behind_steps.cmp(&a.behind_steps))
            .then(
                b.median_lag_ms
                    .unwrap_or(0.0)
                    .total_cmp(&a.median_lag_ms.unwrap_or(0.0)),
            )
            .then(a.comm.cmp(&b.comm))
            .then(a.op.cmp(&b.op))
            .then(a.rank.cmp(&b.rank))
    }
}

/// Named ranks of the cluster, largest lag first, at most `limits.max_named_ranks_per_cluster`.
pub fn named_ranks(t: &ClusterTracker, s: &Settings) -> Vec<RankReport> {
    let p = s.rank_params();
    let mut out = Vec::new();
    for (&comm_id, comm) in t.comms() {
        for (op, st) in comm.streams.iter().enumerate() {
            let Some(st) = st else { continue };
            for &rank in &st.named {
                if let Some(Some(w)) = st.ranks.get(rank as usize) {
                    let node = comm.rank_nodes.get(rank as usize).cloned().flatten();
                    out.push(RankReport::new(comm_id, op as u8, rank, node, w, &p));
                }
            }
        }
    }
    out.sort_by(|a, b| {
        b.median_lag_ms
            .unwrap_or(0.0)
            .total_cmp(&a.median_lag_ms.unwrap_or(0.0))
            .then(RankReport::order(a, b))
    });
    out.truncate(s.max_named);
    out
}

/// Diagnostics of one stream: its worst ranks (those behind at least once in the window).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    pub op_type: String,
    pub steps: u64,
    pub open_buckets: usize,
    pub duplicates: u64,
    pub worst_ranks: Vec<RankReport>,
    pub summaries: Vec<String>,
}

/// Diagnostics of one communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommReport {
    pub comm_id_hash: String,
    pub nranks: u32,
    pub open_instances: usize,
    pub last_seen_unix_nano: u64,
    pub ops: Vec<StreamReport>,
}

/// Communicators shown per cluster in diagnostics (worst first).
pub const DIAG_MAX_COMMS: usize = 256;

/// Per-communicator diagnostics, communicators with named ranks first, at most
/// [`DIAG_MAX_COMMS`]. Returns the reports and how many communicators were left out.
pub fn comm_reports(t: &ClusterTracker, s: &Settings) -> (Vec<CommReport>, usize) {
    let p = s.rank_params();
    let mut out: Vec<(usize, usize, CommReport)> = Vec::new();
    for (&comm_id, comm) in t.comms() {
        let mut ops = Vec::new();
        let mut named = 0usize;
        let mut behind = 0usize;
        for (op, st) in comm.streams.iter().enumerate() {
            let Some(st) = st else { continue };
            let mut ranks: Vec<RankReport> = st
                .ranks
                .iter()
                .enumerate()
                .filter_map(|(r, w)| {
                    let w = w.as_ref()?;
                    if w.behind_count() == 0 {
                        return None;
                    }
                    let node = comm.rank_nodes.get(r).cloned().flatten();
                    Some(RankReport::new(comm_id, op as u8, r as u32, node, w, &p))
                })
                .collect();
            ranks.sort_by(RankReport::order);
            ranks.truncate(s.top_ranks);
            named += ranks.iter().filter(|r| r.named).count();
            behind += ranks.iter().map(|r| r.behind_steps).sum::<usize>();
            let summaries = ranks
                .iter()
                .filter(|r| r.named)
                .map(|r| r.summary(&s.ops))
                .collect();
            ops.push(StreamReport {
                op_type: s.ops.name(op as u8).to_string(),
                steps: st.steps,
                open_buckets: st.buckets.open.len(),
                duplicates: st.duplicates,
                worst_ranks: ranks,
                summaries,
            });
        }
        out.push((
            named,
            behind,
            CommReport {
                comm_id_hash: format_comm_hash(comm_id),
                nranks: comm.nranks,
                open_instances: comm.open_instances(),
                last_seen_unix_nano: comm.last_seen.as_nanos(),
                ops,
            },
        ));
    }
    out.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.cmp(&a.1))
            .then(a.2.comm_id_hash.cmp(&b.2.comm_id_hash))
    });
    let left_out = out.len().saturating_sub(DIAG_MAX_COMMS);
    out.truncate(DIAG_MAX_COMMS);
    (out.into_iter().map(|x| x.2).collect(), left_out)
}

/// The cluster's peer-lag heat map for the live view: every rank of every stream (rank
/// order), streams worst first, capped at [`MAX_VIEW_STREAMS`] streams of
/// [`MAX_VIEW_RANKS`] ranks.
pub fn peer_lag_view(t: &ClusterTracker, s: &Settings) -> PeerLagView {
    let p = s.rank_params();
    // (named ranks, behind steps, stream)
    let mut all: Vec<(usize, usize, PeerLagStream)> = Vec::new();
    for (&comm_id, comm) in t.comms() {
        for (op, st) in comm.streams.iter().enumerate() {
            let Some(st) = st else { continue };
            let mut named = 0;
            let mut behind = 0;
            let mut ranks = Vec::new();
            let mut seen = 0usize;
            for (r, w) in st.ranks.iter().enumerate() {
                let Some(w) = w else { continue };
                seen += 1;
                let report = RankReport::new(
                    comm_id,
                    op as u8,
                    r as u32,
                    comm.rank_nodes.get(r).cloned().flatten(),
                    w,
                    &p,
                );
                named += usize::from(report.named);
                behind += report.behind_steps;
                if ranks.len() < MAX_VIEW_RANKS {
                    ranks.push(RankLagCell {
                        rank: report.rank,
                        node_id: report.node_id,
                        median_lag_ms: report.median_lag_ms,
                        behind_ratio: report.behind_ratio,
                        period_steps: report.period_steps,
                        named: report.named,
                    });
                }
            }
            all.push((
                named,
                behind,
                PeerLagStream {
                    comm_id_hash: format_comm_hash(comm_id),
                    op_type: s.ops.name(op as u8).to_string(),
                    nranks: comm.nranks,
                    steps: st.steps,
                    ranks_left_out: seen - ranks.len(),
                    ranks,
                },
            ));
        }
    }
    all.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.cmp(&a.1))
            .then(a.2.comm_id_hash.cmp(&b.2.comm_id_hash))
            .then(a.2.op_type.cmp(&b.2.op_type))
    });
    let streams_left_out = all.len().saturating_sub(MAX_VIEW_STREAMS);
    all.truncate(MAX_VIEW_STREAMS);
    PeerLagView {
        streams: all.into_iter().map(|x| x.2).collect(),
        streams_left_out,
    }
}
