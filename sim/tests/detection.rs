//! The short detection-quality run as a test: the agent's own code in 64 (and 512) virtual
//! agents against the real Fleet processors and extension on a simulated clock. Asserts
//! detections, their time on the simulated clock, and no false positives; never wall-clock
//! times. `fleet-sim quality` runs the full set (scripts/detection-quality.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleet_sim::quality::{
    HEAVY_GOAL_PER_MILLION, HEAVY_NOISE, breakdown_scenario, bundled, episodes_scenario,
    episodes_scenario_with, healthy_scenario,
};
use fleet_sim::run::run_in_process;

const NOISE: &str = "[noise]\nsigma = 0.01\nbias_sigma = 0.003\ndip_probability = 0.005\n";

#[test]
fn a_15_percent_straggler_is_caught_and_cleared_by_fleet_and_agent_within_two_intervals() {
    for seed in 1..=2 {
        let r = run_in_process(&episodes_scenario(64, 0.15, 3, seed), |_| {}).unwrap();
        assert_eq!(r.rejected_points, 0);
        assert_eq!(r.push_errors, 0);
        for e in &r.episodes {
            let fleet = e.fleet_detect_s.expect("Fleet flags the straggler");
            let agent = e.agent_detect_s.expect("the agent flags itself");
            // Simulated seconds: one push interval (10 s) plus one Fleet tick.
            assert!(fleet <= 20.0, "Fleet took {fleet} s: {e:?}");
            assert!(agent <= 20.0, "agent took {agent} s: {e:?}");
            // Recovery within two push intervals of the episode's end.
            let fleet = e.fleet_recover_s.expect("Fleet clears the node");
            let agent = e.agent_recover_s.expect("the agent clears itself");
            assert!(fleet <= 20.0, "Fleet cleared after {fleet} s: {e:?}");
            assert!(agent <= 20.0, "agent cleared after {agent} s: {e:?}");
        }
        assert!(r.fleet.healthy_node_ticks > 10_000);
        assert_eq!(r.fleet.false_positive_node_ticks, 0, "{:?}", r.fleet);
        assert_eq!(r.agent.false_positive_node_ticks, 0, "{:?}", r.agent);
    }
}

#[test]
fn healthy_noise_flags_nobody() {
    let r = run_in_process(&healthy_scenario("healthy", 64, 30_000, NOISE, 9), |_| {}).unwrap();
    assert!(r.fleet.healthy_node_ticks >= 30_000, "{:?}", r.fleet);
    assert_eq!(r.fleet.false_positive_node_ticks, 0, "{:?}", r.fleet);
    assert_eq!(r.agent.false_positive_node_ticks, 0, "{:?}", r.agent);
}

/// Student-t noise with 3 degrees of freedom (the published heavy-tail row's noise): at most
/// 10 false-positive node-ticks per million on each side (the one-sample rule flagged
/// about 360 per million here), while a 15 % drop is still flagged within 30 s, median
/// within 20 s, by Fleet and by the agent.
#[test]
fn heavy_tailed_noise_stays_quiet_and_a_15_percent_drop_is_still_caught() {
    let r = run_in_process(
        &healthy_scenario("heavy", 64, 200_000, HEAVY_NOISE, 12),
        |_| {},
    )
    .unwrap();
    assert!(r.fleet.healthy_node_ticks >= 200_000, "{:?}", r.fleet);
    assert!(
        r.fleet.per_million() <= HEAVY_GOAL_PER_MILLION,
        "Fleet: {:?}",
        r.fleet
    );
    assert!(
        r.agent.per_million() <= HEAVY_GOAL_PER_MILLION,
        "agent: {:?}",
        r.agent
    );
    let (mut fleet, mut agent) = (Vec::new(), Vec::new());
    for seed in 1..=2 {
        let r = run_in_process(
            &episodes_scenario_with(64, 0.15, 3, seed, HEAVY_NOISE),
            |_| {},
        )
        .unwrap();
        for e in &r.episodes {
            fleet.push(e.fleet_detect_s.expect("Fleet flags the straggler"));
            agent.push(e.agent_detect_s.expect("the agent flags itself"));
        }
    }
    for (side, mut times) in [("Fleet", fleet), ("agent", agent)] {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        assert!(median <= 20.0, "{side}: {times:?}");
        assert!(times.iter().all(|t| *t <= 30.0), "{side}: {times:?}");
    }
}

/// A 5 % drop (about one floored sigma below Fleet's threshold, several of the cohort's
/// own spreads below its median): caught by Fleet and by the agent in every episode, the
/// median within 40 s, under Gaussian and heavy-tailed noise, and no healthy node flagged
/// in the Gaussian runs. (Before the shallow-drop rule: Fleet about 60 s, the agent about
/// 127 s, several episodes missed.)
#[test]
fn a_5_percent_drop_is_caught_within_40_s_under_gaussian_and_heavy_tailed_noise() {
    for (label, noise) in [("gaussian", NOISE), ("heavy", HEAVY_NOISE)] {
        let (mut fleet, mut agent) = (Vec::new(), Vec::new());
        for seed in 1..=2 {
            let r =
                run_in_process(&episodes_scenario_with(64, 0.05, 3, seed, noise), |_| {}).unwrap();
            for e in &r.episodes {
                fleet.push(e.fleet_detect_s.expect("Fleet flags the 5 % straggler"));
                agent.push(e.agent_detect_s.expect("the agent flags itself"));
                assert!(e.fleet_recover_s.is_some(), "{label}: Fleet clears {e:?}");
                assert!(
                    e.agent_recover_s.is_some(),
                    "{label}: the agent clears {e:?}"
                );
            }
            if label == "gaussian" {
                assert_eq!(r.fleet.false_positive_node_ticks, 0, "{:?}", r.fleet);
                assert_eq!(r.agent.false_positive_node_ticks, 0, "{:?}", r.agent);
            }
        }
        for (side, mut times) in [("Fleet", fleet), ("agent", agent)] {
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            assert!(median <= 40.0, "{label} {side}: {times:?}");
        }
    }
}

#[test]
fn a_third_of_the_cluster_straggling_is_still_told_apart() {
    let r = run_in_process(&breakdown_scenario(0.30, 21), |_| {}).unwrap();
    assert_eq!(r.episodes.len(), 19);
    assert_eq!(r.fleet_detected(), 19, "{:?}", r.episodes);
    assert_eq!(r.fleet.false_positive_node_ticks, 0);
}

/// Fleet only: the agents, classifying against the threshold Fleet holds during panic,
/// do flag themselves while the whole cluster is slow (measured in
/// docs/detection-quality.md; a known gap, not pinned here).
#[test]
fn a_cluster_wide_slowdown_enters_panic_mode_and_fleet_flags_nobody() {
    let r = run_in_process(&bundled("panic"), |_| {}).unwrap();
    assert!(r.panic_ticks > 0, "Fleet never entered panic mode");
    assert_eq!(r.fleet.false_positive_node_ticks, 0, "{:?}", r.fleet);
}

#[test]
fn churn_and_a_fleet_restart_do_not_hide_a_straggler_or_invent_one() {
    let r = run_in_process(&bundled("churn-restart"), |_| {}).unwrap();
    assert_eq!(r.fleet_detected(), 1, "{:?}", r.episodes);
    assert_eq!(r.agent_detected(), 1, "{:?}", r.episodes);
    assert_eq!(r.fleet.false_positive_node_ticks, 0, "{:?}", r.fleet);
    assert_eq!(r.agent.false_positive_node_ticks, 0, "{:?}", r.agent);
}

#[test]
fn a_periodic_late_nccl_rank_is_named_with_its_lag_and_period() {
    let r = run_in_process(&bundled("nccl"), |_| {}).unwrap();
    let x = &r.nccl[0];
    assert!(x.named_after_s.is_some(), "{x:?}");
    assert!(x.lag_within_10_percent, "{x:?}");
    assert_eq!(x.reported_period_steps, Some(14), "{x:?}");
    assert!(
        r.nccl_wrongly_named.is_empty(),
        "{:?}",
        r.nccl_wrongly_named
    );
}

#[test]
fn a_chronically_late_nccl_rank_is_named_with_its_lag() {
    let r = run_in_process(&fleet_sim::quality::nccl_chronic(), |_| {}).unwrap();
    let x = &r.nccl[0];
    assert!(x.lag_within_10_percent, "{x:?}");
    assert!(
        r.nccl_wrongly_named.is_empty(),
        "{:?}",
        r.nccl_wrongly_named
    );
}
