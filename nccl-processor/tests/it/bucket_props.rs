//! Property tests of time-bucket assignment with skew tolerance (`align::TimeBuckets`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};

use component::Timestamp;
use nccl_processor::align::{BucketRule, Budget, Entry, Placed, TimeBuckets};
use proptest::prelude::*;

fn budget() -> Budget {
    Budget {
        max_open_instances: usize::MAX,
        max_buffered_points: usize::MAX,
        ..Budget::default()
    }
}

fn rule(window: i64, frac: f64) -> BucketRule {
    BucketRule {
        window_ns: window,
        skew_ns: ((window as f64) * frac) as i64,
    }
}

/// Seeded Fisher-Yates so a failing case reproduces from proptest's shrunk inputs.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

/// Which bucket holds (rank, t) after all inserts.
fn locate(tb: &TimeBuckets) -> HashMap<(u32, i64), i64> {
    let mut at = HashMap::new();
    for (k, inst) in &tb.open {
        for e in &inst.entries {
            at.insert((e.rank, e.t), *k);
        }
    }
    at
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the points and their order: no bucket holds a rank twice, a point sits in
    /// its natural bucket or (only from the straddle zone) the one before, nothing is lost,
    /// and the budget matches what is held.
    #[test]
    fn assignment_invariants_hold_for_any_input(
        window in 10i64..10_000,
        frac in 0.0f64..0.95,
        nranks in 2u32..16,
        raw in prop::collection::vec((0u32..16, 0i64..100_000), 1..200),
    ) {
        let r = rule(window, frac);
        let mut tb = TimeBuckets::default();
        let mut b = budget();
        let mut added = 0usize;
        let mut dup = 0usize;
        for (rank, t) in raw {
            let e = Entry::wall(rank % nranks, t);
            match tb.insert(r, 0, nranks, e, Timestamp(1), &mut b) {
                Placed::Added { .. } => added += 1,
                Placed::Duplicate => dup += 1,
                other => prop_assert!(false, "unexpected {other:?}"),
            }
        }
        let mut held = 0usize;
        for (k, inst) in &tb.open {
            prop_assert!(!inst.is_empty());
            let ranks: HashSet<u32> = inst.entries.iter().map(|e| e.rank).collect();
            prop_assert_eq!(ranks.len(), inst.len(), "rank twice in bucket {}", k);
            for e in &inst.entries {
                prop_assert!(inst.has(e.rank));
                let nat = r.natural_key(e.t);
                prop_assert!(*k == nat || (*k == nat - 1 && r.in_zone(e.t, nat)),
                    "t={} natural={} placed={}", e.t, nat, k);
            }
            held += inst.len();
        }
        prop_assert_eq!(held, added);
        prop_assert_eq!(b.buffered_points, held);
        prop_assert_eq!(b.open_instances, tb.open.len());
        let _ = dup;
    }

    /// One collective whose entries span less than the skew tolerance lands in exactly one
    /// bucket, whatever the order its ranks' points arrive in (this is the split the Go
    /// processor's SkewToleranceFraction fixed, plus the arrival-order case).
    #[test]
    fn one_collective_is_never_split(
        window in 100i64..10_000,
        frac in 0.05f64..0.95,
        nranks in 2u32..64,
        start in 0i64..1_000_000,
        spread_frac in 0.0f64..1.0,
        seed in any::<u64>(),
    ) {
        let r = rule(window, frac);
        let spread = ((r.skew_ns - 1).max(0) as f64 * spread_frac) as i64;
        let mut pts: Vec<Entry> = (0..nranks)
            .map(|rank| {
                // Spread the ranks over [start, start + spread], including both ends.
                let off = if nranks > 1 { spread * i64::from(rank) / i64::from(nranks - 1) } else { 0 };
                Entry::wall(rank, start + off)
            })
            .collect();
        shuffle(&mut pts, seed);
        let mut tb = TimeBuckets::default();
        let mut b = budget();
        for e in pts {
            let placed = tb.insert(r, 0, nranks, e, Timestamp(1), &mut b);
            prop_assert!(matches!(placed, Placed::Added { .. }), "{placed:?}");
        }
        prop_assert_eq!(tb.open.len(), 1, "split into {:?}", tb.open.keys().collect::<Vec<_>>());
        prop_assert!(tb.open.values().next().unwrap().is_complete());
    }

    /// Several collectives, starting at least three windows apart, each spanning less than
    /// the skew tolerance, delivered interleaved in any order: each one ends up alone and
    /// whole in its own bucket.
    #[test]
    fn separated_collectives_never_mix(
        window in 100i64..5_000,
        frac in 0.05f64..0.95,
        nranks in 2u32..24,
        gaps in prop::collection::vec(0i64..5_000, 2..8),
        spreads in prop::collection::vec(0.0f64..1.0, 8),
        jitter_seed in any::<u64>(),
        order_seed in any::<u64>(),
    ) {
        let r = rule(window, frac);
        let mut pts = Vec::new();
        let mut start = 10 * window;
        let mut owner = HashMap::new();
        for (c, gap) in gaps.iter().enumerate() {
            let spread = ((r.skew_ns - 1).max(0) as f64 * spreads[c]) as i64;
            let mut s = jitter_seed ^ (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for rank in 0..nranks {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let off = if spread > 0 { ((s >> 33) as i64) % (spread + 1) } else { 0 };
                let e = Entry::wall(rank, start + off);
                owner.insert((rank, e.t), c);
                pts.push(e);
            }
            start += 3 * window + gap;
        }
        shuffle(&mut pts, order_seed);
        let mut tb = TimeBuckets::default();
        let mut b = budget();
        for e in pts {
            let placed = tb.insert(r, 0, nranks, e, Timestamp(1), &mut b);
            prop_assert!(matches!(placed, Placed::Added { .. }), "{placed:?}");
        }
        prop_assert_eq!(tb.open.len(), gaps.len());
        let at = locate(&tb);
        let mut bucket_of: HashMap<usize, i64> = HashMap::new();
        for ((rank, t), k) in at {
            let c = owner[&(rank, t)];
            let first = *bucket_of.entry(c).or_insert(k);
            prop_assert_eq!(first, k, "collective {} split", c);
        }
        let distinct: HashSet<i64> = bucket_of.values().copied().collect();
        prop_assert_eq!(distinct.len(), gaps.len());
    }

    /// The skew rule respects emission: once bucket k-1 is closed, a straddling point goes to
    /// its own bucket (or is late if that was closed too), never into the emitted one.
    #[test]
    fn closed_buckets_are_never_joined(
        window in 100i64..5_000,
        frac in 0.05f64..0.95,
        t_into in 0.0f64..1.0,
    ) {
        let r = rule(window, frac);
        let mut tb = TimeBuckets::default();
        let mut b = budget();
        let k = 7i64;
        tb.insert(r, 0, 4, Entry::wall(0, k * window - 1), Timestamp(1), &mut b);
        tb.take(k - 1, &mut b).unwrap();
        let t = k * window + ((r.skew_ns as f64) * t_into) as i64;
        let placed = tb.insert(r, 0, 4, Entry::wall(1, t), Timestamp(1), &mut b);
        prop_assert_eq!(placed, Placed::Added { key: r.natural_key(t) });
        prop_assert!(tb.get(k - 1).is_none());
    }
}
