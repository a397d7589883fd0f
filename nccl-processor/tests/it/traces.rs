//! Generated traces at 8, 64 and 512 ranks, in both agent formats: the processor names
//! exactly the ranks with injected lag (chronic or periodic), with the lag within tolerance,
//! and names nobody on clean traces.
//!
//! The traces are seeded; `NCCL_TRACE_SEED=<n> cargo test -p nccl-processor --test traces`
//! runs the same scenarios on another seed (the defaults are not hand-picked: seeds 1 to 20
//! were run while developing).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::tracegen::{Format, Injected, MS, Pattern, Spec, T0, Trace, generate};
use component::config::{ConfigValue, parse_yaml};
use component::otlp::{ResourceMetrics, get_i64, number_points, point_value};
use component::{BatchContext, MetricFamily, Processor, Timestamp};
use ingero_wire::attr;
use nccl_processor::metrics::{CollectiveOutcome, Counts, DropReason};
use nccl_processor::{NcclPeerLagProcessor, create};

/// Feed every delivery at its arrival time, ticking every second of simulated time, and
/// keep ticking until everything open has expired. Returns every emitted lag point as
/// (emission time, rank, lag).
fn run(p: &NcclPeerLagProcessor, trace: &Trace) -> Vec<(u64, u32, f64)> {
    run_with_snapshot(p, trace, u64::MAX).0
}

/// [`run`], also returning the processor's counters as they were at simulated time `at`.
fn run_with_snapshot(
    p: &NcclPeerLagProcessor,
    trace: &Trace,
    at: u64,
) -> (Vec<(u64, u32, f64)>, Counts) {
    let mut snapshot = None;
    let tick = 1_000 * MS as u64;
    let mut next_tick = T0 + tick;
    let mut out = Vec::new();
    let collect = |now: u64, rms: Vec<ResourceMetrics>, out: &mut Vec<(u64, u32, f64)>| {
        for rm in rms {
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    for pt in number_points(m) {
                        let rank = get_i64(&pt.attributes, attr::NCCL_RANK).unwrap() as u32;
                        out.push((now, rank, point_value(pt).unwrap()));
                    }
                }
            }
        }
    };
    for d in &trace.deliveries {
        while next_tick <= d.arrival {
            collect(next_tick, p.tick(Timestamp(next_tick)), &mut out);
            if next_tick >= at && snapshot.is_none() {
                snapshot = Some(p.counts());
            }
            next_tick += tick;
        }
        let mut batch = vec![d.rm.clone()];
        p.process(
            &mut batch,
            &BatchContext {
                cluster_id: None,
                received_at: Timestamp(d.arrival),
                tenant: None,
            },
        );
    }
    let end = trace.last_step + 60_000 * MS as u64;
    while next_tick <= end {
        collect(next_tick, p.tick(Timestamp(next_tick)), &mut out);
        next_tick += tick;
    }
    (out, snapshot.unwrap_or_default())
}

#[derive(Debug, Clone, PartialEq)]
struct Named {
    lag_ms: f64,
    behind_ratio: f64,
    period: Option<u32>,
}

/// The ranks on `ingero_nccl_rank_lag_seconds` (lag converted back to ms), with their ratio
/// and period.
fn named(p: &NcclPeerLagProcessor) -> BTreeMap<u32, Named> {
    let mut fams: Vec<MetricFamily> = Vec::new();
    p.telemetry(&mut fams);
    let get = |name: &str| fams.iter().find(|f| f.name == name).unwrap().clone();
    let rank_of = |labels: &[(String, String)]| -> u32 {
        labels
            .iter()
            .find(|(k, _)| k == "rank")
            .unwrap()
            .1
            .parse()
            .unwrap()
    };
    let mut out = BTreeMap::new();
    for s in get("ingero_nccl_rank_lag_seconds").samples {
        out.insert(
            rank_of(&s.labels),
            Named {
                lag_ms: s.value * 1000.0,
                behind_ratio: 0.0,
                period: None,
            },
        );
    }
    for s in get("ingero_nccl_rank_behind_ratio").samples {
        out.get_mut(&rank_of(&s.labels)).unwrap().behind_ratio = s.value;
    }
    for s in get("ingero_nccl_rank_lag_period_steps").samples {
        out.get_mut(&rank_of(&s.labels)).unwrap().period = Some(s.value as u32);
    }
    out
}

/// The processor names exactly the injected ranks, each lag within `tol_ms`, periodic
/// ranks with their period.
fn assert_names_exactly(p: &NcclPeerLagProcessor, spec: &Spec, tol_ms: f64) {
    let got = named(p);
    let want: Vec<u32> = spec.injected.iter().map(|i| i.rank).collect();
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        want,
        "named ranks: {got:#?}"
    );
    for inj in &spec.injected {
        let n = &got[&inj.rank];
        assert!(
            (n.lag_ms - inj.lag_ms).abs() <= tol_ms,
            "rank {}: lag {} ms, injected {} ms (tolerance {tol_ms})",
            inj.rank,
            n.lag_ms,
            inj.lag_ms
        );
        assert_eq!(n.period, inj.expected_period(), "rank {} period", inj.rank);
        match inj.pattern {
            Pattern::Always => assert!(n.behind_ratio > 0.95, "{n:?}"),
            // Binomial spread over a 50-step window: sd <= 0.071, allow 3.5 sd.
            Pattern::Fraction(f) => assert!((n.behind_ratio - f).abs() < 0.25, "{n:?}"),
            Pattern::Every { period, .. } => {
                assert!(
                    (n.behind_ratio - 1.0 / f64::from(period)).abs() < 0.1,
                    "{n:?}"
                )
            }
        }
    }
}

/// Emitted lags of ranks that had no injected lag stay small (after `settle` ns).
fn assert_clean_lags(out: &[(u64, u32, f64)], spec: &Spec, settle: u64, max_ms: f64) {
    let injected: Vec<u32> = spec.injected.iter().map(|i| i.rank).collect();
    let mut n = 0;
    for (t, rank, lag) in out {
        if *t < settle || injected.contains(rank) {
            continue;
        }
        n += 1;
        assert!(lag.abs() <= max_ms, "rank {rank} at {t}: lag {lag} ms");
    }
    assert!(n > 0, "no lag points to check");
}

/// The scenario's seed, or `NCCL_TRACE_SEED` when set.
fn seed(default: u64) -> u64 {
    std::env::var("NCCL_TRACE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cfg(yaml: &str) -> ConfigValue {
    parse_yaml(yaml.as_bytes()).unwrap()
}

// ---------------------------------------------------------------- 8 ranks

fn spec8(injected: Vec<Injected>) -> Spec {
    Spec {
        steps: 200,
        step_ms: 400.0,
        step_jitter_ms: 50.0,
        entry_jitter_ms: 1.0,
        drop_prob: 0.005,
        injected,
        seed: seed(8),
        ..Spec::new(8, Format::OpSeqWall)
    }
}

#[test]
fn ranks_8_exact_names_the_chronic_rank() {
    let spec = spec8(vec![Injected {
        rank: 5,
        lag_ms: 290.0,
        pattern: Pattern::Fraction(0.82),
    }]);
    let trace = generate(&spec);
    let p = create(&ConfigValue::Null).unwrap();
    let out = run(&p, &trace);
    assert_names_exactly(&p, &spec, 3.0);
    assert_clean_lags(&out, &spec, 0, 8.0);
    let c = p.counts();
    assert_eq!(c.dropped(DropReason::Late), 0);
    assert_eq!(c.dropped(DropReason::Duplicate), 0);
    assert_eq!(c.collectives[CollectiveOutcome::UnderQuorum as usize], 0);
    assert_eq!(
        c.collectives[CollectiveOutcome::Complete as usize]
            + c.collectives[CollectiveOutcome::Partial as usize],
        200
    );
    let diag = p.diagnostics().unwrap();
    let summary = diag["clusters"][0]["communicators"][0]["ops"][0]["summaries"][0]
        .as_str()
        .unwrap()
        .to_string();
    // "rank 5 is 289 ms behind on ncclAllReduce of comm 0123456789abcdef, 40 of the last 50 steps"
    let ms: f64 = summary
        .strip_prefix("rank 5 is ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!((ms - 290.0).abs() <= 3.0, "{summary}");
    assert!(
        summary.contains(" ms behind on ncclAllReduce of comm 0123456789abcdef, ")
            && summary.ends_with(" of the last 50 steps"),
        "{summary}"
    );
}

#[test]
fn ranks_8_clean_trace_names_nobody() {
    let spec = spec8(Vec::new());
    let p = create(&ConfigValue::Null).unwrap();
    let out = run(&p, &generate(&spec));
    assert!(named(&p).is_empty(), "{:?}", named(&p));
    assert_clean_lags(&out, &spec, 0, 8.0);
}

#[test]
fn ranks_8_monotonic_single_node_needs_no_clock_refinement() {
    // One node holds every rank: its monotonic clock is shared, offsets cancel out.
    let spec = Spec {
        format: Format::IngeroMonotonic,
        step_ms: 3_500.0,
        step_jitter_ms: 400.0,
        straddle_window_ms: Some(1_000.0),
        ..spec8(vec![Injected {
            rank: 2,
            lag_ms: 120.0,
            pattern: Pattern::Every {
                period: 6,
                phase: 1,
            },
        }])
    };
    let p = create(&ConfigValue::Null).unwrap();
    let out = run(&p, &generate(&spec));
    assert_names_exactly(&p, &spec, 3.0);
    assert_clean_lags(&out, &spec, 0, 8.0);
}

// ---------------------------------------------------------------- 64 ranks

fn spec64(injected: Vec<Injected>) -> Spec {
    Spec {
        steps: 300,
        step_ms: 3_500.0,
        step_jitter_ms: 400.0,
        entry_jitter_ms: 2.0,
        drop_prob: 0.01,
        // A third of the collectives straddle a bucket boundary. (Straddling every one of
        // them would also make the collective spacing an exact multiple of the window, a
        // lattice on which a clock that is off by one collective looks consistent.)
        straddle_window_ms: Some(1_000.0),
        straddle_fraction: 0.35,
        injected,
        seed: seed(64),
        ..Spec::new(64, Format::IngeroMonotonic)
    }
}

fn injected64() -> Vec<Injected> {
    vec![
        Injected {
            rank: 13,
            lag_ms: 150.0,
            pattern: Pattern::Every {
                period: 7,
                phase: 3,
            },
        },
        Injected {
            rank: 41,
            lag_ms: 80.0,
            pattern: Pattern::Always,
        },
    ]
}

#[test]
fn ranks_64_ingero_monotonic_time_buckets_name_the_injected_ranks() {
    let spec = spec64(injected64());
    let trace = generate(&spec);
    let p = create(&ConfigValue::Null).unwrap();
    // Clock calibration (warm-up, arrival bounds tightening, refinement, settling) takes a
    // few minutes with 10 s exports; from then on every instance must reach its quorum.
    let settle = T0 + 480_000 * MS as u64;
    let (out, early) = run_with_snapshot(&p, &trace, settle);
    // Monotonic clocks: per-node offsets estimated from arrival, refined from the data.
    assert_names_exactly(&p, &spec, 8.0);
    // Lags are only emitted once a node's clock has settled, so every emitted lag is clean.
    assert_clean_lags(&out, &spec, 0, 15.0);
    let c = p.counts();
    assert_eq!(c.dropped(DropReason::Duplicate), 0);
    assert!(c.dropped(DropReason::ClockWarmup) > 0, "warm-up is visible");
    // Straddling collectives are not split: once the clocks have settled every instance
    // reaches its quorum (only the 1 % dropped points make some partial).
    let uq = CollectiveOutcome::UnderQuorum as usize;
    assert_eq!(
        c.collectives[uq], early.collectives[uq],
        "{:?}",
        c.collectives
    );
    let done = c.collectives[CollectiveOutcome::Complete as usize]
        + c.collectives[CollectiveOutcome::Partial as usize];
    assert!(done >= 300 - 140, "{:?}", c.collectives);
}

#[test]
fn ranks_64_clean_monotonic_trace_names_nobody() {
    let spec = spec64(Vec::new());
    let p = create(&ConfigValue::Null).unwrap();
    let out = run(&p, &generate(&spec));
    assert!(named(&p).is_empty(), "{:?}", named(&p));
    assert_clean_lags(&out, &spec, 0, 15.0);
}

#[test]
fn ranks_64_skew_tolerance_keeps_straddling_collectives_whole() {
    // Wall clocks, no op_seq, every collective straddles a 1 s boundary.
    let spec = Spec {
        format: Format::WallNoSeq,
        drop_prob: 0.0,
        steps: 120,
        straddle_fraction: 1.0,
        ..spec64(injected64())
    };
    let trace = generate(&spec);
    let with = create(&ConfigValue::Null).unwrap();
    run(&with, &trace);
    let c = with.counts();
    assert_eq!(c.collectives[CollectiveOutcome::Complete as usize], 120);
    assert_eq!(c.collectives[CollectiveOutcome::UnderQuorum as usize], 0);
    assert_names_exactly(&with, &spec, 4.0);

    let without = create(&cfg("alignment: {skew_tolerance_fraction: 0}")).unwrap();
    run(&without, &trace);
    let c = without.counts();
    assert!(
        c.collectives[CollectiveOutcome::Complete as usize] < 12,
        "without tolerance the collectives split: {:?}",
        c.collectives
    );
}

// ---------------------------------------------------------------- 512 ranks

fn spec512(format: Format, injected: Vec<Injected>) -> Spec {
    Spec {
        steps: 120,
        step_ms: 500.0,
        step_jitter_ms: 100.0,
        entry_jitter_ms: 1.0,
        clock_error_ms: 1.0,
        drop_prob: 0.005,
        injected,
        seed: seed(512),
        with_bytes: false,
        ..Spec::new(512, format)
    }
}

fn injected512() -> Vec<Injected> {
    vec![
        Injected {
            rank: 7,
            lag_ms: 60.0,
            pattern: Pattern::Every {
                period: 5,
                phase: 2,
            },
        },
        Injected {
            rank: 300,
            lag_ms: 120.0,
            pattern: Pattern::Fraction(0.7),
        },
        Injected {
            rank: 511,
            lag_ms: 200.0,
            pattern: Pattern::Always,
        },
    ]
}

#[test]
fn ranks_512_exact_names_the_injected_ranks() {
    let spec = spec512(Format::OpSeqWall, injected512());
    let p = create(&ConfigValue::Null).unwrap();
    let out = run(&p, &generate(&spec));
    assert_names_exactly(&p, &spec, 4.0);
    assert_clean_lags(&out, &spec, 0, 8.0);
    assert_eq!(
        p.counts().collectives[CollectiveOutcome::UnderQuorum as usize],
        0
    );
}

#[test]
fn ranks_512_clean_trace_names_nobody() {
    let spec = spec512(Format::OpSeqWall, Vec::new());
    let p = create(&ConfigValue::Null).unwrap();
    let out = run(&p, &generate(&spec));
    assert!(named(&p).is_empty(), "{:?}", named(&p));
    assert_clean_lags(&out, &spec, 0, 8.0);
}

#[test]
fn ranks_512_ingero_monotonic_names_the_injected_ranks() {
    let spec = Spec {
        steps: 250,
        step_ms: 3_500.0,
        step_jitter_ms: 400.0,
        straddle_window_ms: Some(1_000.0),
        straddle_fraction: 0.35,
        ..spec512(Format::IngeroMonotonic, injected512())
    };
    let p = create(&ConfigValue::Null).unwrap();
    let out = run(&p, &generate(&spec));
    assert_names_exactly(&p, &spec, 8.0);
    assert_clean_lags(&out, &spec, 0, 15.0);
}

#[test]
fn request_cluster_is_used_when_the_trace_names_none() {
    let spec = Spec {
        cluster: "",
        steps: 30,
        ..spec8(Vec::new())
    };
    let trace = generate(&spec);
    let p = create(&ConfigValue::Null).unwrap();
    for d in &trace.deliveries {
        p.process(
            &mut vec![d.rm.clone()],
            &BatchContext {
                cluster_id: Some(Arc::from("from-query")),
                received_at: Timestamp(d.arrival),
                tenant: None,
            },
        );
    }
    let diag = p.diagnostics().unwrap();
    assert_eq!(diag["clusters"][0]["cluster_id"], "from-query");
}
