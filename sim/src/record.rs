//! Ground truth against what Fleet and each agent said, and the score of a run.
//!
//! - A **detection** is the first Fleet tick (Fleet: the node is in the processor's
//!   straggler output, which is what the exporter and the diagnostics carry) or the first
//!   agent tick (agent: its own classifier says straggler) at or after an episode's onset
//!   that flags the episode's node. Time to detect is measured from the onset, in simulated
//!   (or, live, wall-clock) seconds.
//! - A **false positive node-tick** is a healthy node (no injected episode in force, not
//!   within the grace after a recovery) flagged on one of its ticks: Fleet ticks for Fleet,
//!   the agent's own ticks for the agent.
//!   A false-positive **event** is the start of such a run.
//! - A **recovery** is the first tick (Fleet's or the agent's) at or after a detected
//!   episode's end on which its node is no longer flagged; time to recover is measured from
//!   the end. A node still flagged when the grace after the end runs out
//!   ([`crate::world::RECOVERY_GRACE_INTERVALS`] push intervals) has no recovery time: its
//!   flagged ticks from then on are false positives.
//! - Node-ticks inside a cluster-wide slowdown are neither: they are counted, with how many
//!   were flagged, apart (Fleet flags them by design while it holds its threshold in panic).

use std::time::Duration;

use serde::Serialize;

use crate::world::{Timeline, Truth};

/// Which side said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Fleet,
    Agent,
}

/// Something worth printing as it happens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub at_s: f64,
    pub side: Side,
    pub node: usize,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Detected {
        episode: usize,
        after_s: f64,
    },
    Cleared,
    FalsePositive,
    /// Fleet named a late NCCL rank (`node` is the rank).
    NcclNamed {
        lag_ms: f64,
        period_steps: Option<u32>,
    },
    /// Fleet's quorum came (or went): the threshold it now serves.
    Quorum {
        met: bool,
        threshold: Option<f64>,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FalsePositives {
    pub healthy_node_ticks: u64,
    pub false_positive_node_ticks: u64,
    pub false_positive_events: u64,
    /// Node-ticks inside a cluster-wide slowdown (not healthy, not stragglers) ...
    pub slowdown_node_ticks: u64,
    /// ... and how many of them were flagged.
    pub slowdown_flagged_node_ticks: u64,
}

impl FalsePositives {
    pub fn per_million(&self) -> f64 {
        if self.healthy_node_ticks == 0 {
            return 0.0;
        }
        self.false_positive_node_ticks as f64 * 1e6 / self.healthy_node_ticks as f64
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpisodeResult {
    pub node: usize,
    pub drop: f64,
    pub onset_s: f64,
    pub fleet_detect_s: Option<f64>,
    pub agent_detect_s: Option<f64>,
    /// When the episode ends (none: it lasts to the end of the run).
    pub recover_s: Option<f64>,
    /// From the end to the first tick that no longer flags the node (detected episodes
    /// cleared within the grace only).
    pub fleet_recover_s: Option<f64>,
    pub agent_recover_s: Option<f64>,
}

/// One late rank as injected and as Fleet named it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclResult {
    pub rank: u32,
    pub injected_lag_ms: f64,
    pub injected_every: u32,
    pub named_after_s: Option<f64>,
    pub reported_lag_ms: Option<f64>,
    pub reported_period_steps: Option<u32>,
    pub lag_within_10_percent: bool,
}

/// A rank Fleet named (from its diagnostics or telemetry).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NamedRank {
    pub rank: u32,
    pub median_lag_ms: f64,
    pub period_steps: Option<u32>,
    pub chronic: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub mode: String,
    pub nodes: usize,
    pub seconds: f64,
    pub episodes: Vec<EpisodeResult>,
    pub fleet: FalsePositives,
    pub agent: FalsePositives,
    /// Fleet ticks with the cluster in panic mode.
    pub panic_ticks: u64,
    pub fleet_ticks: u64,
    pub nccl: Vec<NcclResult>,
    /// Ranks Fleet named that were never late.
    pub nccl_wrongly_named: Vec<u32>,
    pub pushes: u64,
    pub push_errors: u64,
    /// Points Fleet refused (OTLP partial success).
    pub rejected_points: u64,
}

impl Report {
    pub fn fleet_detected(&self) -> usize {
        self.episodes
            .iter()
            .filter(|e| e.fleet_detect_s.is_some())
            .count()
    }

    pub fn agent_detected(&self) -> usize {
        self.episodes
            .iter()
            .filter(|e| e.agent_detect_s.is_some())
            .count()
    }
}

/// Collects what happened during a run.
#[derive(Debug)]
pub struct Recorder {
    timeline: Timeline,
    report: Report,
    fleet_flagged: Vec<bool>,
    agent_flagged: Vec<bool>,
    nccl_truth: Vec<(u32, f64, u32, Duration)>,
    events: Vec<Event>,
    quorum: bool,
    /// Per node: its previous tick was a false positive (Fleet, agent).
    fleet_fp_run: Vec<bool>,
    agent_fp_run: Vec<bool>,
}

impl Recorder {
    pub fn new(scenario: &crate::scenario::Scenario, timeline: Timeline, mode: &str) -> Self {
        let n = scenario.total_nodes();
        let episodes = timeline
            .episodes
            .iter()
            .map(|e| EpisodeResult {
                node: e.node,
                drop: e.drop,
                onset_s: e.onset.as_secs_f64(),
                fleet_detect_s: None,
                agent_detect_s: None,
                recover_s: e.recover.map(|r| r.as_secs_f64()),
                fleet_recover_s: None,
                agent_recover_s: None,
            })
            .collect();
        let nccl_truth: Vec<_> = scenario
            .nccl
            .iter()
            .flat_map(|c| c.late.iter().map(|l| (l.rank, l.lag_ms, l.every, l.onset)))
            .collect();
        let nccl = nccl_truth
            .iter()
            .map(|&(rank, lag, every, _)| NcclResult {
                rank,
                injected_lag_ms: lag,
                injected_every: every,
                named_after_s: None,
                reported_lag_ms: None,
                reported_period_steps: None,
                lag_within_10_percent: false,
            })
            .collect();
        Recorder {
            timeline,
            report: Report {
                scenario: scenario.name.clone(),
                mode: mode.into(),
                nodes: n,
                episodes,
                nccl,
                ..Report::default()
            },
            fleet_flagged: vec![false; n],
            agent_flagged: vec![false; n],
            nccl_truth,
            events: Vec::new(),
            quorum: false,
            fleet_fp_run: vec![false; n],
            agent_fp_run: vec![false; n],
        }
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Every episode flagged by Fleet and by its agent, and every late rank named, so far.
    pub fn all_caught(&self) -> bool {
        self.report
            .episodes
            .iter()
            .all(|e| e.fleet_detect_s.is_some() && e.agent_detect_s.is_some())
            && self.report.nccl.iter().all(|n| n.named_after_s.is_some())
    }

    /// Events since the last call (for printing as they happen).
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// `pushes` requests sent, `errors` of them failed, `rejected_points` refused by Fleet.
    pub fn count_pushes(&mut self, pushes: u64, errors: u64, rejected_points: u64) {
        self.report.pushes += pushes;
        self.report.push_errors += errors;
        self.report.rejected_points += rejected_points;
    }

    /// One agent tick of `node` at `t`; `straggler` is its classifier's verdict after it.
    pub fn agent_tick(&mut self, node: usize, t: Duration, straggler: bool) {
        let truth = self.timeline.truth(node, t);
        let was = std::mem::replace(&mut self.agent_flagged[node], straggler);
        Self::score(
            &mut self.report.agent,
            &mut self.report.episodes,
            &mut self.events,
            (Side::Agent, node, t),
            truth,
            straggler,
            (was, &mut self.agent_fp_run[node]),
        );
    }

    /// One Fleet tick at `t`: `flagged[node]` for every node; `up(node)` says which run.
    pub fn fleet_tick(&mut self, t: Duration, flagged: &[bool], panic: bool) {
        self.report.fleet_ticks += 1;
        self.report.panic_ticks += u64::from(panic);
        for (node, &f) in flagged.iter().enumerate().take(self.fleet_flagged.len()) {
            let truth = self.timeline.truth(node, t);
            let was = std::mem::replace(&mut self.fleet_flagged[node], f);
            if truth == Truth::Down {
                continue;
            }
            Self::score(
                &mut self.report.fleet,
                &mut self.report.episodes,
                &mut self.events,
                (Side::Fleet, node, t),
                truth,
                f,
                (was, &mut self.fleet_fp_run[node]),
            );
        }
    }

    fn score(
        fp: &mut FalsePositives,
        episodes: &mut [EpisodeResult],
        events: &mut Vec<Event>,
        (side, node, t): (Side, usize, Duration),
        truth: Truth,
        flagged: bool,
        (was, fp_run): (bool, &mut bool),
    ) {
        let at_s = t.as_secs_f64();
        let in_run = std::mem::replace(fp_run, truth == Truth::Healthy && flagged);
        match truth {
            Truth::Healthy => {
                fp.healthy_node_ticks += 1;
                if flagged {
                    fp.false_positive_node_ticks += 1;
                    if !in_run {
                        fp.false_positive_events += 1;
                        events.push(Event {
                            at_s,
                            side,
                            node,
                            kind: EventKind::FalsePositive,
                        });
                    }
                }
            }
            Truth::Systemic => {
                fp.slowdown_node_ticks += 1;
                fp.slowdown_flagged_node_ticks += u64::from(flagged);
            }
            Truth::Straggler(i) if flagged => {
                let Some(e) = episodes.get_mut(i) else {
                    return;
                };
                let slot = match side {
                    Side::Fleet => &mut e.fleet_detect_s,
                    Side::Agent => &mut e.agent_detect_s,
                };
                if slot.is_none() {
                    let after_s = at_s - e.onset_s;
                    *slot = Some(after_s);
                    events.push(Event {
                        at_s,
                        side,
                        node,
                        kind: EventKind::Detected {
                            episode: i,
                            after_s,
                        },
                    });
                }
            }
            Truth::Recovering(i) if !flagged => {
                let Some(e) = episodes.get_mut(i) else {
                    return;
                };
                let (detected, slot) = match side {
                    Side::Fleet => (e.fleet_detect_s.is_some(), &mut e.fleet_recover_s),
                    Side::Agent => (e.agent_detect_s.is_some(), &mut e.agent_recover_s),
                };
                if let (true, None, Some(end)) = (detected, *slot, e.recover_s) {
                    *slot = Some(at_s - end);
                }
            }
            _ => {}
        }
        if was && !flagged {
            events.push(Event {
                at_s,
                side,
                node,
                kind: EventKind::Cleared,
            });
        }
    }

    /// Fleet's quorum and threshold at `t` (an event when quorum comes or goes).
    pub fn quorum(&mut self, t: Duration, met: bool, threshold: Option<f64>) {
        if met != self.quorum {
            self.quorum = met;
            self.events.push(Event {
                at_s: t.as_secs_f64(),
                side: Side::Fleet,
                node: 0,
                kind: EventKind::Quorum { met, threshold },
            });
        }
    }

    /// Ranks Fleet names at `t`.
    pub fn nccl_named(&mut self, t: Duration, named: &[NamedRank]) {
        for n in named {
            let Some(i) = self.nccl_truth.iter().position(|l| l.0 == n.rank) else {
                if !self.report.nccl_wrongly_named.contains(&n.rank) {
                    self.report.nccl_wrongly_named.push(n.rank);
                }
                continue;
            };
            let (_, lag, _, onset) = self.nccl_truth[i];
            let r = &mut self.report.nccl[i];
            if r.named_after_s.is_none() {
                r.named_after_s = Some(t.saturating_sub(onset).as_secs_f64());
                self.events.push(Event {
                    at_s: t.as_secs_f64(),
                    side: Side::Fleet,
                    node: n.rank as usize,
                    kind: EventKind::NcclNamed {
                        lag_ms: n.median_lag_ms,
                        period_steps: n.period_steps,
                    },
                });
            }
            r.reported_lag_ms = Some(n.median_lag_ms);
            r.reported_period_steps = n.period_steps;
            r.lag_within_10_percent = (n.median_lag_ms - lag).abs() <= 0.1 * lag;
        }
    }

    pub fn finish(mut self, seconds: f64) -> Report {
        self.report.seconds = seconds;
        self.report
    }
}

/// Median and 95th percentile (nearest rank) of `v`; `None` when empty.
pub fn median_p95(v: &[f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |p: f64| s[((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    Some((at(0.5), at(0.95)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::scenario::Scenario;

    #[test]
    fn detections_false_positives_and_grace_are_scored_from_the_truth() {
        let s = Scenario::from_toml(
            r#"
            name = "t"
            duration = "1h"
            [[cohort]]
            name = "a"
            nodes = 3
            [[straggler]]
            nodes = [0]
            drop = 0.2
            onset = "100s"
            recover = "200s"
        "#,
        )
        .unwrap();
        let mut r = Recorder::new(&s, Timeline::new(&s).unwrap(), "test");
        let at = Duration::from_secs;
        r.fleet_tick(at(90), &[false, false, false], false);
        r.fleet_tick(at(100), &[false, false, false], false);
        r.fleet_tick(at(110), &[true, true, false], false);
        r.fleet_tick(at(120), &[true, true, false], true);
        // Still flagged within the grace after recovery: not a false positive.
        r.fleet_tick(at(240), &[true, false, false], false);
        // Flagged after the grace: a false positive.
        r.fleet_tick(at(260), &[true, false, false], false);
        r.agent_tick(0, at(105), true);
        let rep = r.finish(300.0);
        assert_eq!(rep.episodes[0].fleet_detect_s, Some(10.0));
        assert_eq!(rep.episodes[0].agent_detect_s, Some(5.0));
        assert_eq!(rep.fleet.false_positive_node_ticks, 3);
        assert_eq!(rep.fleet.false_positive_events, 2);
        assert_eq!(rep.fleet.healthy_node_ticks, 3 + 2 + 2 + 2 + 2 + 3);
        assert_eq!(rep.panic_ticks, 1);
    }

    #[test]
    fn recovery_is_the_first_unflagged_tick_after_the_end_of_a_detected_episode() {
        let s = Scenario::from_toml(
            r#"
            name = "t"
            duration = "1h"
            push_interval = "10s"
            [[cohort]]
            name = "a"
            nodes = 2
            [[straggler]]
            nodes = [0]
            drop = 0.2
            onset = "100s"
            recover = "200s"
            [[straggler]]
            nodes = [1]
            drop = 0.2
            onset = "100s"
            recover = "200s"
        "#,
        )
        .unwrap();
        let mut r = Recorder::new(&s, Timeline::new(&s).unwrap(), "test");
        let at = Duration::from_secs;
        // Node 0 flagged from 110 s, still at 203 s, cleared at 213 s; node 1 never flagged.
        for t in [110, 203] {
            r.fleet_tick(at(t), &[true, false], false);
        }
        r.fleet_tick(at(213), &[false, false], false);
        r.fleet_tick(at(223), &[false, false], false);
        // The agent of node 0 is still flagged when the grace (50 s) runs out.
        r.agent_tick(0, at(105), true);
        r.agent_tick(0, at(245), true);
        r.agent_tick(0, at(255), false);
        let rep = r.finish(300.0);
        assert_eq!(rep.episodes[0].recover_s, Some(200.0));
        assert_eq!(rep.episodes[0].fleet_recover_s, Some(13.0));
        assert_eq!(
            rep.episodes[0].agent_recover_s, None,
            "not within the grace"
        );
        assert_eq!(rep.episodes[1].fleet_recover_s, None, "never detected");
    }

    #[test]
    fn median_and_p95_use_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(median_p95(&v), Some((10.0, 19.0)));
        assert_eq!(median_p95(&[]), None);
    }
}
