//! The cause of a straggler episode: when the agent classifies its node a straggler it runs
//! [`explain`](super::explain::explain) over its own store, off the tick, and attaches the
//! top chains to what it sends while the episode lasts (the straggler event, the socket
//! message). This is this project's extension to the wire contract: the Go agent sends no
//! chains, and every consumer treats their absence as "no cause known".
//!
//! - One id per episode, `<node id>:<episode start, Unix ms>`, the same on every event.
//! - `explain` reads the store from [`LEAD`] (or the episode's own length, if longer: the
//!   rule wants a baseline around the symptom) before the episode start to the newest
//!   record, at most [`MAX_RANGE`]; it runs on a blocking thread, one run at a time, first
//!   on the rising edge and then every [`REFRESH_TICKS`] ticks while the episode lasts. A
//!   tick never waits for it: it sends the newest answer it has, so the first event of an
//!   episode goes without chains.
//! - A later run that finds nothing does not erase what an earlier run of the same episode
//!   found (a long episode dilutes its own baseline).
//! - The chains go as a compact JSON array ([`compact`]): at most [`MAX_CHAINS`], most
//!   severe first, at most [`MAX_CHAINS_BYTES`] bytes (Fleet's default attribute value
//!   limit is 4,096): `explanation` goes first, then trailing chains, then the `summary`
//!   is cut at a character boundary.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use component::Timestamp;
use ingero_agent_core::payload::EpisodeCause;
use parking_lot::Mutex;
use serde::Serialize;

use super::explain::{Cause, Chain, ExplainOptions};

/// Most chains attached to one event.
pub const MAX_CHAINS: usize = 3;
/// Largest `ingero.causal_chains` value, in bytes.
pub const MAX_CHAINS_BYTES: usize = 4000;
/// How far before the episode start `explain` looks, at least.
pub const LEAD: Duration = Duration::from_secs(60);
/// The longest range one run reads.
pub const MAX_RANGE: Duration = Duration::from_secs(900);
/// Ticks between two runs while an episode lasts.
pub const REFRESH_TICKS: u64 = 3;

/// One chain as it travels (`ingero.causal_chains` element).
#[derive(Debug, Clone, Serialize)]
struct WireChain<'a> {
    id: &'a str,
    severity: &'a str,
    causes: &'a [Cause],
    summary: String,
    root_cause: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    explanation: Option<&'a str>,
    recommendations: &'a [String],
    cuda_op: &'a str,
    cuda_p99_us: i64,
    tail_ratio: f64,
}

fn severity_rank(s: &str) -> u8 {
    match s {
        "HIGH" => 0,
        "MEDIUM" => 1,
        "LOW" => 2,
        _ => 3,
    }
}

fn cut_at_char_boundary(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut i = max;
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    s.truncate(i);
}

/// The top chains as one compact JSON array of at most `max_bytes` bytes; `None` when there
/// is no chain (or, which explain's chains never come near, not even one chain with an
/// empty summary fits).
pub fn compact(chains: &[Chain], max_bytes: usize) -> Option<String> {
    let mut top: Vec<&Chain> = chains.iter().collect();
    // Stable: explain's own order among chains of one severity.
    top.sort_by_key(|c| severity_rank(&c.severity));
    top.truncate(MAX_CHAINS);
    let mut wire: Vec<WireChain<'_>> = top
        .iter()
        .map(|c| WireChain {
            id: &c.id,
            severity: &c.severity,
            causes: &c.causes,
            summary: c.summary.clone(),
            root_cause: &c.root_cause,
            explanation: Some(c.explanation.as_str()),
            recommendations: &c.recommendations,
            cuda_op: &c.cuda_op,
            cuda_p99_us: c.cuda_p99_us,
            tail_ratio: c.tail_ratio,
        })
        .collect();
    if wire.is_empty() {
        return None;
    }
    let encode = |w: &[WireChain<'_>]| serde_json::to_string(w).ok();
    let mut s = encode(&wire)?;
    if s.len() <= max_bytes {
        return Some(s);
    }
    for w in &mut wire {
        w.explanation = None;
    }
    s = encode(&wire)?;
    while s.len() > max_bytes && wire.len() > 1 {
        wire.pop();
        s = encode(&wire)?;
    }
    // One chain left: keep the longest prefix of its summary that fits (a binary search
    // over the prefix length: escaping makes encoded and raw lengths differ).
    if s.len() > max_bytes {
        let full = wire.first()?.summary.clone();
        let (mut lo, mut hi) = (0usize, full.len());
        let mut best = None;
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            let mut cut = full.clone();
            cut_at_char_boundary(&mut cut, mid);
            wire.first_mut()?.summary = cut;
            let e = encode(&wire)?;
            if e.len() <= max_bytes {
                best = Some(e);
                lo = mid + 1;
            } else if mid == 0 {
                break;
            } else {
                hi = mid - 1;
            }
        }
        s = best?;
    }
    Some(s)
}

/// How long one run took and what it found, for logs, status and the benchmark.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    pub runs: u64,
    pub failures: u64,
    pub last_took: Duration,
}

#[derive(Debug, Default)]
struct Shared {
    in_flight: bool,
    /// The newest answer: the episode id it belongs to and its cause.
    found: Option<EpisodeCause>,
    stats: RunStats,
}

#[derive(Debug)]
struct Episode {
    start: Timestamp,
    chain_id: String,
    ticks_since_run: u64,
}

/// Runs `explain` for the current straggler episode off the tick and keeps its newest
/// answer. Owned by the agent's loop; the runs share only [`Shared`] with it.
#[derive(Debug)]
pub struct EpisodeExplainer {
    db: PathBuf,
    node_id: String,
    episode: Option<Episode>,
    shared: Arc<Mutex<Shared>>,
}

/// The episode id: `<node id>:<episode start, Unix ms>`.
pub fn chain_id(node_id: &str, start: Timestamp) -> String {
    format!("{node_id}:{}", start.as_nanos() / 1_000_000)
}

/// The range one run reads for an episode that started `len` ago.
pub fn range_for(len: Duration) -> Duration {
    (len + LEAD.max(len)).min(MAX_RANGE)
}

/// One `explain` over the store at `db`: the compact chains, `None` when there are none.
pub fn explain_store(db: &std::path::Path, since: Duration) -> Result<Option<String>, String> {
    let conn = crate::store::open_read_only(db).map_err(|e| e.to_string())?;
    let report = super::explain::explain(
        &conn,
        &ExplainOptions {
            since,
            per_process: false,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(compact(&report.chains, MAX_CHAINS_BYTES))
}

impl EpisodeExplainer {
    /// `db`: this agent's store; `node_id`: the node id the agent pushes under.
    pub fn new(db: PathBuf, node_id: String) -> Self {
        EpisodeExplainer {
            db,
            node_id,
            episode: None,
            shared: Arc::default(),
        }
    }

    pub fn stats(&self) -> RunStats {
        self.shared.lock().stats.clone()
    }

    /// The episode id while one lasts.
    pub fn chain_id(&self) -> Option<&str> {
        self.episode.as_ref().map(|e| e.chain_id.as_str())
    }

    /// The newest cause of the current episode, without starting a run.
    pub fn newest(&self) -> Option<EpisodeCause> {
        let id = self.chain_id()?;
        let found = self.shared.lock().found.clone();
        found.filter(|c| c.chain_id == id)
    }

    /// Called on every straggler emission (each straggler tick and the recovery edge):
    /// starts, refreshes or ends the episode and returns the cause known now. Never waits
    /// for a run; must be called inside a Tokio runtime.
    pub fn on_emission(&mut self, straggler: bool, now: Timestamp) -> Option<EpisodeCause> {
        if !straggler {
            self.episode = None;
            self.shared.lock().found = None;
            return None;
        }
        let due = match &mut self.episode {
            None => {
                let id = chain_id(&self.node_id, now);
                self.shared.lock().found = None;
                self.episode = Some(Episode {
                    start: now,
                    chain_id: id,
                    ticks_since_run: 0,
                });
                true
            }
            Some(e) => {
                e.ticks_since_run += 1;
                e.ticks_since_run >= REFRESH_TICKS
            }
        };
        let (start, id) = {
            let ep = self.episode.as_ref()?;
            (ep.start, ep.chain_id.clone())
        };
        if due {
            // A run still in flight (of this episode or the last): try again next tick.
            let started = self.start_run(start, id.clone(), now);
            if let Some(ep) = self.episode.as_mut() {
                ep.ticks_since_run = if started { 0 } else { REFRESH_TICKS - 1 };
            }
        }
        let found = self.shared.lock().found.clone();
        found.filter(|c| c.chain_id == id)
    }

    /// Start a run unless one is in flight; returns whether it started.
    fn start_run(&self, start: Timestamp, chain_id: String, now: Timestamp) -> bool {
        {
            let mut s = self.shared.lock();
            if s.in_flight {
                return false;
            }
            s.in_flight = true;
        }
        let since = range_for(now.since(start));
        let db = self.db.clone();
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let t0 = Instant::now();
            let r = explain_store(&db, since);
            let took = t0.elapsed();
            let mut s = shared.lock();
            s.in_flight = false;
            s.stats.runs += 1;
            s.stats.last_took = took;
            match r {
                Ok(Some(chains_json)) => {
                    tracing::debug!(chain_id = %chain_id, took = ?took, bytes = chains_json.len(), "episode explained");
                    s.found = Some(EpisodeCause {
                        chain_id,
                        chains_json,
                    });
                }
                Ok(None) => {
                    tracing::debug!(chain_id = %chain_id, took = ?took, "episode explain found no chain");
                }
                Err(e) => {
                    s.stats.failures += 1;
                    tracing::debug!(chain_id = %chain_id, error = %e, "episode explain failed");
                }
            }
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::investigate::explain::TimelineEntry;
    use crate::investigate::fixtures::{self, Layout};

    fn chain(id: &str, severity: &str, summary: &str, explanation: &str) -> Chain {
        Chain {
            id: id.into(),
            node: "n1".into(),
            pid: None,
            detected_at: 0,
            severity: severity.into(),
            causes: vec![Cause::CpuContention],
            summary: summary.into(),
            root_cause: "CPU contention (run-queue delay 40%)".into(),
            explanation: explanation.into(),
            recommendations: vec!["Pin the training process".into()],
            cuda_op: "cudaStreamSynchronize".into(),
            cuda_p50_us: 100,
            cuda_p99_us: 2500,
            tail_ratio: 25.0,
            rate_drop: 0.4,
            first_window: 0,
            last_window: 0,
            timeline: vec![TimelineEntry {
                layer: "HOST".into(),
                op: "sched_switch".into(),
                detail: "x".into(),
                dur_us: 1,
            }],
        }
    }

    fn parse(s: &str) -> Vec<serde_json::Value> {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn chains_go_most_severe_first_at_most_three_with_the_wire_fields() {
        let cs = [
            chain("low", "LOW", "s", "e"),
            chain("med", "MEDIUM", "s", "e"),
            chain("high1", "HIGH", "s", "e"),
            chain("high2", "HIGH", "s", "e"),
        ];
        let v = parse(&compact(&cs, MAX_CHAINS_BYTES).unwrap());
        let ids: Vec<&str> = v.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["high1", "high2", "med"]);
        let c = v[0].as_object().unwrap();
        let mut keys: Vec<&str> = c.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "causes",
                "cuda_op",
                "cuda_p99_us",
                "explanation",
                "id",
                "recommendations",
                "root_cause",
                "severity",
                "summary",
                "tail_ratio"
            ]
        );
        assert_eq!(c["causes"][0], "cpu_contention");
        assert_eq!(c["cuda_p99_us"], 2500);
        assert_eq!(c["tail_ratio"], 25.0);
        assert!(compact(&[], MAX_CHAINS_BYTES).is_none());
    }

    #[test]
    fn an_oversized_array_loses_explanations_then_chains_then_summary() {
        let long = "x".repeat(1500);
        // Explanations alone push it over: they go, every chain stays.
        let cs = [
            chain("a", "HIGH", "s", &long),
            chain("b", "HIGH", "s", &long),
            chain("c", "HIGH", "s", &long),
        ];
        let s = compact(&cs, MAX_CHAINS_BYTES).unwrap();
        assert!(s.len() <= MAX_CHAINS_BYTES);
        let v = parse(&s);
        assert_eq!(v.len(), 3);
        assert!(v.iter().all(|c| c.get("explanation").is_none()));
        // Summaries too long for three: trailing chains go.
        let cs = [
            chain("a", "HIGH", &long, "e"),
            chain("b", "HIGH", &long, "e"),
            chain("c", "HIGH", &long, "e"),
        ];
        let v = parse(&compact(&cs, MAX_CHAINS_BYTES).unwrap());
        assert_eq!(v.len(), 2);
        // One chain whose summary alone is too long: cut at a character boundary (a
        // three-byte character and a quote that escapes to two bytes).
        let huge = "é\"€".repeat(2000);
        let s = compact(&[chain("a", "HIGH", &huge, "e")], MAX_CHAINS_BYTES).unwrap();
        assert!(s.len() <= MAX_CHAINS_BYTES, "{}", s.len());
        assert!(
            s.len() > MAX_CHAINS_BYTES - 16,
            "cut no more than needed: {}",
            s.len()
        );
        let v = parse(&s);
        let summary = v[0]["summary"].as_str().unwrap();
        assert!(huge.starts_with(summary) && !summary.is_empty());
    }

    #[test]
    fn the_range_reaches_before_the_episode_and_is_bounded() {
        assert_eq!(range_for(Duration::from_secs(10)), Duration::from_secs(70));
        assert_eq!(
            range_for(Duration::from_secs(100)),
            Duration::from_secs(200)
        );
        assert_eq!(range_for(Duration::from_secs(3600)), MAX_RANGE);
        assert_eq!(
            chain_id("gpu-7", Timestamp::from_nanos(1_700_000_000_123_456_789)),
            "gpu-7:1700000000123"
        );
    }

    async fn settle(x: &EpisodeExplainer) {
        for _ in 0..500 {
            if !x.shared.lock().in_flight {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("explain run never finished");
    }

    #[tokio::test]
    async fn an_episode_gets_its_cause_from_the_store_and_loses_it_on_recovery() {
        let dir = fixtures::tmp_dir("episode");
        let db = dir.join("n1.db");
        fixtures::write_node_db(&db, "n1", Layout::Current, &fixtures::contended_events(0));
        let mut x = EpisodeExplainer::new(db, "n1".into());
        let t0 = Timestamp::now();
        // The rising edge starts a run and does not wait for it.
        assert!(x.on_emission(true, t0).is_none());
        let id = x.chain_id().unwrap().to_string();
        assert_eq!(id, chain_id("n1", t0));
        settle(&x).await;
        let c = x
            .on_emission(true, t0.saturating_add(Duration::from_secs(2)))
            .unwrap();
        assert_eq!(c.chain_id, id, "the same id on every tick of the episode");
        let v = parse(&c.chains_json);
        assert_eq!(v[0]["causes"][0], "cpu_contention");
        assert_eq!(x.stats().runs, 1);
        // What the span keeps at the end of the episode.
        assert_eq!(x.newest(), Some(c.clone()));
        // The recovery ends it: nothing attached, and a new episode has a new id.
        assert!(
            x.on_emission(false, t0.saturating_add(Duration::from_secs(4)))
                .is_none()
        );
        assert!(x.chain_id().is_none());
        assert!(x.newest().is_none());
        let t1 = t0.saturating_add(Duration::from_secs(6));
        assert!(
            x.on_emission(true, t1).is_none(),
            "the new episode starts bare"
        );
        assert_eq!(x.chain_id().unwrap(), chain_id("n1", t1));
        settle(&x).await;
        std::fs::remove_dir_all(&dir).ok();
    }

    #[tokio::test]
    async fn a_clean_store_or_a_missing_one_attaches_nothing() {
        let dir = fixtures::tmp_dir("episode-clean");
        let db = dir.join("n1.db");
        fixtures::write_node_db(&db, "n1", Layout::Current, &fixtures::clean_events(0));
        let mut x = EpisodeExplainer::new(db, "n1".into());
        let t0 = Timestamp::now();
        assert!(x.on_emission(true, t0).is_none());
        settle(&x).await;
        assert!(
            x.on_emission(true, t0.saturating_add(Duration::from_secs(2)))
                .is_none()
        );
        let mut gone = EpisodeExplainer::new(dir.join("missing.db"), "n1".into());
        assert!(gone.on_emission(true, t0).is_none());
        settle(&gone).await;
        assert!(
            gone.on_emission(true, t0.saturating_add(Duration::from_secs(2)))
                .is_none()
        );
        assert_eq!(gone.stats().failures, 1);
        std::fs::remove_dir_all(&dir).ok();
    }
}
