//! The simulated cluster: per-node noise, the scenario's events on a timeline, the ground
//! truth at any instant, and the raw signals an agent would read.
//!
//! Signals. Scores are modelled in fractions of the healthy score and put into the raw
//! signals the agent reads, the way `ingero-agent`'s `detection_sim` test does it: memory
//! and CPU sit at 0.9, throughput (kernel launches per second, 10,000 at the baseline) and
//! compute efficiency (0.9 at the baseline) are both scaled by one factor `f`. The agent's
//! score of such a node is `0.4 f + 0.25 * 0.9 f + 0.2 * 0.9 + 0.15 * 0.9 = 0.625 f + 0.315`
//! (0.94 at `f = 1`), so a score lower by a fraction `d` needs `f = 1 - d * 0.94 / 0.625`.
//! The agent then scores the throughput against its own baseline (clamped to 1), so the
//! score noise it reports is the model's noise as its own code shapes it.

use std::time::Duration;

use ingero_agent_core::health::SignalSet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal, StudentT};

use crate::scenario::{Noise, NoiseModel, Scenario};

/// Kernel launches per second at the baseline.
pub const BASE_RATE: f64 = 10_000.0;
/// Compute efficiency, memory headroom and CPU availability at the baseline.
pub const BASE_LEVEL: f64 = 0.9;
/// The agent's score of a node at its baseline with the signals above.
pub const HEALTHY_SCORE: f64 = 0.94;
/// Weight of the two scaled signals in the score: `0.4 + 0.25 * 0.9`.
const SCALED_WEIGHT: f64 = 0.625;

/// The raw-signal factor that lowers the score by the fraction `d` (negative `d` raises it).
pub fn factor_for_score_drop(d: f64) -> f64 {
    1.0 - d * HEALTHY_SCORE / SCALED_WEIGHT
}

/// What a node really is at an instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Truth {
    /// No injected slowdown (noise, dips, bias, warm-up and a cluster-wide slowdown are
    /// all "healthy": none of them makes the node slower than its peers for long).
    Healthy,
    /// An injected straggler episode, index into [`Timeline::episodes`].
    Straggler(usize),
    /// Just recovered (within [`RECOVERY_GRACE_INTERVALS`] push intervals): neither
    /// counted as a detection nor as a false positive while verdicts clear.
    Recovering(usize),
    /// Not running (churned out).
    Down,
    /// No injected straggler, but inside a cluster-wide slowdown (or within the grace
    /// after it): Fleet holds its threshold in panic mode and, by design, flags the nodes
    /// below it (`ingero-processor/README.md`, panic mode). Counted apart from healthy.
    Systemic,
}

/// Push intervals after a recovery during which a still-flagged node is not a false
/// positive: the agent's slowdown reference takes up to four ticks to recover
/// (docs/architecture.md, known limitations), Fleet one tick more.
pub const RECOVERY_GRACE_INTERVALS: u32 = 5;

/// One injected straggler episode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Episode {
    pub node: usize,
    pub drop: f64,
    pub onset: Duration,
    pub recover: Option<Duration>,
}

/// One node's downtime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Downtime {
    pub node: usize,
    pub from: Duration,
    pub until: Duration,
}

/// The scenario's events resolved to node indexes.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub episodes: Vec<Episode>,
    pub downtimes: Vec<Downtime>,
    /// Per node: its episodes and downtimes (indexes), for quick lookups.
    node_episodes: Vec<Vec<usize>>,
    node_downtimes: Vec<Vec<usize>>,
    slowdowns: Vec<(Duration, Duration, f64)>,
    grace: Duration,
}

impl Timeline {
    pub fn new(s: &Scenario) -> Result<Self, String> {
        let n = s.total_nodes();
        let mut episodes = Vec::new();
        for st in &s.stragglers {
            for node in s.resolve(&st.pick)? {
                episodes.push(Episode {
                    node,
                    drop: st.drop,
                    onset: st.onset,
                    recover: st.recover,
                });
            }
        }
        let mut downtimes = Vec::new();
        for c in &s.churn {
            for node in s.resolve(&c.pick)? {
                downtimes.push(Downtime {
                    node,
                    from: c.at,
                    until: c.at + c.down_for,
                });
            }
        }
        let mut node_episodes = vec![Vec::new(); n];
        for (i, e) in episodes.iter().enumerate() {
            node_episodes[e.node].push(i);
        }
        let mut node_downtimes = vec![Vec::new(); n];
        for (i, d) in downtimes.iter().enumerate() {
            node_downtimes[d.node].push(i);
        }
        Ok(Timeline {
            episodes,
            downtimes,
            node_episodes,
            node_downtimes,
            slowdowns: s
                .slowdowns
                .iter()
                .map(|d| (d.start, d.end, d.drop))
                .collect(),
            grace: s.push_interval * RECOVERY_GRACE_INTERVALS,
        })
    }

    pub fn is_down(&self, node: usize, t: Duration) -> bool {
        self.node_downtimes[node]
            .iter()
            .any(|&i| self.downtimes[i].from <= t && t < self.downtimes[i].until)
    }

    /// When the node last (re)started, at or before `t`.
    pub fn started_at(&self, node: usize, t: Duration) -> Duration {
        self.node_downtimes[node]
            .iter()
            .map(|&i| self.downtimes[i].until)
            .filter(|&u| u <= t)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    pub fn truth(&self, node: usize, t: Duration) -> Truth {
        if self.is_down(node, t) {
            return Truth::Down;
        }
        let mut out = Truth::Healthy;
        for &i in &self.node_episodes[node] {
            let e = &self.episodes[i];
            if t < e.onset {
                continue;
            }
            match e.recover {
                Some(r) if t >= r + self.grace => {}
                Some(r) if t >= r => out = Truth::Recovering(i),
                _ => return Truth::Straggler(i),
            }
        }
        let systemic = self
            .slowdowns
            .iter()
            .any(|&(a, b, _)| a <= t && t < b + self.grace);
        if out == Truth::Healthy && systemic {
            return Truth::Systemic;
        }
        out
    }

    /// The straggler drop in force (0 when none).
    fn drop(&self, node: usize, t: Duration) -> f64 {
        self.node_episodes[node]
            .iter()
            .map(|&i| &self.episodes[i])
            .filter(|e| t >= e.onset && e.recover.is_none_or(|r| t < r))
            .map(|e| e.drop)
            .fold(0.0, f64::max)
    }
}

/// Per-node noise state.
#[derive(Debug, Clone)]
struct NodeNoise {
    noise: Noise,
    bias: f64,
    /// The last noise draw (the autoregressive part's memory).
    last: f64,
}

/// The cluster's nodes, their noise and the timeline.
#[derive(Debug)]
pub struct World {
    pub timeline: Timeline,
    nodes: Vec<NodeNoise>,
    rng: StdRng,
    interval: Duration,
}

impl World {
    pub fn new(s: &Scenario) -> Result<Self, String> {
        let mut rng = StdRng::seed_from_u64(s.seed);
        let mut nodes = Vec::with_capacity(s.total_nodes());
        for c in &s.cohorts {
            let noise = c.noise.clone().unwrap_or_else(|| s.noise.clone());
            for _ in 0..c.nodes {
                let bias = if noise.bias_sigma > 0.0 {
                    Normal::new(0.0, noise.bias_sigma)
                        .map_err(|e| e.to_string())?
                        .sample(&mut rng)
                } else {
                    0.0
                };
                nodes.push(NodeNoise {
                    noise: noise.clone(),
                    bias,
                    last: 0.0,
                });
            }
        }
        Ok(World {
            timeline: Timeline::new(s)?,
            nodes,
            rng,
            interval: s.push_interval,
        })
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node's score shortfall at `t` as a fraction of the healthy score (negative:
    /// above it), one draw of its noise.
    pub fn shortfall(&mut self, node: usize, t: Duration) -> f64 {
        let n = &self.nodes[node];
        let noise = &n.noise;
        let eps = match noise.model {
            _ if noise.sigma == 0.0 => 0.0,
            NoiseModel::Gaussian => Normal::new(0.0, noise.sigma)
                .map(|d| d.sample(&mut self.rng))
                .unwrap_or(0.0),
            NoiseModel::StudentT => StudentT::new(noise.df)
                .map(|d| d.sample(&mut self.rng) * noise.sigma)
                .unwrap_or(0.0),
        };
        // AR(1): the same stationary spread, correlated from tick to tick.
        let eps = if noise.ar > 0.0 {
            noise.ar * n.last + (1.0 - noise.ar * noise.ar).sqrt() * eps
        } else {
            eps
        };
        self.nodes[node].last = eps;
        let n = &self.nodes[node];
        let noise = &n.noise;
        let mut level = (1.0 - n.bias - eps).max(0.0);
        if noise.dip_probability > 0.0 && self.rng.random::<f64>() < noise.dip_probability {
            let [lo, hi] = noise.dip_depth;
            level *= 1.0
                - if hi > lo {
                    self.rng.random_range(lo..hi)
                } else {
                    lo
                };
        }
        if !noise.warmup.is_zero() && noise.warmup_depth > 0.0 {
            let since = t.saturating_sub(self.timeline.started_at(node, t));
            let left = 1.0 - (since.as_secs_f64() / noise.warmup.as_secs_f64()).min(1.0);
            level *= 1.0 - noise.warmup_depth * left;
        }
        level *= 1.0 - self.timeline.drop(node, t);
        for &(a, b, d) in &self.timeline.slowdowns {
            if a <= t && t < b {
                level *= 1.0 - d;
            }
        }
        1.0 - level
    }

    /// The raw signals and kernel launches of one agent window ending at `t`.
    pub fn sample(&mut self, node: usize, t: Duration) -> (SignalSet, i64) {
        let f = factor_for_score_drop(self.shortfall(node, t)).max(0.0);
        let rate = BASE_RATE * f;
        let raw = SignalSet::new(
            rate,
            (BASE_LEVEL * f).clamp(0.0, 1.0),
            BASE_LEVEL,
            BASE_LEVEL,
        );
        let launches = (rate * self.interval.as_secs_f64()).round() as i64;
        (raw, launches)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scenario(text: &str) -> Scenario {
        Scenario::from_toml(text).unwrap()
    }

    #[test]
    fn the_factor_maps_a_score_drop_onto_the_agents_score_model() {
        // 0.625 f + 0.315 at the factor for a 15 % drop is 85 % of the healthy score.
        let f = factor_for_score_drop(0.15);
        assert!((0.625 * f + 0.315 - 0.85 * HEALTHY_SCORE).abs() < 1e-12);
        assert_eq!(factor_for_score_drop(0.0), 1.0);
    }

    #[test]
    fn truth_follows_onset_recovery_grace_and_churn() {
        let s = scenario(
            r#"
            name = "t"
            duration = "1h"
            [[cohort]]
            name = "a"
            nodes = 4
            [[straggler]]
            nodes = [1]
            drop = 0.2
            onset = "10m"
            recover = "20m"
            [[churn]]
            nodes = [2]
            at = "5m"
            down_for = "1m"
        "#,
        );
        let tl = Timeline::new(&s).unwrap();
        let m = |x: u64| Duration::from_secs(60 * x);
        assert_eq!(tl.truth(1, m(9)), Truth::Healthy);
        assert_eq!(tl.truth(1, m(10)), Truth::Straggler(0));
        assert_eq!(tl.truth(1, m(20)), Truth::Recovering(0));
        assert_eq!(tl.truth(1, m(20) + Duration::from_secs(60)), Truth::Healthy);
        assert_eq!(tl.truth(2, m(5)), Truth::Down);
        assert_eq!(tl.truth(2, m(6)), Truth::Healthy);
        assert_eq!(tl.started_at(2, m(7)), m(6));
    }

    /// With `ar` the noise keeps its spread and gains that lag-1 autocorrelation.
    #[test]
    fn autoregressive_noise_keeps_its_spread_and_correlates_ticks() {
        for ar in [0.0, 0.3, 0.6] {
            let s = scenario(&format!(
                "name = \"t\"\nduration = \"1h\"\n[noise]\nsigma = 0.01\nar = {ar}\n\
                 [[cohort]]\nname = \"a\"\nnodes = 1\n"
            ));
            let mut w = World::new(&s).unwrap();
            let x: Vec<f64> = (0..200_000u64)
                .map(|i| w.shortfall(0, Duration::from_secs(10 * i)))
                .collect();
            let n = x.len() as f64;
            let mean = x.iter().sum::<f64>() / n;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            let lag1 = x
                .windows(2)
                .map(|w| (w[0] - mean) * (w[1] - mean))
                .sum::<f64>()
                / (n - 1.0)
                / var;
            assert!(
                (var.sqrt() - 0.01).abs() < 0.0003,
                "ar {ar}: sd {}",
                var.sqrt()
            );
            assert!((lag1 - ar).abs() < 0.01, "ar {ar}: lag-1 {lag1}");
        }
        assert!(Scenario::from_toml(
            "name = \"t\"\nduration = \"1h\"\n[noise]\nar = 1.0\n[[cohort]]\nname = \"a\"\nnodes = 1\n"
        )
        .is_err());
    }

    #[test]
    fn a_noiseless_straggler_and_a_slowdown_lower_the_raw_signals_by_their_depth() {
        let s = scenario(
            r#"
            name = "t"
            duration = "1h"
            [noise]
            sigma = 0.0
            [[cohort]]
            name = "a"
            nodes = 2
            [[straggler]]
            nodes = [0]
            drop = 0.3
            onset = "1m"
            [[slowdown]]
            drop = 0.1
            start = "2m"
            end = "3m"
        "#,
        );
        let mut w = World::new(&s).unwrap();
        let at = |x: u64| Duration::from_secs(x);
        assert_eq!(w.shortfall(0, at(0)), 0.0);
        assert!((w.shortfall(0, at(60)) - 0.3).abs() < 1e-12);
        assert!((w.shortfall(1, at(150)) - 0.1).abs() < 1e-12);
        assert!((w.shortfall(0, at(150)) - (1.0 - 0.7 * 0.9)).abs() < 1e-12);
        let (raw, launches) = w.sample(1, at(0));
        assert_eq!(raw.throughput, BASE_RATE);
        assert_eq!(launches, 100_000);
    }
}
