//! One cluster's tick: node counts and coverage, the cluster-wide and per-cohort
//! thresholds, and server-side classification of every node. Pure computation over the
//! [`NodeSample`]s the processor copied out of the [`crate::table::NodeTable`]; no locks,
//! no I/O, time comes in as `now`.
//!
//! Coverage: `expected = max(declared, active + calibrating + silent)` where `silent` are
//! nodes past their TTL but seen within `quorum.expected_window` whose last state was not
//! `idle`, and `declared` is `quorum.expected_nodes[cluster]` (0 when absent). Idle nodes
//! are accounted for and not expected to contribute. `coverage = active / expected` (1 when
//! nothing is expected); `coverage_low = coverage < coverage_fraction`.

use std::collections::HashMap;
use std::sync::Arc;

use component::Timestamp;

use crate::classifier::{
    CusumParams, MIN_SIGMA, SHALLOW_REFERENCE, ShortfallCusum, TailEstimate, Transition,
    shallow_spread,
};
use crate::config::IngeroConfig;
use crate::table::{
    CLUSTER_WIDE_COHORT, CohortId, NodeBudget, NodeCounts, NodeSample, NodeState, NodeTable,
};
use crate::threshold::{CohortThreshold, CohortUpdate, ThresholdParams};

/// Everything a cluster tick depends on besides its nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterParams {
    pub threshold: ThresholdParams,
    pub cusum: CusumParams,
    /// `classifier.evidence`: 0 picks it from the cluster's noise each tick.
    pub evidence: u32,
    pub cohorts_enabled: bool,
    pub coverage_fraction: f64,
    pub require_coverage: bool,
    /// Nodes to pick for the diagnostics list (`diagnostics.max_nodes_per_cluster`).
    pub diagnostics_max_nodes: usize,
}

impl ClusterParams {
    pub fn from_config(cfg: &IngeroConfig) -> Self {
        ClusterParams {
            threshold: ThresholdParams::from_config(cfg),
            cusum: crate::classifier::cusum_params(cfg),
            evidence: cfg.classifier.evidence,
            cohorts_enabled: cfg.cohorts.enabled,
            coverage_fraction: cfg.quorum.coverage_fraction,
            require_coverage: cfg.quorum.require_coverage,
            diagnostics_max_nodes: usize::try_from(cfg.diagnostics.max_nodes_per_cluster)
                .unwrap_or(usize::MAX),
        }
    }
}

/// The result for one non-empty cohort key.
#[derive(Debug, Clone, PartialEq)]
pub struct CohortResult {
    pub name: Arc<str>,
    pub update: CohortUpdate,
    /// The cohort lacked quorum (or a threshold) and classified against the cluster-wide one.
    pub uses_fallback: bool,
    pub straggler_count: u64,
}

/// A straggler edge of one node (index into the tick's samples).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeTransition {
    pub sample: usize,
    pub transition: Transition,
}

/// One cluster after a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterTick {
    pub cluster_wide: CohortUpdate,
    pub cohorts: Vec<CohortResult>,
    pub active: u64,
    pub idle: u64,
    pub calibrating: u64,
    pub expected: u64,
    pub coverage: f64,
    pub coverage_low: bool,
    pub straggler_count: u64,
    /// Indices (into the samples) of the nodes flagged as stragglers.
    pub stragglers: Vec<usize>,
    /// Indices of the nodes to list in diagnostics ([`diagnostic_selection`] order).
    pub diagnostic_nodes: Vec<usize>,
    pub transitions: Vec<NodeTransition>,
    /// Samples at the single-sample depth a flag needed on this tick.
    pub evidence: u8,
    /// Lone deep samples per node-sample (the tail estimate after this tick).
    pub lone_deep_rate: f64,
}

#[derive(Debug, Default)]
struct CohortSlot {
    threshold: CohortThreshold,
    seen_tick: u64,
}

/// What a cohort's nodes are classified against on one tick: the threshold and 1 / sigma
/// (the CUSUM's unit), and the cohort's median and 1 / spread (the shallow-drop rule's;
/// a median of `-inf` where that rule does not act: no quorum of its own, or panic).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effective {
    pub threshold: f64,
    pub inv_sigma: f64,
    pub median: f64,
    pub inv_spread: f64,
}

impl Effective {
    /// No threshold: no shortfall compares as within the drift (NaN).
    const NONE: Effective = Effective {
        threshold: f64::NAN,
        inv_sigma: f64::NAN,
        median: f64::NEG_INFINITY,
        inv_spread: 1.0,
    };

    /// Against `threshold` / `sigma`, with the shallow-drop rule where `stats` allow it.
    fn new(threshold: f64, sigma: f64, update: &CohortUpdate, shallow: bool) -> Effective {
        let (median, inv_spread) = match update.stats {
            Some(st) if shallow && update.quorum_met && !update.panic => {
                (st.median, 1.0 / shallow_spread(st.median, st.mad))
            }
            _ => (f64::NEG_INFINITY, 1.0),
        };
        Effective {
            threshold,
            inv_sigma: inverse_sigma(sigma),
            median,
            inv_spread,
        }
    }

    /// The same without the shallow-drop rule (a cohort classified against another's).
    fn without_shallow(self) -> Effective {
        Effective {
            median: f64::NEG_INFINITY,
            inv_spread: 1.0,
            ..self
        }
    }
}

/// State of one cluster carried across ticks, plus reusable scratch buffers.
#[derive(Debug, Default)]
pub struct ClusterTickState {
    cluster_wide: CohortThreshold,
    cohorts: HashMap<Arc<str>, CohortSlot>,
    /// Per table slot: (generation, classifier). The generation is kept current for every
    /// classifier that is not at rest; one at rest behaves like a fresh one whatever its
    /// generation says.
    classifiers: Vec<(u32, ShortfallCusum)>,
    /// Ascending slots whose classifier is not at rest (sum > 0 or flagged): every other
    /// classifier is at rest. The classification pass visits these through the general
    /// step and decides every other slot from its sample alone.
    restless: Vec<usize>,
    /// Per cohort id: what its nodes are classified against, [`Effective::NONE`] for none.
    dense_effective: Vec<Effective>,
    ticks: u64,
    samples: Vec<NodeSample>,
    cohort_names: Vec<Option<Arc<str>>>,
    /// Active live scores and node counts of `samples`, tallied while they were loaded.
    scores: Vec<f64>,
    node_counts: NodeCounts,
    /// `scores` / `node_counts` no longer describe `samples` (edited, or consumed).
    stale_tally: bool,
    grouped: Vec<f64>,
    counts: Vec<usize>,
    /// Per cohort id: what its nodes are classified against.
    effective: Vec<Option<Effective>>,
    cohort_stragglers: Vec<u64>,
    /// The statistic's selection buffer.
    select_scratch: Vec<f64>,
    /// The tails of this cluster's healthy noise (picks the evidence a flag needs).
    tail: TailEstimate,
}

fn tally(counts: &mut NodeCounts, scores: &mut Vec<f64>, s: &NodeSample) {
    if counts.add(s) {
        scores.push(s.score);
    }
}

impl ClusterTickState {
    /// Copy a table out for a tick (call with the table's lock held; nothing else is done
    /// under it): samples, cohort names, active scores and counts, in one pass. Returns the
    /// number of records the table forgot (older than `forget_nanos`).
    pub fn load(
        &mut self,
        table: &mut NodeTable,
        now: u64,
        ttl_nanos: u64,
        forget_nanos: u64,
        budget: &NodeBudget,
    ) -> usize {
        let (counts, removed) = table.snapshot(
            now,
            ttl_nanos,
            forget_nanos,
            budget,
            &mut self.samples,
            &mut self.scores,
            &mut self.cohort_names,
        );
        self.node_counts = counts;
        self.stale_tally = false;
        removed
    }

    /// Set the samples directly (tests; the processor uses [`Self::load`]). Sample `i`
    /// stands for table slot `i`.
    pub fn set_samples(&mut self, samples: Vec<NodeSample>, cohort_names: Vec<Option<Arc<str>>>) {
        self.samples = samples;
        self.cohort_names = cohort_names;
        self.stale_tally = true;
    }

    /// This tick's samples, with `straggler` set by [`Self::compute`].
    pub fn samples(&self) -> &[NodeSample] {
        &self.samples
    }

    /// Edit the samples before another [`Self::compute`] (tests).
    pub fn samples_mut(&mut self) -> &mut Vec<NodeSample> {
        self.stale_tally = true;
        &mut self.samples
    }

    /// The cohort key of cohort id `id` (empty for the cluster-wide cohort).
    pub fn cohort_name(&self, id: CohortId) -> Option<&Arc<str>> {
        self.cohort_names.get(id as usize).and_then(Option::as_ref)
    }

    /// The cluster-wide threshold state (tests, diagnostics).
    pub fn cluster_wide(&self) -> &CohortThreshold {
        &self.cluster_wide
    }

    /// The threshold nodes of cohort `cohort` were classified against in the last
    /// [`Self::compute`] (their own cohort's, or the cluster-wide one as fallback).
    pub fn threshold_for(&self, cohort: CohortId) -> Option<f64> {
        self.effective
            .get(cohort as usize)
            .copied()
            .flatten()
            .map(|e| e.threshold)
    }

    /// Compute the tick over `self.samples`, marking each sample's `straggler` and
    /// `threshold`. `declared_expected` is the operator's node count for this cluster.
    pub fn compute(
        &mut self,
        p: &ClusterParams,
        declared_expected: u64,
        now: Timestamp,
    ) -> ClusterTick {
        self.ticks += 1;

        if self.stale_tally {
            self.scores.clear();
            self.node_counts = NodeCounts::default();
            for smp in &self.samples {
                tally(&mut self.node_counts, &mut self.scores, smp);
            }
        }
        // The statistic below consumes `scores`.
        self.stale_tally = true;
        let NodeCounts {
            active,
            idle,
            calibrating,
            silent,
        } = self.node_counts;
        let expected = declared_expected.max(active + calibrating + silent);
        let coverage = if expected == 0 {
            1.0
        } else {
            active as f64 / expected as f64
        };
        let coverage_low = expected > 0 && coverage < p.coverage_fraction;
        let quorum_allowed = !(p.require_coverage && coverage_low);

        // Cluster-wide statistic over every active node.
        let cluster_wide = self.cluster_wide.update_with(
            &p.threshold,
            &mut self.scores,
            quorum_allowed,
            now,
            &mut self.select_scratch,
        );
        let cw_effective = cluster_wide
            .threshold
            .zip(cluster_wide.sigma)
            .map(|(t, sg)| Effective::new(t, sg, &cluster_wide, p.cusum.shallow()));

        self.effective.clear();
        self.effective.resize(self.cohort_names.len().max(1), None);
        if let Some(e) = self.effective.get_mut(CLUSTER_WIDE_COHORT as usize) {
            *e = cw_effective;
        }

        // Per-cohort statistics (non-empty keys), grouped by a counting sort.
        let mut cohorts = Vec::new();
        if p.cohorts_enabled && self.cohort_names.len() > 1 {
            cohorts = self.compute_cohorts(p, quorum_allowed, cw_effective, now);
        } else {
            self.cohorts.clear();
        }

        // Classification (sample `i` is table slot `i`).
        if self.classifiers.len() < self.samples.len() {
            self.classifiers
                .resize(self.samples.len(), (u32::MAX, ShortfallCusum::default()));
        }
        self.cohort_stragglers.clear();
        self.cohort_stragglers.resize(self.effective.len(), 0);
        self.dense_effective.clear();
        self.dense_effective
            .extend(self.effective.iter().map(|e| e.unwrap_or(Effective::NONE)));
        let restless = std::mem::take(&mut self.restless);
        let evidence = self.tail.evidence(p.evidence);
        let cusum = p.cusum.with_evidence(evidence);
        let mut step = ClassifyStep {
            cusum: &cusum,
            lone_deep: 0,
            effective: &self.effective,
            cohort_stragglers: &mut self.cohort_stragglers,
            transitions: Vec::new(),
            stragglers: Vec::new(),
            diagnostic: BottomK::new(p.diagnostics_max_nodes),
            restless: Vec::with_capacity(restless.len()),
        };
        // Only two kinds of slot can change state: those whose classifier is not at rest
        // (the `restless` list carried from the last tick), and live active nodes whose
        // shortfall exceeds the drift. Both go through `ClassifyStep::general` (out of
        // line, so the loop keeps its cursors in registers). Every other slot has a
        // classifier at rest and either is not live and active (the general step would
        // reset a classifier that is already at rest) or is within the drift (which leaves
        // a classifier at rest unchanged: see `ShortfallCusum::observe_z`), so it only
        // takes part in the diagnostics ranking, and its classifier is not even read.
        // A sample flagged as a straggler on arrival (tests edit samples between ticks)
        // takes the general step, which clears the flag.
        // Within the drift and within the shallow reference (a `-inf` median: always) is
        // what leaves a classifier at rest unchanged.
        let drift = p.cusum.drift;
        let dense = self.dense_effective.as_slice();
        // The cluster-wide cohort's in registers (no lookup per node without cohorts).
        let cw = dense.first().copied().unwrap_or(Effective::NONE);
        let mut pending = restless.iter().copied().peekable();
        let mut next = pending.peek().copied().unwrap_or(usize::MAX);
        for (i, s) in self.samples.iter_mut().enumerate() {
            if i != next {
                if s.live_active_unflagged_in(CLUSTER_WIDE_COHORT) {
                    if (cw.threshold - s.score) * cw.inv_sigma <= drift
                        && (cw.median - s.score) * cw.inv_spread <= SHALLOW_REFERENCE
                    {
                        step.diagnostic.offer(active_key(s.score), i);
                        continue;
                    }
                } else if s.live_active_unflagged() {
                    let e = dense
                        .get(s.cohort() as usize)
                        .copied()
                        .unwrap_or(Effective::NONE);
                    if (e.threshold - s.score) * e.inv_sigma <= drift
                        && (e.median - s.score) * e.inv_spread <= SHALLOW_REFERENCE
                    {
                        step.diagnostic.offer(active_key(s.score), i);
                        continue;
                    }
                } else if !s.straggler() {
                    // (The general step lists no free slot, even one marked live.)
                    if s.live() && !s.is_vacant() {
                        step.diagnostic.offer(diagnostic_key(s), i);
                    }
                    continue;
                }
            } else {
                pending.next();
                next = pending.peek().copied().unwrap_or(usize::MAX);
            }
            if let Some(entry) = self.classifiers.get_mut(i) {
                step.general(i, s, entry);
            }
        }
        // Classifiers beyond this tick's samples were not visited: they stay as they are.
        step.restless.extend(pending);
        let ClassifyStep {
            transitions,
            stragglers,
            diagnostic,
            restless,
            lone_deep,
            ..
        } = step;
        self.restless = restless;
        // Every live active node was classified once there is a threshold, the fast path's
        // nodes within the drift too: the unflagged ones are the samples the rate is over.
        let classified = if self.effective.iter().any(Option::is_some) {
            active.saturating_sub(stragglers.len() as u64)
        } else {
            0
        };
        self.tail.observe(lone_deep, classified);
        let straggler_count = stragglers.len() as u64;
        for c in &mut cohorts {
            c.straggler_count = self
                .cohort_names
                .iter()
                .position(|n| n.as_deref() == Some(c.name.as_ref()))
                .and_then(|id| self.cohort_stragglers.get(id).copied())
                .unwrap_or(0);
        }

        ClusterTick {
            cluster_wide,
            cohorts,
            active,
            idle,
            calibrating,
            expected,
            coverage,
            coverage_low,
            straggler_count,
            stragglers,
            diagnostic_nodes: diagnostic.finish(),
            transitions,
            evidence,
            lone_deep_rate: self.tail.rate(),
        }
    }

    /// The tails of this cluster's noise as estimated so far.
    pub fn tail(&self) -> &TailEstimate {
        &self.tail
    }

    fn compute_cohorts(
        &mut self,
        p: &ClusterParams,
        quorum_allowed: bool,
        cw_effective: Option<Effective>,
        now: Timestamp,
    ) -> Vec<CohortResult> {
        let n_ids = self.cohort_names.len();
        self.counts.clear();
        self.counts.resize(n_ids + 1, 0);
        for s in &self.samples {
            if s.live_active()
                && s.cohort() != CLUSTER_WIDE_COHORT
                && let Some(c) = self.counts.get_mut(s.cohort() as usize + 1)
            {
                *c += 1;
            }
        }
        // Prefix sums: counts[id] becomes the start offset of cohort `id`.
        for i in 1..self.counts.len() {
            let prev = self.counts.get(i - 1).copied().unwrap_or(0);
            if let Some(c) = self.counts.get_mut(i) {
                *c += prev;
            }
        }
        let total = self.counts.last().copied().unwrap_or(0);
        self.grouped.clear();
        self.grouped.resize(total, 0.0);
        // Fill using a cursor per cohort (reuses `counts[id]` as the write position).
        let mut cursor: Vec<usize> = self.counts.clone();
        for s in &self.samples {
            if s.live_active()
                && s.cohort() != CLUSTER_WIDE_COHORT
                && let Some(pos) = cursor.get_mut(s.cohort() as usize)
            {
                if let Some(slot) = self.grouped.get_mut(*pos) {
                    *slot = s.score;
                }
                *pos += 1;
            }
        }

        let tick = self.ticks;
        let mut results = Vec::new();
        for id in 1..n_ids {
            let Some(Some(name)) = self.cohort_names.get(id) else {
                continue;
            };
            let start = self.counts.get(id).copied().unwrap_or(0);
            let end = self.counts.get(id + 1).copied().unwrap_or(start);
            let Some(scores) = self.grouped.get_mut(start..end) else {
                continue;
            };
            let slot = self.cohorts.entry(name.clone()).or_default();
            slot.seen_tick = tick;
            let update = slot.threshold.update_with(
                &p.threshold,
                scores,
                quorum_allowed,
                now,
                &mut self.select_scratch,
            );
            let own = if update.quorum_met {
                update
                    .threshold
                    .zip(update.sigma)
                    .map(|(t, sg)| Effective::new(t, sg, &update, p.cusum.shallow()))
            } else {
                None
            };
            let uses_fallback = own.is_none();
            if let Some(e) = self.effective.get_mut(id) {
                *e = own.or(cw_effective.map(Effective::without_shallow));
            }
            results.push(CohortResult {
                name: name.clone(),
                update,
                uses_fallback,
                straggler_count: 0,
            });
        }
        self.cohorts.retain(|_, s| s.seen_tick == tick);
        results
    }
}

/// One tick's classification outputs, and the general per-node step.
struct ClassifyStep<'a> {
    cusum: &'a CusumParams,
    /// Lone deep samples seen on this tick (see [`TailEstimate`]).
    lone_deep: u64,
    /// Per cohort id: what its nodes are classified against.
    effective: &'a [Option<Effective>],
    cohort_stragglers: &'a mut [u64],
    transitions: Vec<NodeTransition>,
    stragglers: Vec<usize>,
    diagnostic: BottomK,
    /// Slots whose classifier is not at rest after this tick, ascending.
    restless: Vec<usize>,
}

impl ClassifyStep<'_> {
    /// Classify sample `i` with its classifier `entry` (generation, state).
    #[inline(never)]
    fn general(&mut self, i: usize, s: &mut NodeSample, entry: &mut (u32, ShortfallCusum)) {
        if s.is_vacant() {
            // The previous occupant was reset when it expired, before it was removed.
            *entry = (u32::MAX, ShortfallCusum::default());
            return;
        }
        if entry.0 != s.generation() {
            *entry = (s.generation(), ShortfallCusum::default());
        }
        let eff = if s.live_active() {
            self.effective.get(s.cohort() as usize).copied().flatten()
        } else {
            None
        };
        let t = match eff {
            // `effective` holds 1 / sigma and 1 / spread: multiplies per node, not divides.
            Some(e) => {
                let run = entry.1.deep_run();
                let t = entry.1.observe_zr(
                    self.cusum,
                    (e.threshold - s.score) * e.inv_sigma,
                    (e.median - s.score) * e.inv_spread,
                );
                if run == 1 && entry.1.deep_run() == 0 {
                    self.lone_deep += 1;
                }
                t
            }
            None => entry.1.reset(),
        };
        let straggler = entry.1.is_straggler();
        // Written only on a change (samples from a snapshot arrive unflagged).
        if s.straggler() != straggler {
            s.set_straggler(straggler);
        }
        if straggler {
            self.stragglers.push(i);
            if let Some(c) = self.cohort_stragglers.get_mut(s.cohort() as usize) {
                *c += 1;
            }
        }
        if let Some(transition) = t {
            self.transitions.push(NodeTransition {
                sample: i,
                transition,
            });
        }
        if !entry.1.at_rest() {
            self.restless.push(i);
        }
        if s.live() {
            self.diagnostic.offer(diagnostic_key(s), i);
        }
    }
}

fn inverse_sigma(sigma: f64) -> f64 {
    1.0 / sigma.max(MIN_SIGMA)
}

/// Ordering key of the diagnostics list: rank in the top two bits (stragglers, then
/// active nodes, then the rest), then the score's bit pattern (scores are in [0, 1], where
/// the IEEE pattern orders like the value and stays below 2^62).
fn diagnostic_key(s: &NodeSample) -> u64 {
    let rank: u64 = match (s.straggler(), s.state()) {
        (true, _) => 0,
        (false, NodeState::Active) => 1,
        _ => 2,
    };
    (rank << 62) | (s.score.to_bits() & ((1 << 62) - 1))
}

/// [`diagnostic_key`] of a live active sample that is not a straggler.
#[inline]
fn active_key(score: f64) -> u64 {
    (1 << 62) | (score.to_bits() & ((1 << 62) - 1))
}

/// The `max` smallest `(key, index)` pairs of a stream offered in increasing index order.
/// A buffer of `2 * max` candidates is cut back to the best `max` by selection whenever it
/// fills, so most offers cost one comparison: O(n + max log max) overall.
#[derive(Debug)]
struct BottomK {
    max: usize,
    buf: Vec<(u64, usize)>,
    /// Once the buffer has been cut, a key >= cutoff cannot make the result (an equal key
    /// arrives later, so it loses the tie on the index).
    cutoff: u64,
}

impl BottomK {
    fn new(max: usize) -> Self {
        BottomK {
            max,
            buf: Vec::with_capacity(max.saturating_mul(2).min(1 << 20)),
            // With `max` 0 nothing is kept: no key is below 0.
            cutoff: if max == 0 { 0 } else { u64::MAX },
        }
    }

    #[inline]
    fn offer(&mut self, key: u64, index: usize) {
        if key >= self.cutoff {
            return;
        }
        self.buf.push((key, index));
        if self.buf.len() >= self.max.saturating_mul(2) {
            self.buf.select_nth_unstable(self.max - 1);
            self.buf.truncate(self.max);
            self.cutoff = self.buf.get(self.max - 1).map_or(u64::MAX, |e| e.0);
        }
    }

    fn finish(mut self) -> Vec<usize> {
        self.buf.sort_unstable();
        self.buf.truncate(self.max);
        self.buf.into_iter().map(|(_, i)| i).collect()
    }
}

/// Indices of up to `max` live samples to list in diagnostics: stragglers first, then
/// active nodes, each by ascending score (ties by position). [`ClusterTickState::compute`]
/// does the same selection inside its classification pass.
pub fn diagnostic_selection(samples: &[NodeSample], max: usize) -> Vec<usize> {
    let mut k = BottomK::new(max);
    for (i, s) in samples.iter().enumerate() {
        if s.live() {
            k.offer(diagnostic_key(s), i);
        }
    }
    k.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IngeroConfig;

    /// One occupied sample; `slot` documents the position it must have in the vector.
    fn sample(
        _slot: u32,
        score: f64,
        state: NodeState,
        cohort: CohortId,
        live: bool,
    ) -> NodeSample {
        NodeSample::new(1, score, cohort, state, live)
    }

    fn params(cohorts: bool) -> ClusterParams {
        let mut cfg = IngeroConfig::default();
        cfg.cohorts.enabled = cohorts;
        ClusterParams::from_config(&cfg)
    }

    fn state_with(samples: Vec<NodeSample>, names: &[&str]) -> ClusterTickState {
        let mut st = ClusterTickState::default();
        st.set_samples(samples, names.iter().map(|n| Some(Arc::from(*n))).collect());
        st
    }

    fn spread(i: usize) -> f64 {
        0.95 + 0.01 * ((i % 5) as f64 - 2.0)
    }

    #[test]
    fn only_active_live_nodes_enter_the_statistic() {
        let mut v: Vec<_> = (0..5)
            .map(|i| sample(i, spread(i as usize), NodeState::Active, 0, true))
            .collect();
        v.push(sample(5, 0.0, NodeState::Idle, 0, true));
        v.push(sample(6, 0.0, NodeState::Calibrating, 0, true));
        v.push(sample(7, 0.0, NodeState::Active, 0, false));
        let mut st = state_with(v, &[""]);
        let t = st.compute(&params(false), 0, Timestamp::from_secs(1));
        assert_eq!((t.active, t.idle, t.calibrating), (5, 1, 1));
        assert_eq!(t.cluster_wide.stats.unwrap().median, 0.95);
        assert!(t.cluster_wide.quorum_met);
        // The expired active node is still expected: 5 active of 7 expected.
        assert_eq!(t.expected, 7);
        assert!((t.coverage - 5.0 / 7.0).abs() < 1e-12);
        assert!(t.coverage_low);
    }

    #[test]
    fn coverage_counts_declared_nodes_and_ignores_idle() {
        let v: Vec<_> = (0..8)
            .map(|i| sample(i, 0.9, NodeState::Active, 0, true))
            .chain((8..10).map(|i| sample(i, 0.9, NodeState::Idle, 0, true)))
            .collect();
        let mut st = state_with(v, &[""]);
        let t = st.compute(&params(false), 0, Timestamp::from_secs(1));
        assert_eq!(t.expected, 8);
        assert!(!t.coverage_low);
        let t = st.compute(&params(false), 10, Timestamp::from_secs(2));
        assert_eq!(t.expected, 10);
        assert!((t.coverage - 0.8).abs() < 1e-12);
        assert!(!t.coverage_low, "0.8 is not below 0.8");
        let t = st.compute(&params(false), 11, Timestamp::from_secs(3));
        assert!(t.coverage_low);
        assert!(t.cluster_wide.quorum_met, "coverage only alerts by default");
        let mut p = params(false);
        p.require_coverage = true;
        let t = st.compute(&p, 11, Timestamp::from_secs(4));
        assert!(!t.cluster_wide.quorum_met);
    }

    #[test]
    fn an_empty_cluster_expects_nothing() {
        let mut st = state_with(vec![], &[""]);
        let t = st.compute(&params(false), 0, Timestamp::from_secs(1));
        assert_eq!(t.expected, 0);
        assert_eq!(t.coverage, 1.0);
        assert!(!t.coverage_low);
        assert_eq!(t.cluster_wide.threshold, None);
    }

    #[test]
    fn a_deep_straggler_is_flagged_on_the_first_tick_after_a_threshold_exists() {
        let mut v: Vec<_> = (0..10)
            .map(|i| sample(i, spread(i as usize), NodeState::Active, 0, true))
            .collect();
        v[3].score = 0.5;
        let mut st = state_with(v, &[""]);
        let t = st.compute(&params(false), 0, Timestamp::from_secs(1));
        assert_eq!(t.straggler_count, 1);
        assert!(st.samples()[3].straggler());
        assert_eq!(st.threshold_for(0), t.cluster_wide.threshold);
        assert_eq!(t.stragglers, vec![3]);
        // The diagnostics list picked inside the classification pass is the standalone one.
        assert_eq!(t.diagnostic_nodes, diagnostic_selection(st.samples(), 1000));
        assert_eq!(t.diagnostic_nodes[0], 3);
        assert_eq!(
            t.transitions,
            vec![NodeTransition {
                sample: 3,
                transition: Transition::Entered
            }]
        );
        // It goes idle: cleared without a score comparison.
        st.samples_mut()[3].set_state(NodeState::Idle);
        let t = st.compute(&params(false), 0, Timestamp::from_secs(2));
        assert_eq!(t.straggler_count, 0);
        assert_eq!(t.transitions[0].transition, Transition::Cleared);
    }

    #[test]
    fn cold_start_classifies_nobody() {
        let v: Vec<_> = (0..4)
            .map(|i| {
                sample(
                    i,
                    if i == 0 { 0.1 } else { 0.95 },
                    NodeState::Active,
                    0,
                    true,
                )
            })
            .collect();
        let mut st = state_with(v, &[""]);
        let t = st.compute(&params(false), 0, Timestamp::from_secs(1));
        assert_eq!(t.cluster_wide.threshold, None);
        assert_eq!(t.straggler_count, 0);
        assert_eq!(st.threshold_for(0), None);
    }

    #[test]
    fn a_cohort_without_quorum_falls_back_to_the_cluster_wide_threshold() {
        // Cohort 1 ("fast", 6 nodes around 0.95) has quorum; cohort 2 ("pod-x", 1 node) not.
        let mut v: Vec<_> = (0..6)
            .map(|i| sample(i, spread(i as usize), NodeState::Active, 1, true))
            .collect();
        v.push(sample(6, 0.5, NodeState::Active, 2, true));
        let mut st = state_with(v, &["", "fast", "pod-x"]);
        let t = st.compute(&params(true), 0, Timestamp::from_secs(1));
        assert_eq!(t.cohorts.len(), 2);
        let fast = t
            .cohorts
            .iter()
            .find(|c| c.name.as_ref() == "fast")
            .unwrap();
        let pod = t
            .cohorts
            .iter()
            .find(|c| c.name.as_ref() == "pod-x")
            .unwrap();
        assert!(fast.update.quorum_met && !fast.uses_fallback);
        assert!(!pod.update.quorum_met && pod.uses_fallback);
        assert_eq!(st.threshold_for(2), t.cluster_wide.threshold);
        assert_ne!(st.threshold_for(1), t.cluster_wide.threshold);
        // The shallow-drop rule acts on a cohort's own median only: not on the fallback.
        let (own, fallback) = (st.effective[1].unwrap(), st.effective[2].unwrap());
        assert_eq!(own.median, fast.update.stats.unwrap().median);
        assert_eq!(fallback.median, f64::NEG_INFINITY);
        assert_eq!(fallback.threshold, t.cluster_wide.threshold.unwrap());
        assert!(st.samples()[6].straggler());
        assert_eq!(pod.straggler_count, 1);
        assert_eq!(fast.straggler_count, 0);
        assert_eq!(t.straggler_count, 1);
    }

    #[test]
    fn cohorts_classify_against_their_own_level() {
        // Two hardware generations: "a100" around 0.70, "h100" around 0.95. Cluster-wide,
        // the a100 nodes look like stragglers; per cohort they are healthy.
        let mut v: Vec<_> = (0..6)
            .map(|i| sample(i, spread(i as usize), NodeState::Active, 1, true))
            .collect();
        v.extend((6..12).map(|i| sample(i, spread(i as usize) - 0.25, NodeState::Active, 2, true)));
        let mut st = state_with(v.clone(), &["", "h100", "a100"]);
        let t = st.compute(&params(true), 0, Timestamp::from_secs(1));
        assert_eq!(t.straggler_count, 0);
        assert!(t.cohorts.iter().all(|c| !c.uses_fallback));
        // A deep drop inside the a100 cohort is still found.
        st.samples_mut()[8].score = 0.3;
        let t = st.compute(&params(true), 0, Timestamp::from_secs(2));
        assert_eq!(t.straggler_count, 1);
        assert!(st.samples()[8].straggler());
    }

    /// 40 nodes spread +-0.4 % around 0.95 (robust sigma about 0.4 %, far below the
    /// floored 1.5 %): a node 4.7 % below the median sits only about one floored sigma
    /// below the threshold. The shallow-drop sum flags it on the third tick; without that
    /// rule it is still unflagged then. In panic mode the rule does not act.
    #[test]
    fn a_shallow_drop_is_flagged_against_the_cohorts_own_spread() {
        let narrow = |i: usize| 0.95 + 0.002 * ((i % 5) as f64 - 2.0);
        let run = |p: &ClusterParams| {
            let mut v: Vec<_> = (0..40)
                .map(|i| sample(i, narrow(i as usize), NodeState::Active, 0, true))
                .collect();
            v[7].score = 0.95 * 0.953;
            let mut st = state_with(v, &[""]);
            (1..=3u64)
                .map(|tick| {
                    st.compute(p, 0, Timestamp::from_secs(10 * tick));
                    st.samples()[7].straggler()
                })
                .collect::<Vec<_>>()
        };
        let p = params(false);
        assert_eq!(run(&p), [false, false, true]);
        let mut off = p;
        off.cusum.shallow_decision = 0.0;
        assert_eq!(run(&off), [false, false, false]);

        // Panic (half the cohort far below the held threshold): the shallow rule is off.
        let mut v: Vec<_> = (0..40)
            .map(|i| sample(i, narrow(i as usize), NodeState::Active, 0, true))
            .collect();
        let mut st = state_with(v.clone(), &[""]);
        st.compute(&p, 0, Timestamp::from_secs(10));
        for s in v.iter_mut().skip(20) {
            s.score = 0.5;
        }
        st.samples_mut().clone_from(&v);
        let t = st.compute(&p, 0, Timestamp::from_secs(20));
        assert!(t.cluster_wide.panic);
        let e = st.effective[0].unwrap();
        assert_eq!(e.median, f64::NEG_INFINITY);
    }

    #[test]
    fn a_new_node_in_a_reused_slot_starts_healthy() {
        let mut v: Vec<_> = (0..10)
            .map(|i| sample(i, spread(i as usize), NodeState::Active, 0, true))
            .collect();
        v[0].score = 0.1;
        let mut st = state_with(v, &[""]);
        st.compute(&params(false), 0, Timestamp::from_secs(1));
        assert!(st.samples()[0].straggler());
        st.samples_mut()[0].set_generation(2);
        st.samples_mut()[0].score = 0.95;
        let t = st.compute(&params(false), 0, Timestamp::from_secs(2));
        assert!(!st.samples()[0].straggler());
        assert!(
            t.transitions.is_empty(),
            "the old node's state is not carried over"
        );
    }

    /// The straightforward classification the tick must reproduce: every slot through
    /// the general step, no fast path, no carried list. Returns (stragglers, transitions,
    /// diagnostics, per-cohort straggler counts) and flags `samples` in place.
    fn reference_classify(
        samples: &mut [NodeSample],
        classifiers: &mut Vec<(u32, ShortfallCusum)>,
        effective: &[Option<Effective>],
        p: &ClusterParams,
    ) -> (Vec<usize>, Vec<NodeTransition>, Vec<usize>, Vec<u64>) {
        if classifiers.len() < samples.len() {
            classifiers.resize(samples.len(), (u32::MAX, ShortfallCusum::default()));
        }
        let (mut stragglers, mut transitions) = (Vec::new(), Vec::new());
        let mut per_cohort = vec![0u64; effective.len()];
        for (i, s) in samples.iter_mut().enumerate() {
            let entry = &mut classifiers[i];
            if s.is_vacant() {
                *entry = (u32::MAX, ShortfallCusum::default());
                continue;
            }
            if entry.0 != s.generation() {
                *entry = (s.generation(), ShortfallCusum::default());
            }
            let eff = if s.live_active() {
                effective.get(s.cohort() as usize).copied().flatten()
            } else {
                None
            };
            let t = match eff {
                Some(e) => {
                    // The general CUSUM step, without `observe_zr`'s rest shortcut.
                    let c = &mut entry.1;
                    let was = c.is_straggler();
                    let z = (e.threshold - s.score) * e.inv_sigma;
                    let r = (e.median - s.score) * e.inv_spread;
                    let mut probe = *c;
                    let t = probe.observe_zr(&p.cusum, z, r);
                    let next = (c.sum() + z.min(p.cusum.deep()) - p.cusum.drift)
                        .max(0.0)
                        .min(p.cusum.cap());
                    let shallow = if r > f64::NEG_INFINITY {
                        let x = r.min(crate::classifier::SHALLOW_CAP) - SHALLOW_REFERENCE;
                        let x = if x >= 0.0 {
                            x
                        } else {
                            crate::classifier::SHALLOW_DRAIN * x
                        };
                        (c.shallow_sum() + x).max(0.0).min(p.cusum.shallow_decision)
                    } else {
                        0.0
                    };
                    let at_once = was && c.may_clear_at_once() && z <= -p.cusum.clear_margin;
                    let (next, shallow) = if at_once { (0.0, 0.0) } else { (next, shallow) };
                    let flag = if was {
                        next > 0.0 || shallow > 0.0
                    } else {
                        next >= p.cusum.flag_level() || shallow >= p.cusum.shallow_decision
                    };
                    let (next, shallow) = if was && !flag {
                        (0.0, 0.0)
                    } else {
                        (next, shallow)
                    };
                    assert_eq!(probe.sum(), f64::from(next as f32), "observe_zr's sum");
                    assert_eq!(
                        probe.shallow_sum(),
                        f64::from(shallow as f32),
                        "observe_zr's shallow sum"
                    );
                    assert_eq!(probe.is_straggler(), flag);
                    *c = probe;
                    t
                }
                None => entry.1.reset(),
            };
            s.set_straggler(entry.1.is_straggler());
            if entry.1.is_straggler() {
                stragglers.push(i);
                per_cohort[s.cohort() as usize] += 1;
            }
            if let Some(transition) = t {
                transitions.push(NodeTransition {
                    sample: i,
                    transition,
                });
            }
        }
        // Every live sample but free slots (the tick's general step skips those even when
        // a test marks them live).
        let mut k = BottomK::new(p.diagnostics_max_nodes);
        for (i, s) in samples.iter().enumerate() {
            if s.live() && !s.is_vacant() {
                k.offer(diagnostic_key(s), i);
            }
        }
        (stragglers, transitions, k.finish(), per_cohort)
    }

    /// Differential test: over random fleets and many ticks (nodes dropping, recovering,
    /// going idle, expiring, slots freed and reused, cohorts with and without quorum, the
    /// samples edited between ticks with their flags left as the last tick set them), the
    /// tick's classification (candidates only, carried list) equals the straightforward
    /// pass: straggler flags and lists, transitions, per-cohort counts, diagnostics and
    /// every classifier's state.
    #[test]
    fn candidate_classification_equals_the_full_pass() {
        let mut x: u64 = 0x1234_5678_9ABC_DEF1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut evidences = [false; 3];
        for case in 0..24u64 {
            let n = [5usize, 40, 300, 5000][(case % 4) as usize];
            let cohorts = case % 3 == 1;
            let mut p = params(cohorts);
            p.diagnostics_max_nodes = [1000, 3, 0, 50][(case / 4 % 4) as usize];
            if case % 5 == 4 {
                p.cusum.drift = 0.0;
            }
            if case % 7 == 3 {
                p.cusum.clear_holdoff = 0;
            }
            let names: &[&str] = if cohorts { &["", "a", "b"] } else { &[""] };
            let fresh = |r: u64, g: u32| {
                let score = 0.95 + ((r >> 8) % 600) as f64 / 10_000.0 - 0.03;
                let cohort = if cohorts { (r % 3) as CohortId } else { 0 };
                let mut s = sample(0, score, NodeState::Active, cohort, true);
                s.set_generation(g);
                s
            };
            let v: Vec<NodeSample> = (0..n).map(|_| fresh(next(), 1)).collect();
            let mut st = state_with(v, names);
            let mut reference: Vec<(u32, ShortfallCusum)> = Vec::new();
            let mut flagged_ever = 0;
            for tick in 0..40u64 {
                // Edits: drops (deep and shallow), recoveries, state changes, expiry, free
                // slots, reused slots, growth.
                let len = st.samples().len();
                for _ in 0..(len / 10 + 2) {
                    let r = next();
                    let i = (r % len as u64) as usize;
                    let s = &mut st.samples_mut()[i];
                    match (r >> 20) % 16 {
                        0..=3 => s.score = 0.5 + ((r >> 30) % 400) as f64 / 1000.0,
                        4..=7 => s.score = 0.95 + ((r >> 30) % 300) as f64 / 10_000.0,
                        8 => s.set_state(NodeState::Idle),
                        9 => s.set_state(NodeState::Active),
                        10 => s.set_live(false),
                        11 => s.set_live(true),
                        12 => *s = NodeSample::vacant(),
                        13 => {
                            let g = s.generation().wrapping_add(1);
                            *s = fresh(r, g);
                        }
                        14 => s.set_straggler(!s.straggler()),
                        _ => s.score = 0.0,
                    }
                }
                if tick % 13 == 12 {
                    let r = next();
                    st.samples_mut().push(fresh(r, 7));
                }
                let mut before = st.samples().to_vec();
                let t = st.compute(&p, 0, Timestamp::from_secs(10 * (tick + 1)));
                // The evidence the tick picked from the noise so far (both 1 and 2 occur:
                // the random drops leave lone deep samples).
                let mut rp = p;
                rp.cusum = p.cusum.with_evidence(t.evidence);
                evidences[usize::from(t.evidence.min(2))] = true;
                let (stragglers, transitions, diag, per_cohort) =
                    reference_classify(&mut before, &mut reference, &st.effective, &rp);
                assert_eq!(st.samples(), &before[..], "case {case} tick {tick}");
                assert_eq!(t.stragglers, stragglers, "case {case} tick {tick}");
                assert_eq!(t.transitions, transitions, "case {case} tick {tick}");
                assert_eq!(t.diagnostic_nodes, diag, "case {case} tick {tick}");
                assert_eq!(t.straggler_count, stragglers.len() as u64);
                assert_eq!(st.cohort_stragglers, per_cohort, "case {case} tick {tick}");
                for c in &t.cohorts {
                    let id = names.iter().position(|n| *n == c.name.as_ref()).unwrap();
                    assert_eq!(c.straggler_count, per_cohort[id]);
                }
                for (i, (mine, theirs)) in st.classifiers.iter().zip(&reference).enumerate() {
                    assert_eq!(mine.1, theirs.1, "case {case} tick {tick} slot {i}");
                    if !mine.1.at_rest() {
                        assert_eq!(mine.0, theirs.0, "case {case} tick {tick} slot {i}");
                        assert!(st.restless.contains(&i));
                    }
                }
                assert!(st.restless.windows(2).all(|w| w[0] < w[1]));
                flagged_ever += stragglers.len();
            }
            if n >= 40 {
                assert!(
                    flagged_ever > 0,
                    "case {case}: the general step was exercised"
                );
            }
        }
        assert_eq!(
            evidences,
            [false, true, true],
            "both evidence levels were exercised"
        );
    }

    #[test]
    fn diagnostic_selection_equals_a_full_sort() {
        let mut x: u64 = 12345;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let v: Vec<NodeSample> = (0..5000)
            .map(|i| {
                let r = next();
                let mut s = sample(
                    i,
                    (r % 1000) as f64 / 1000.0,
                    NodeState::Active,
                    0,
                    r % 7 != 0,
                );
                s.set_straggler(r % 97 == 0);
                if r % 11 == 0 {
                    s.set_state(NodeState::Idle);
                }
                s
            })
            .collect();
        for max in [1, 7, 100, 1000, 4999, 6000] {
            let mut all: Vec<usize> = (0..v.len()).filter(|&i| v[i].live()).collect();
            all.sort_by_key(|&i| {
                let s = &v[i];
                let rank = if s.straggler() {
                    0
                } else if s.state() == NodeState::Active {
                    1
                } else {
                    2
                };
                (rank, s.score.to_bits(), i)
            });
            all.truncate(max);
            assert_eq!(diagnostic_selection(&v, max), all, "max {max}");
        }
    }

    #[test]
    fn diagnostics_list_stragglers_first_then_lowest_scores() {
        let mut v: Vec<_> = (0..6)
            .map(|i| sample(i, 0.5 + 0.05 * i as f64, NodeState::Active, 0, true))
            .collect();
        v[4].set_straggler(true);
        v[1].set_state(NodeState::Idle);
        v[0].set_live(false);
        let sel = diagnostic_selection(&v, 3);
        assert_eq!(sel, vec![4, 2, 3]);
        assert_eq!(diagnostic_selection(&v, 100), vec![4, 2, 3, 5, 1]);
        assert!(diagnostic_selection(&v, 0).is_empty());
    }
}
