//! The in-process run: every virtual agent and the real Fleet components on one simulated
//! clock (see [`crate::inproc`]).
//!
//! Time moves in steps of a tenth of the push interval. Agents are spread evenly over the
//! ten phases of an interval (as real agents, started at different moments, are); the
//! `ingero` processor ticks once per push interval (its factory's tick interval), the
//! `nccl_peer_lag` processor every second (or every step when steps are longer).

use std::collections::HashMap;
use std::time::Duration;

use component::Timestamp;
use ingero_agent_core::health::core::CoreConfig;
use ingero_agent_core::payload::Identity;
use ingero_processor::IngeroConfig;

use crate::agent::{PushKind, VirtualAgent};
use crate::collective::Communicator;
use crate::inproc::InProcessFleet;
use crate::record::{Event, Recorder, Report};
use crate::scenario::Scenario;
use crate::world::World;

/// Phases per push interval.
pub const SLOTS: u32 = 10;
/// Wall-clock time of simulated time zero (any fixed instant; runs are reproducible).
pub const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

/// Node id of node `i`.
pub fn node_name(i: usize) -> String {
    format!("gpu-node-{i:05}")
}

/// Fleet's `processors.ingero` config for a scenario: the defaults with the scenario's push
/// interval and per-cgroup cohorts when the scenario uses cgroup hashes, otherwise the
/// defaults.
pub fn fleet_config(s: &Scenario) -> IngeroConfig {
    let mut cohorts = IngeroConfig::default().cohorts;
    cohorts.enabled = s.cohorts.iter().any(|c| !c.cgroup_hash.is_empty());
    IngeroConfig {
        push_interval: s.push_interval,
        cohorts,
        ..IngeroConfig::default()
    }
}

/// The identities of a scenario's agents, node by node.
pub fn identities(s: &Scenario) -> Vec<Identity> {
    let mut out = Vec::with_capacity(s.total_nodes());
    for c in &s.cohorts {
        for _ in 0..c.nodes {
            out.push(Identity {
                node_id: node_name(out.len()),
                cluster_id: s.cluster_id.clone(),
                world_size: 0,
                node_rank: 0,
                workload_type: "training".into(),
                cgroup_path_hash: c.cgroup_hash.clone(),
            });
        }
    }
    out
}

/// The agents' health core config for a scenario.
pub fn core_config(s: &Scenario) -> CoreConfig {
    CoreConfig::default().with_warmup(s.warmup_samples)
}

/// The communicator of a scenario, if it has one.
pub fn communicator(s: &Scenario) -> Option<Communicator> {
    let n = s.nccl.as_ref()?;
    let ci = s.cohort_index(n.cohort.as_deref())?;
    let first: usize = s.cohorts[..ci].iter().map(|c| c.nodes).sum();
    Some(Communicator::new(n, first, s.seed))
}

/// Settings a run may change from the defaults (the trade-off table's rule settings).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tuning {
    /// Fleet's `classifier.evidence` (default: 0, picked from the noise).
    pub fleet_evidence: Option<u32>,
    /// The agents' `cusum` evidence (default: the agent's).
    pub agent_evidence: Option<u8>,
    /// Fleet's `classifier.shallow_decision` and the agents' (0: the shallow-drop rule off;
    /// default: on at its default level).
    pub shallow_decision: Option<f64>,
}

/// Run a scenario in process; `on_event` sees detections and false positives as they
/// happen (simulated time).
pub fn run_in_process(s: &Scenario, on_event: impl FnMut(&Event)) -> Result<Report, String> {
    run_in_process_tuned(s, Tuning::default(), on_event)
}

/// [`run_in_process`] with Fleet's and the agents' classifier evidence set.
pub fn run_in_process_tuned(
    s: &Scenario,
    tuning: Tuning,
    mut on_event: impl FnMut(&Event),
) -> Result<Report, String> {
    let mut world = World::new(s)?;
    let n = world.len();
    let ids = identities(s);
    let index: HashMap<String, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.node_id.clone(), i))
        .collect();
    let mut core_cfg = core_config(s);
    if let Some(e) = tuning.agent_evidence {
        core_cfg.evidence = e;
    }
    if let Some(d) = tuning.shallow_decision {
        core_cfg.shallow_decision = d;
    }
    let mut cfg = fleet_config(s);
    if let Some(e) = tuning.fleet_evidence {
        cfg.classifier.evidence = e;
    }
    if let Some(d) = tuning.shallow_decision {
        cfg.classifier.shallow_decision = d;
    }
    let mut fleet = InProcessFleet::new(cfg.clone())?;
    let mut rec = Recorder::new(s, world.timeline.clone(), "in-process");
    let mut comm = communicator(s);
    let mut restarts: Vec<Duration> = s.fleet_restarts.iter().map(|r| r.at).collect();
    restarts.sort();
    restarts.reverse();

    let step = s.push_interval / SLOTS;
    if step.is_zero() {
        return Err("push_interval is too short to simulate".into());
    }
    let mut by_slot: Vec<Vec<usize>> = vec![Vec::new(); SLOTS as usize];
    for i in 0..n {
        by_slot[i * SLOTS as usize / n.max(1)].push(i);
    }
    let nccl_every = (Duration::from_secs(1).as_nanos() / step.as_nanos()).max(1) as u64;
    let steps = (s.duration.as_nanos() / step.as_nanos()) as u64;
    let mut agents: Vec<Option<VirtualAgent>> = (0..n).map(|_| None).collect();
    let mut flagged = vec![false; n];

    for k in 1..=steps {
        let t = step * u32::try_from(k).map_err(|_| "run too long".to_string())?;
        let now = T0.saturating_add(t);
        if restarts.last().is_some_and(|&r| r <= t) {
            restarts.pop();
            fleet = InProcessFleet::new(cfg.clone())?;
        }
        if let Some(c) = comm.as_mut() {
            let tl = &world.timeline;
            for (node, p) in c.steps_until(t, T0, |node| !tl.is_down(node, t)) {
                if let Some(a) = agents.get_mut(node).and_then(Option::as_mut) {
                    a.record_nccl(p);
                }
            }
        }
        for &i in &by_slot[(k % u64::from(SLOTS)) as usize] {
            if world.timeline.is_down(i, t) {
                // The agent is gone; a fresh one (warm-up again) starts when it is back.
                agents[i] = None;
                continue;
            }
            let (raw, launches) = world.sample(i, t);
            let agent =
                agents[i].get_or_insert_with(|| VirtualAgent::new(ids[i].clone(), core_cfg));
            let (_outcome, out) = agent.tick(raw, launches, now);
            for o in out {
                let (answer, rejected) = fleet.push(&s.cluster_id, o.request, now);
                rec.count_pushes(1, u64::from(!answer.ok), rejected);
                if o.kind == PushKind::Health {
                    agent.answer(&answer, now);
                }
            }
            rec.agent_tick(i, t, agent.is_straggler());
        }
        if k % nccl_every == 0 {
            fleet.tick_nccl(now);
        }
        if k % u64::from(SLOTS) == 0 {
            flagged.iter_mut().for_each(|f| *f = false);
            for id in fleet.tick_ingero(now) {
                if let Some(&i) = index.get(&id) {
                    flagged[i] = true;
                }
            }
            let view = fleet.cluster_view(&s.cluster_id);
            rec.fleet_tick(t, &flagged, view.panic);
            rec.quorum(t, view.quorum_met, view.threshold);
            if comm.is_some() {
                rec.nccl_named(t, &fleet.named_ranks());
            }
        }
        for e in rec.take_events() {
            on_event(&e);
        }
    }
    Ok(rec.finish(s.duration.as_secs_f64()))
}
