//! Detection quality of the server-side classifier, end to end through the processor with a
//! fake clock and a seeded RNG.
//!
//! Simulation: 64 nodes push every 10 s. Each node-tick score is
//! `base + N(0, noise)`; with probability `DIP_PROBABILITY` the sample is instead scaled
//! down by a one-tick dip drawn uniformly from `DIP_RANGE` (a GC pause, a checkpoint write).
//! After `HEALTHY_TICKS` ticks one node drops to `base * (1 - drop) + N(0, noise)` for good.
//! "Ticks to detect" counts dropped samples up to and including the tick that flags it
//! (1 = flagged on its first dropped sample). A false positive is any healthy node-tick
//! flagged as a straggler (the straggler before its drop counts as healthy).
//!
//! The README table comes from the ignored test `detection_table`:
//! `cargo test -p ingero-processor --release --test detection -- --ignored --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{ctx, health_only};
use component::otlp;
use component::{
    ComponentId, Extension, Host, ManualClock, Processor, StartError, StaticHost, Timestamp,
};
use ingero_processor::IngeroProcessor;
use ingero_processor::config::IngeroConfig;
use ingero_wire::resource;
use ingero_wire::{ClusterReport, ThresholdSink};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use std::sync::Arc;

const NODES: usize = 64;
const BASE: f64 = 0.95;
const HEALTHY_TICKS: usize = 1_600; // 64 * 1600 = 102,400 healthy node-ticks before the drop
const POST_TICKS: usize = 30;
const DIP_PROBABILITY: f64 = 0.005;
const DIP_RANGE: (f64, f64) = (0.02, 0.05);
const STRAGGLER: usize = 17;

#[derive(Debug, Clone, Copy)]
struct Scenario {
    noise: f64,
    drop: f64,
    seed: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Outcome {
    ticks_to_detect: Option<usize>,
    healthy_node_ticks: u64,
    false_positive_node_ticks: u64,
    false_positive_events: u64,
    /// Healthy node-ticks below the published threshold: what a one-sample rule flags.
    naive_one_sample_flags: u64,
    dips: u64,
}

/// Keeps only the latest published cluster-wide threshold.
#[derive(Default)]
struct LastThreshold(parking_lot::Mutex<Option<f64>>);

impl ThresholdSink for LastThreshold {
    fn publish(&self, reports: Vec<ClusterReport>, _at: Timestamp) {
        *self.0.lock() = reports.first().and_then(|r| r.value).map(|v| v.threshold());
    }
}

struct LastThresholdExt(Arc<LastThreshold>);

impl Extension for LastThresholdExt {
    fn start(&self, _: &dyn Host) -> Result<(), StartError> {
        Ok(())
    }
    fn shutdown(&self) {}
    fn provides(
        &self,
        interface: std::any::TypeId,
    ) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        component::provide::<Arc<dyn ThresholdSink>>(interface, || self.0.clone())
    }
}

fn node_name(i: usize) -> String {
    format!("gpu-node-{i:02}")
}

fn run(s: Scenario) -> Outcome {
    let p = IngeroProcessor::new(IngeroConfig::default()).unwrap();
    let sink = Arc::new(LastThreshold::default());
    let host = StaticHost {
        extensions: vec![(
            ComponentId::new("ingero_threshold"),
            Arc::new(LastThresholdExt(sink.clone())) as Arc<dyn Extension>,
        )],
    };
    p.start(&host).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    let mut rng = StdRng::seed_from_u64(s.seed);
    let noise = Normal::new(0.0, s.noise).unwrap();
    let names: Vec<String> = (0..NODES).map(node_name).collect();
    let straggler_name = names[STRAGGLER].clone();
    let mut out = Outcome::default();
    let mut flagged_before: HashSet<String> = HashSet::new();

    for tick in 0..HEALTHY_TICKS + POST_TICKS {
        let now = clock.advance(Duration::from_secs(10));
        let dropped = tick >= HEALTHY_TICKS;
        // Agents classify this tick's score against the threshold published last tick.
        let published = *sink.0.lock();
        for (i, name) in names.iter().enumerate() {
            let mut score = BASE + noise.sample(&mut rng);
            if i == STRAGGLER && dropped {
                score = BASE * (1.0 - s.drop) + noise.sample(&mut rng);
            } else if rng.random::<f64>() < DIP_PROBABILITY {
                score *= 1.0 - rng.random_range(DIP_RANGE.0..DIP_RANGE.1);
                out.dips += 1;
            }
            let score = score.clamp(0.0, 1.0);
            if published.is_some_and(|t| score < t) && !(i == STRAGGLER && dropped) {
                out.naive_one_sample_flags += 1;
            }
            let o = p.process(&mut vec![health_only("sim", name, score)], &ctx(None, now));
            assert_eq!(o.rejected_points, 0);
        }
        let flagged: HashSet<String> = p
            .tick(now)
            .iter()
            .filter_map(|rm| otlp::get_str(otlp::resource_attrs(rm), resource::NODE_ID))
            .map(str::to_string)
            .collect();
        for name in &flagged {
            let is_target = *name == straggler_name && dropped;
            if is_target {
                if out.ticks_to_detect.is_none() {
                    out.ticks_to_detect = Some(tick - HEALTHY_TICKS + 1);
                }
            } else {
                out.false_positive_node_ticks += 1;
                if !flagged_before.contains(name) {
                    out.false_positive_events += 1;
                }
            }
        }
        out.healthy_node_ticks += if dropped {
            NODES as u64 - 1
        } else {
            NODES as u64
        };
        flagged_before = flagged;
    }
    out
}

#[test]
fn a_15_percent_drop_is_flagged_within_two_ticks_with_no_false_positive() {
    for seed in [1, 2, 3] {
        let o = run(Scenario {
            noise: 0.01,
            drop: 0.15,
            seed,
        });
        assert!(o.healthy_node_ticks >= 100_000, "{o:?}");
        assert!(o.dips > 300, "the dips really happen: {o:?}");
        let t = o.ticks_to_detect.expect("detected");
        assert!(t <= 2, "seed {seed}: detected after {t} ticks");
        assert_eq!(o.false_positive_node_ticks, 0, "seed {seed}: {o:?}");
    }
}

#[test]
fn noise_alone_would_trip_a_one_sample_rule_but_not_the_classifier() {
    // sigma 0.02 is above the MAD floor, so the threshold sits k = 2 robust sigmas below
    // the median and about 2 % of healthy samples fall below it.
    let o = run(Scenario {
        noise: 0.02,
        drop: 0.15,
        seed: 5,
    });
    let rate = o.naive_one_sample_flags as f64 / o.healthy_node_ticks as f64;
    assert!(rate > 0.01 && rate < 0.05, "{o:?}");
    assert_eq!(o.false_positive_node_ticks, 0, "{o:?}");
}

#[test]
fn noisier_fleets_still_flag_a_15_percent_drop_within_two_ticks() {
    // sigma 0.02: the drop is ~5 sigma below the threshold.
    let o = run(Scenario {
        noise: 0.02,
        drop: 0.15,
        seed: 7,
    });
    assert!(o.ticks_to_detect.is_some_and(|t| t <= 2), "{o:?}");
    assert_eq!(o.false_positive_node_ticks, 0, "{o:?}");
}

#[test]
fn a_drop_inside_the_noise_is_not_flagged() {
    // A 1 % drop at sigma 0.01 is indistinguishable from noise: the classifier must not
    // claim it (and must not flag anybody else).
    let o = run(Scenario {
        noise: 0.01,
        drop: 0.01,
        seed: 11,
    });
    assert_eq!(o.ticks_to_detect, None, "{o:?}");
    assert_eq!(o.false_positive_node_ticks, 0, "{o:?}");
}

/// Regenerates the README table (release build recommended).
#[test]
#[ignore = "generates the README detection table; run with --ignored --nocapture"]
fn detection_table() {
    const SEEDS: [u64; 5] = [101, 102, 103, 104, 105];
    println!(
        "| noise sigma | drop | ticks to detect (median / max over {} seeds) | detected within 2 ticks | false-positive node-ticks / healthy node-ticks | false-positive events | one-sample rule: healthy node-ticks below threshold |",
        SEEDS.len()
    );
    println!("|---|---|---|---|---|---|---|");
    for noise in [0.005, 0.01, 0.02, 0.03] {
        for drop in [0.05, 0.10, 0.15, 0.25] {
            let mut ttd = Vec::new();
            let mut within2 = 0;
            let (mut fp, mut healthy, mut events, mut naive) = (0u64, 0u64, 0u64, 0u64);
            for seed in SEEDS {
                let o = run(Scenario { noise, drop, seed });
                match o.ticks_to_detect {
                    Some(t) => {
                        ttd.push(t);
                        if t <= 2 {
                            within2 += 1;
                        }
                    }
                    None => ttd.push(usize::MAX),
                }
                fp += o.false_positive_node_ticks;
                healthy += o.healthy_node_ticks;
                events += o.false_positive_events;
                naive += o.naive_one_sample_flags;
            }
            ttd.sort_unstable();
            let fmt = |t: usize| {
                if t == usize::MAX {
                    format!(">{POST_TICKS}")
                } else {
                    t.to_string()
                }
            };
            println!(
                "| {noise} | {:.0} % | {} / {} | {within2}/{} | {fp} / {healthy} | {events} | {naive} ({:.2} %) |",
                drop * 100.0,
                fmt(ttd[ttd.len() / 2]),
                fmt(ttd[ttd.len() - 1]),
                SEEDS.len(),
                100.0 * naive as f64 / healthy as f64
            );
        }
    }
}
