//! The scenario file (TOML): who is in the cluster, how their scores wobble, and what goes
//! wrong when. Every duration is a string (`10s`, `30m`) and counts from the start of the
//! run; every depth is a fraction of the healthy score (`0.15` = the score is 15 % lower).
//! Unknown keys are an error; [`Scenario::validate`] reports every problem with its key path.

use std::time::Duration;

use component::config::duration;
use serde::Deserialize;

/// The bundled scenarios, by name (`sim/scenarios/<name>.toml`).
pub const BUNDLED: &[(&str, &str)] = &[
    ("demo", include_str!("../scenarios/demo.toml")),
    ("noise-only", include_str!("../scenarios/noise-only.toml")),
    ("straggler", include_str!("../scenarios/straggler.toml")),
    ("breakdown", include_str!("../scenarios/breakdown.toml")),
    ("panic", include_str!("../scenarios/panic.toml")),
    (
        "churn-restart",
        include_str!("../scenarios/churn-restart.toml"),
    ),
    ("nccl", include_str!("../scenarios/nccl.toml")),
    ("gpu-h100", include_str!("../scenarios/gpu-h100.toml")),
    ("gpu-h200", include_str!("../scenarios/gpu-h200.toml")),
];

/// A bundled scenario's text.
pub fn bundled(name: &str) -> Option<&'static str> {
    BUNDLED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(default = "default_cluster")]
    pub cluster_id: String,
    /// Simulated time the run lasts.
    #[serde(with = "duration")]
    pub duration: Duration,
    /// The agents' push interval (and Fleet's `processors.ingero.push_interval`).
    #[serde(with = "duration", default = "default_push_interval")]
    pub push_interval: Duration,
    /// The agents' warm-up samples (baseline and CALIBRATING state); the agent's default 30.
    #[serde(default = "default_warmup_samples")]
    pub warmup_samples: u64,
    /// The noise every cohort uses unless it names its own.
    #[serde(default)]
    pub noise: Noise,
    #[serde(rename = "cohort")]
    pub cohorts: Vec<Cohort>,
    #[serde(default, rename = "straggler")]
    pub stragglers: Vec<Straggler>,
    #[serde(default, rename = "slowdown")]
    pub slowdowns: Vec<Slowdown>,
    #[serde(default)]
    pub churn: Vec<Churn>,
    #[serde(default, rename = "fleet_restart")]
    pub fleet_restarts: Vec<FleetRestart>,
    #[serde(default)]
    pub nccl: Option<Nccl>,
}

fn default_seed() -> u64 {
    1
}
fn default_cluster() -> String {
    "sim".into()
}
fn default_push_interval() -> Duration {
    Duration::from_secs(10)
}
fn default_warmup_samples() -> u64 {
    30
}

/// Per-node noise of the score, all in fractions of the healthy score.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Noise {
    pub model: NoiseModel,
    /// Standard deviation per node-tick (Gaussian), or scale (Student-t).
    pub sigma: f64,
    /// Student-t degrees of freedom (heavy tails); > 2.
    pub df: f64,
    /// Per-node standard deviation of a constant bias drawn once per node.
    pub bias_sigma: f64,
    /// Lag-1 autocorrelation of each node's tick-to-tick noise, in [0, 1): the noise is
    /// `ar * previous + sqrt(1 - ar^2) * draw`, so its spread is the same as with 0
    /// (independent ticks, the default).
    pub ar: f64,
    /// Chance per node-tick of a one-tick benign dip.
    pub dip_probability: f64,
    /// Dip depth, uniform in `[min, max]`.
    pub dip_depth: [f64; 2],
    /// After every (re)start the node runs `warmup_depth` slower, easing linearly to its
    /// level over `warmup` (caches, clocks, data loaders warming up).
    #[serde(with = "duration")]
    pub warmup: Duration,
    pub warmup_depth: f64,
}

impl Default for Noise {
    fn default() -> Self {
        Noise {
            model: NoiseModel::Gaussian,
            sigma: 0.01,
            df: 3.0,
            bias_sigma: 0.0,
            ar: 0.0,
            dip_probability: 0.0,
            dip_depth: [0.02, 0.05],
            warmup: Duration::ZERO,
            warmup_depth: 0.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseModel {
    Gaussian,
    StudentT,
}

/// A group of nodes with one workload (its cgroup hash is the Fleet cohort key).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cohort {
    pub name: String,
    pub nodes: usize,
    /// `ingero.cgroup_path_hash` the cohort's agents send (empty: cluster-wide cohort).
    #[serde(default)]
    pub cgroup_hash: String,
    /// The cohort's own noise (the scenario's `[noise]` when absent).
    #[serde(default)]
    pub noise: Option<Noise>,
}

/// Which nodes of a cohort an event hits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pick {
    /// Cohort name; the first cohort when absent.
    #[serde(default)]
    pub cohort: Option<String>,
    /// Node indexes within the cohort.
    #[serde(default)]
    pub nodes: Vec<usize>,
    /// Or: this many nodes, the cohort's last ones.
    #[serde(default)]
    pub count: Option<usize>,
    /// Or: this share of the cohort (rounded down), the cohort's last ones.
    #[serde(default)]
    pub fraction: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Straggler {
    #[serde(flatten)]
    pub pick: Pick,
    /// Score drop while slow, a fraction of the healthy score.
    pub drop: f64,
    #[serde(with = "duration")]
    pub onset: Duration,
    /// When it is healthy again (never when absent).
    #[serde(default, with = "opt_duration")]
    pub recover: Option<Duration>,
}

/// The whole cluster slows down together (a storage stall, a bad rollout): panic mode.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slowdown {
    pub drop: f64,
    #[serde(with = "duration")]
    pub start: Duration,
    #[serde(with = "duration")]
    pub end: Duration,
}

/// Nodes go away (their agents stop) and come back with a fresh agent (warm-up again).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Churn {
    #[serde(flatten)]
    pub pick: Pick,
    #[serde(with = "duration")]
    pub at: Duration,
    #[serde(with = "duration")]
    pub down_for: Duration,
}

/// Fleet restarts with empty state; agents keep their cached threshold until it ages out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetRestart {
    #[serde(with = "duration")]
    pub at: Duration,
}

/// One communicator over the first `ranks` nodes of a cohort, one rank per node, one
/// all-reduce every `step`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nccl {
    #[serde(default)]
    pub cohort: Option<String>,
    pub ranks: u32,
    #[serde(with = "duration")]
    pub step: Duration,
    /// Standard deviation of each rank's entry time around the step, in ms.
    #[serde(default = "default_jitter")]
    pub jitter_ms: f64,
    #[serde(default)]
    pub late: Vec<LateRank>,
}

fn default_jitter() -> f64 {
    2.0
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateRank {
    pub rank: u32,
    pub lag_ms: f64,
    /// Late on every `every`-th step (1: chronic, on every step).
    #[serde(default = "one")]
    pub every: u32,
    #[serde(with = "duration", default)]
    pub onset: Duration,
}

fn one() -> u32 {
    1
}

mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = String::deserialize(d)?;
        component::config::parse_duration(&s)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

/// A scenario that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{0}")]
    Parse(String),
    #[error("invalid scenario:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

impl Scenario {
    /// Parse and validate.
    pub fn from_toml(text: &str) -> Result<Self, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        s.validate().map_err(ScenarioError::Invalid)?;
        Ok(s)
    }

    pub fn total_nodes(&self) -> usize {
        self.cohorts.iter().map(|c| c.nodes).sum()
    }

    /// Index of the cohort a pick names.
    pub fn cohort_index(&self, name: Option<&str>) -> Option<usize> {
        match name {
            None => (!self.cohorts.is_empty()).then_some(0),
            Some(n) => self.cohorts.iter().position(|c| c.name == n),
        }
    }

    /// Global node indexes a pick selects (nodes are numbered cohort after cohort).
    pub fn resolve(&self, pick: &Pick) -> Result<Vec<usize>, String> {
        let ci = self
            .cohort_index(pick.cohort.as_deref())
            .ok_or_else(|| format!("unknown cohort {:?}", pick.cohort.as_deref().unwrap_or("")))?;
        let start: usize = self.cohorts[..ci].iter().map(|c| c.nodes).sum();
        let n = self.cohorts[ci].nodes;
        let local: Vec<usize> = match (pick.nodes.is_empty(), pick.count, pick.fraction) {
            (false, None, None) => pick.nodes.clone(),
            (true, Some(c), None) => (n.saturating_sub(c)..n).collect(),
            (true, None, Some(f)) => {
                let c = (f * n as f64).floor() as usize;
                (n.saturating_sub(c)..n).collect()
            }
            _ => return Err("give exactly one of nodes, count, fraction".into()),
        };
        if let Some(bad) = local.iter().find(|&&i| i >= n) {
            return Err(format!("node {bad} is outside the cohort's {n} nodes"));
        }
        Ok(local.into_iter().map(|i| start + i).collect())
    }

    /// Every problem, with its key path.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut e = Vec::new();
        if self.cohorts.is_empty() {
            e.push("cohort: at least one cohort is required".into());
        }
        if self.total_nodes() == 0 {
            e.push("cohort.nodes: the cluster has no nodes".into());
        }
        if self.push_interval.is_zero() {
            e.push("push_interval: must be > 0".into());
        }
        if self.duration < self.push_interval {
            e.push("duration: must be at least one push_interval".into());
        }
        check_noise("noise", &self.noise, &mut e);
        for (i, c) in self.cohorts.iter().enumerate() {
            if let Some(n) = &c.noise {
                check_noise(&format!("cohort[{i}].noise"), n, &mut e);
            }
            if self.cohorts[..i].iter().any(|o| o.name == c.name) {
                e.push(format!("cohort[{i}].name: {:?} is used twice", c.name));
            }
        }
        for (i, s) in self.stragglers.iter().enumerate() {
            if let Err(m) = self.resolve(&s.pick) {
                e.push(format!("straggler[{i}]: {m}"));
            }
            if !(s.drop > 0.0 && s.drop < 1.0) {
                e.push(format!("straggler[{i}].drop: must be in (0, 1)"));
            }
            if s.recover.is_some_and(|r| r <= s.onset) {
                e.push(format!("straggler[{i}].recover: must be after onset"));
            }
        }
        for (i, s) in self.slowdowns.iter().enumerate() {
            if !(s.drop > 0.0 && s.drop < 1.0) {
                e.push(format!("slowdown[{i}].drop: must be in (0, 1)"));
            }
            if s.end <= s.start {
                e.push(format!("slowdown[{i}].end: must be after start"));
            }
        }
        for (i, c) in self.churn.iter().enumerate() {
            if let Err(m) = self.resolve(&c.pick) {
                e.push(format!("churn[{i}]: {m}"));
            }
            if c.down_for.is_zero() {
                e.push(format!("churn[{i}].down_for: must be > 0"));
            }
        }
        if let Some(n) = &self.nccl {
            match self.cohort_index(n.cohort.as_deref()) {
                None => e.push("nccl.cohort: unknown cohort".into()),
                Some(ci) if (n.ranks as usize) > self.cohorts[ci].nodes => {
                    e.push("nccl.ranks: more ranks than the cohort has nodes".into())
                }
                Some(_) => {}
            }
            if n.ranks < 2 {
                e.push("nccl.ranks: must be >= 2".into());
            }
            if n.step.is_zero() {
                e.push("nccl.step: must be > 0".into());
            }
            if !(n.jitter_ms >= 0.0 && n.jitter_ms.is_finite()) {
                e.push("nccl.jitter_ms: must be >= 0".into());
            }
            for (i, l) in n.late.iter().enumerate() {
                if l.rank >= n.ranks {
                    e.push(format!("nccl.late[{i}].rank: must be < ranks"));
                }
                if !(l.lag_ms > 0.0 && l.lag_ms.is_finite()) {
                    e.push(format!("nccl.late[{i}].lag_ms: must be > 0"));
                }
                if l.every == 0 {
                    e.push(format!("nccl.late[{i}].every: must be >= 1"));
                }
            }
        }
        if e.is_empty() { Ok(()) } else { Err(e) }
    }
}

fn check_noise(path: &str, n: &Noise, e: &mut Vec<String>) {
    let frac = |v: f64| (0.0..1.0).contains(&v);
    if !frac(n.sigma) {
        e.push(format!("{path}.sigma: must be in [0, 1)"));
    }
    if n.model == NoiseModel::StudentT && !(n.df > 2.0 && n.df.is_finite()) {
        e.push(format!("{path}.df: must be > 2"));
    }
    if !frac(n.bias_sigma) {
        e.push(format!("{path}.bias_sigma: must be in [0, 1)"));
    }
    if !(0.0..1.0).contains(&n.ar) {
        e.push(format!("{path}.ar: must be in [0, 1)"));
    }
    if !(0.0..=1.0).contains(&n.dip_probability) {
        e.push(format!("{path}.dip_probability: must be in [0, 1]"));
    }
    if !(frac(n.dip_depth[0]) && frac(n.dip_depth[1]) && n.dip_depth[0] <= n.dip_depth[1]) {
        e.push(format!(
            "{path}.dip_depth: must be [min, max] within [0, 1)"
        ));
    }
    if !frac(n.warmup_depth) {
        e.push(format!("{path}.warmup_depth: must be in [0, 1)"));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_bundled_scenario_parses_and_validates() {
        for (name, text) in BUNDLED {
            if let Err(e) = Scenario::from_toml(text) {
                panic!("{name}: {e}");
            }
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_with_their_paths() {
        let e = Scenario::from_toml(
            "name='x'\nduration='1m'\ncolour=1\n[[cohort]]\nname='a'\nnodes=4\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("colour"), "{e}");
        let text = r#"
            name = "x"
            duration = "1m"
            [noise]
            sigma = 2.0
            [[cohort]]
            name = "a"
            nodes = 4
            [[straggler]]
            nodes = [9]
            drop = 1.5
            onset = "10s"
        "#;
        let ScenarioError::Invalid(v) = Scenario::from_toml(text).unwrap_err() else {
            panic!("expected validation errors");
        };
        assert!(v.iter().any(|m| m.starts_with("noise.sigma")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("node 9 is outside")), "{v:?}");
        assert!(
            v.iter().any(|m| m.starts_with("straggler[0].drop")),
            "{v:?}"
        );
    }

    #[test]
    fn picks_resolve_to_global_node_indexes() {
        let s = Scenario::from_toml(
            "name='x'\nduration='1m'\n[[cohort]]\nname='a'\nnodes=4\n[[cohort]]\nname='b'\nnodes=10\n",
        )
        .unwrap();
        let p = |cohort: &str, count: Option<usize>, fraction: Option<f64>| Pick {
            cohort: Some(cohort.into()),
            nodes: vec![],
            count,
            fraction,
        };
        assert_eq!(s.resolve(&p("b", Some(2), None)).unwrap(), [12, 13]);
        assert_eq!(
            s.resolve(&p("b", None, Some(0.49))).unwrap(),
            [10, 11, 12, 13]
        );
        assert!(s.resolve(&p("c", Some(1), None)).is_err());
    }
}
