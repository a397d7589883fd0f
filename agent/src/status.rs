//! What the agent is doing right now: a snapshot the tick updates and the terminal view
//! (`--status`) renders once a second.

use std::fmt::Write as _;
use std::time::Duration;

use component::Timestamp;
use parking_lot::Mutex;

use crate::health::SignalSet;

/// The latest state of the agent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusSnapshot {
    pub node_id: String,
    pub cluster_id: String,
    pub endpoint: String,
    pub source: &'static str,
    pub ticks: u64,
    pub state: &'static str,
    pub score: Option<f64>,
    pub signals: SignalSet,
    pub raw_throughput: f64,
    pub baseline_samples: u64,
    pub warmup_samples: u64,
    pub mode: &'static str,
    pub threshold: Option<f64>,
    pub quorum_met: Option<bool>,
    pub fleet_reachable: bool,
    pub straggler: bool,
    pub degraded: bool,
    pub last_push: Option<(Timestamp, String)>,
    pub pushes_ok: u64,
    pub pushes_failed: u64,
    pub straggler_events: u64,
    pub uds_sent: u64,
    pub uds_dropped: u64,
    /// Detection spans exported, failed and dropped (queue full).
    pub spans: [u64; 3],
    pub probes: String,
    /// The probe thread's counters (eBPF sources only; zero otherwise).
    pub probe_counts: ProbeCounts,
    /// The event store's and the host layer's counters (zero without `--store`).
    pub store_counts: StoreCounts,
    pub nccl_points: u64,
    pub nccl_dropped: u64,
    /// Share of the signal window the node's ranks spent waiting for peers at NCCL
    /// barriers, as the last tick's throughput correction used it.
    pub barrier_wait_share: f64,
    /// NCCL collectives with a measured barrier wait, since start.
    pub barrier_waits: u64,
    pub updated_at: Timestamp,
}

/// Cumulative probe counters since the agent started, copied from the probe thread once a
/// second for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeCounts {
    /// Launches per counter of `events::launch` (runtime, runtime graph, driver, driver
    /// graph, nested).
    pub launches: [u64; crate::events::launch::COUNTERS],
    /// `[ringbuf_full, entry_missing, user_read_failed, counts_full]`.
    pub kernel_drops: [u64; 4],
    pub cuda_events: u64,
    pub nccl_events: u64,
    pub libraries: u64,
    /// The runtime's launch probes: state and calibration figures.
    pub runtime_launch: crate::probes::runtime_launch::Status,
}

/// Cumulative event-store counters, copied once a second for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    pub events_written: u64,
    pub aggregates_written: u64,
    /// Records the store's queue refused (full).
    pub dropped_queue_full: u64,
    /// Records lost to a failed write.
    pub dropped_write_error: u64,
    pub rollovers: u64,
    /// The host layer's kernel-side losses: `[threads_full, procs_full, io_inflight_full,
    /// io_procs_full]`.
    pub host_drops: [u64; crate::probes::host::HOST_DROP_REASONS.len()],
}

/// Shared between the tick (writer) and the view (reader).
#[derive(Debug, Default)]
pub struct StatusBoard(Mutex<StatusSnapshot>);

impl StatusBoard {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&self, f: impl FnOnce(&mut StatusSnapshot)) {
        f(&mut self.0.lock());
    }

    pub fn snapshot(&self) -> StatusSnapshot {
        self.0.lock().clone()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"))
}

fn bar(v: f64) -> String {
    let n = (v.clamp(0.0, 1.0) * 20.0).round() as usize;
    format!("[{}{}]", "#".repeat(n), ".".repeat(20 - n))
}

/// Render the snapshot as a fixed block of text (no terminal escapes).
pub fn render(s: &StatusSnapshot, now: Timestamp) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ingero-agent  node {}  cluster {}  source {}",
        s.node_id, s.cluster_id, s.source
    );
    let _ = writeln!(
        o,
        "fleet        {}",
        if s.endpoint.is_empty() {
            "(no endpoint: local modes only)"
        } else {
            &s.endpoint
        }
    );
    let _ = writeln!(o);
    let verdict = if s.straggler { "STRAGGLER" } else { "healthy" };
    let _ = writeln!(
        o,
        "score        {:>6}  {}  {}",
        opt(s.score),
        bar(s.score.unwrap_or(0.0)),
        verdict
    );
    let _ = writeln!(
        o,
        "state        {:<12} baseline samples {}/{}{}",
        s.state,
        s.baseline_samples,
        s.warmup_samples,
        if s.degraded {
            "  DEGRADATION WARNING"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "  throughput {:>6.3}  {}  ({:.1} launches/s)",
        s.signals.throughput,
        bar(s.signals.throughput),
        s.raw_throughput
    );
    let _ = writeln!(
        o,
        "  compute    {:>6.3}  {}",
        s.signals.compute,
        bar(s.signals.compute)
    );
    let _ = writeln!(
        o,
        "  memory     {:>6.3}  {}",
        s.signals.memory,
        bar(s.signals.memory)
    );
    let _ = writeln!(
        o,
        "  cpu        {:>6.3}  {}",
        s.signals.cpu,
        bar(s.signals.cpu)
    );
    let _ = writeln!(o);
    let quorum = match s.quorum_met {
        Some(true) => "quorum",
        Some(false) => "no quorum",
        None => "",
    };
    let _ = writeln!(
        o,
        "mode         {:<15} threshold {} {}",
        s.mode,
        opt(s.threshold),
        quorum
    );
    if !s.endpoint.is_empty() {
        let _ = writeln!(
            o,
            "fleet        {}",
            if s.fleet_reachable {
                "reachable"
            } else {
                "UNREACHABLE"
            }
        );
    }
    let last = match &s.last_push {
        Some((t, what)) => format!("{} ({}s ago)", what, now.since(*t).as_secs()),
        None => "never".to_string(),
    };
    let _ = writeln!(o, "last push    {last}");
    let _ = writeln!(
        o,
        "pushes       ok {}  failed {}  straggler events {}",
        s.pushes_ok, s.pushes_failed, s.straggler_events
    );
    let _ = writeln!(
        o,
        "socket       sent {}  dropped {}",
        s.uds_sent, s.uds_dropped
    );
    if !s.probes.is_empty() {
        let _ = writeln!(o, "probes       {}", s.probes);
    }
    let _ = writeln!(
        o,
        "nccl         points {}  dropped {}",
        s.nccl_points, s.nccl_dropped
    );
    let _ = writeln!(o, "ticks        {}", s.ticks);
    o
}

/// Redraw the status on stdout every `every` until `shutdown`.
pub async fn run_terminal_view(
    board: std::sync::Arc<StatusBoard>,
    clock: std::sync::Arc<dyn component::Clock>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use std::io::Write;
    loop {
        let text = render(&board.snapshot(), clock.now());
        {
            let mut out = std::io::stdout().lock();
            // Home, clear screen, then the block.
            let _ = write!(out, "\x1b[H\x1b[2J{text}");
            let _ = out.flush();
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = crate::httpserve::stopped(&mut shutdown) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_shows_the_essentials() {
        let s = StatusSnapshot {
            node_id: "n1".into(),
            cluster_id: "c1".into(),
            source: "synthetic",
            state: "active",
            score: Some(0.94),
            signals: SignalSet::new(1.0, 0.9, 0.9, 0.9),
            mode: "fleet",
            threshold: Some(0.88),
            quorum_met: Some(true),
            fleet_reachable: true,
            last_push: Some((Timestamp::from_secs(100), "HTTP 200".into())),
            ..Default::default()
        };
        let text = render(&s, Timestamp::from_secs(103));
        for want in [
            "score         0.940",
            "fleet           threshold 0.880 quorum",
            "HTTP 200 (3s ago)",
            "healthy",
            "active",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(
            !text.contains("reachable"),
            "no reachability line without an endpoint"
        );
        let with_endpoint = StatusSnapshot {
            endpoint: "http://fleet:4318/v1/metrics?cluster_id=c1".into(),
            fleet_reachable: false,
            ..s
        };
        assert!(render(&with_endpoint, Timestamp::from_secs(103)).contains("UNREACHABLE"));
    }
}
