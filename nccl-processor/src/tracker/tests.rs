//! Unit tests of the cluster tracker (alignment, completion, clocks, stats wiring).

use super::*;
use crate::config::NcclConfig;

const MS: u64 = 1_000_000;
const T0: u64 = 1_760_000_000_000_000_000;

fn settings() -> Settings {
    Settings::new(&NcclConfig::default())
}

fn pt(rank: u32, nranks: u32, seq: i64, ts: u64) -> NcclPoint {
    NcclPoint {
        op: 0,
        comm: 0xc0,
        rank,
        nranks,
        ts,
        op_seq: Some(seq),
    }
}

fn node(i: u32) -> Arc<str> {
    Arc::from(format!("node-{i}").as_str())
}

#[test]
fn exact_instance_emits_when_all_ranks_arrive() {
    let s = settings();
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let arrival = Timestamp(T0 + 1_000 * MS);
    for r in 0..4u32 {
        let late = if r == 2 { 150 * MS } else { 0 };
        t.ingest(
            Some(&node(r)),
            &[pt(r, 4, 7, T0 + u64::from(r) * MS + late)],
            arrival,
            &s,
            &mut c,
        );
    }
    assert_eq!(c.collectives[CollectiveOutcome::Complete as usize], 1);
    assert_eq!(t.open_instances(), 0);
    let out = t.drain();
    assert_eq!(out.len(), 4);
    let r2 = out.iter().find(|r| r.rank == 2).unwrap();
    // Entries 0, 1, 152, 3 ms: median 2 ms -> rank 2 lags 150 ms.
    assert!((r2.lag_ms - 150.0).abs() < 1e-9, "{r2:?}");
    assert_eq!(r2.op_seq, Some(7));
    assert_eq!(r2.node.as_deref(), Some("node-2"));
    assert!(r2.wall_clock);
    assert_eq!(r2.time_ns, Some(T0 + 2 * MS));
    // A straggler's point after emission is late, not a new instance.
    t.ingest(None, &[pt(1, 4, 7, T0)], arrival, &s, &mut c);
    assert_eq!(c.dropped(DropReason::Late), 1);
    assert_eq!(t.open_instances(), 0);
}

#[test]
fn incomplete_instance_waits_for_grace_then_needs_quorum() {
    let s = settings();
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let arrival = Timestamp(T0);
    // seq 1: 6 of 8 ranks (quorum 6); seq 2: 5 of 8.
    for r in 0..6 {
        t.ingest(None, &[pt(r, 8, 1, T0 + u64::from(r))], arrival, &s, &mut c);
    }
    for r in 0..5 {
        t.ingest(None, &[pt(r, 8, 2, T0 + u64::from(r))], arrival, &s, &mut c);
    }
    t.tick(Timestamp(T0 + s.grace_ns - 1), &s, &mut c);
    assert_eq!(t.open_instances(), 2);
    assert!(t.drain().is_empty());
    t.tick(Timestamp(T0 + s.grace_ns), &s, &mut c);
    assert_eq!(t.open_instances(), 0);
    assert_eq!(t.buffered_points(), 0);
    let out = t.drain();
    assert_eq!(out.len(), 6);
    assert!(out.iter().all(|r| r.op_seq == Some(1)));
    assert_eq!(c.collectives[CollectiveOutcome::Partial as usize], 1);
    assert_eq!(c.collectives[CollectiveOutcome::UnderQuorum as usize], 1);
    assert_eq!(c.dropped(DropReason::UnderQuorum), 5);
}

#[test]
fn nranks_disagreement_and_comm_cap_are_counted() {
    let mut cfg = NcclConfig::default();
    cfg.limits.max_comms_per_cluster = 1;
    let s = Settings::new(&cfg);
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let a = Timestamp(T0);
    t.ingest(None, &[pt(0, 4, 1, T0)], a, &s, &mut c);
    t.ingest(None, &[pt(1, 5, 1, T0)], a, &s, &mut c);
    let mut other = pt(0, 4, 1, T0);
    other.comm = 0xc1;
    t.ingest(None, &[other], a, &s, &mut c);
    assert_eq!(c.dropped(DropReason::Invalid), 1);
    assert_eq!(c.dropped(DropReason::CapComms), 1);
    assert_eq!(t.tracked_comms(), 1);
    assert_eq!(t.buffered_points(), 1);
    // Once idle long enough, the communicator is forgotten and frees the cap.
    t.tick(Timestamp(T0 + s.comm_idle_ns), &s, &mut c);
    assert_eq!(t.tracked_comms(), 0);
    t.ingest(None, &[other], Timestamp(T0 + s.comm_idle_ns), &s, &mut c);
    assert_eq!(t.tracked_comms(), 1);
}

#[test]
fn monotonic_points_wait_for_the_clock_then_align() {
    let mut cfg = NcclConfig::default();
    cfg.monotonic.refine = false; // arrival bound only
    let s = Settings::new(&cfg); // min_batches 3
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let n = node(0);
    let boot = T0; // the node booted at T0
    for i in 0..3u64 {
        let mono = 100_000 * MS + i * 10_000 * MS;
        // delivered 5 ms after the newest point
        t.ingest(
            Some(&n),
            &[pt(0, 2, i as i64, mono)],
            Timestamp(boot + mono + 5 * MS),
            &s,
            &mut c,
        );
    }
    assert_eq!(c.dropped(DropReason::ClockWarmup), 2);
    assert_eq!(c.outcomes[Outcome::Accepted as usize], 1);
    // A wall-clock rank of the same collective joins it on one axis.
    let mono = 120_000 * MS;
    t.ingest(
        None,
        &[pt(1, 2, 2, boot + mono + 5 * MS + 40 * MS)],
        Timestamp(boot + mono + 50 * MS),
        &s,
        &mut c,
    );
    let out = t.drain();
    assert_eq!(out.len(), 2);
    let r1 = out.iter().find(|r| r.rank == 1).unwrap();
    assert!((r1.lag_ms - 20.0).abs() < 1e-6, "{r1:?}");
    assert!(!r1.wall_clock);
    assert_eq!(r1.time_ns, None);
    // Without a node id a monotonic point cannot be aligned.
    t.ingest(None, &[pt(0, 2, 9, 5)], Timestamp(boot), &s, &mut c);
    assert_eq!(c.dropped(DropReason::Invalid), 1);
}

fn tpt(rank: u32, nranks: u32, ts: u64) -> NcclPoint {
    NcclPoint {
        op_seq: None,
        ..pt(rank, nranks, 0, ts)
    }
}

#[test]
fn time_bucket_collective_with_a_straddling_straggler_is_one_instance() {
    let s = settings(); // window 1 s, skew 0.5
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    // T0 is a whole second; peers enter 900..907 ms into the bucket, rank 3 290 ms later
    // (190 ms past the boundary), and its batch arrives first.
    let base = T0 + 900 * MS;
    t.ingest(
        Some(&node(3)),
        &[tpt(3, 8, base + 3 * MS + 290 * MS)],
        Timestamp(T0),
        &s,
        &mut c,
    );
    assert_eq!(t.open_instances(), 1);
    let peers: Vec<_> = (0..8)
        .filter(|r| *r != 3)
        .map(|r| tpt(r, 8, base + u64::from(r) * MS))
        .collect();
    t.ingest(Some(&node(0)), &peers, Timestamp(T0), &s, &mut c);
    assert_eq!(t.open_instances(), 0, "complete -> emitted at once");
    assert_eq!(c.collectives[CollectiveOutcome::Complete as usize], 1);
    let out = t.drain();
    assert_eq!(out.len(), 8);
    let r3 = out.iter().find(|r| r.rank == 3).unwrap();
    // Entries 0,1,2,293,4,5,6,7 ms past base: median 4.5 ms.
    assert!((r3.lag_ms - 288.5).abs() < 1e-6, "{r3:?}");
    assert_eq!(r3.op_seq, None);
    assert_eq!(r3.node.as_deref(), Some("node-3"));
    // A repeat from rank 0 for the emitted bucket is late.
    t.ingest(None, &[tpt(0, 8, base + 2 * MS)], Timestamp(T0), &s, &mut c);
    assert_eq!(c.dropped(DropReason::Late), 1);
}

#[test]
fn time_buckets_expire_with_or_without_quorum() {
    let s = settings();
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    // Bucket A: 7 of 8 ranks (quorum 6). Bucket B, 10 s later: 3 of 8.
    let a: Vec<_> = (0..7)
        .map(|r| tpt(r, 8, T0 + 100 * MS + u64::from(r) * MS))
        .collect();
    let b: Vec<_> = (0..3)
        .map(|r| tpt(r, 8, T0 + 10_100 * MS + u64::from(r) * MS))
        .collect();
    t.ingest(None, &a, Timestamp(T0), &s, &mut c);
    t.ingest(None, &b, Timestamp(T0 + 5_000 * MS), &s, &mut c);
    t.tick(Timestamp(T0 + s.grace_ns), &s, &mut c);
    assert_eq!(t.open_instances(), 1, "B is still in its grace period");
    assert_eq!(t.drain().len(), 7);
    t.tick(Timestamp(T0 + 5_000 * MS + s.grace_ns), &s, &mut c);
    assert_eq!(t.open_instances(), 0);
    assert!(t.drain().is_empty());
    assert_eq!(c.dropped(DropReason::UnderQuorum), 3);
    assert_eq!(c.collectives[CollectiveOutcome::Partial as usize], 1);
    // The missing rank of A shows up after A was emitted: late, not a new bucket.
    t.ingest(
        None,
        &[tpt(7, 8, T0 + 107 * MS)],
        Timestamp(T0 + 20_000 * MS),
        &s,
        &mut c,
    );
    assert_eq!(c.dropped(DropReason::Late), 1);
    assert_eq!(t.open_instances(), 0);
}

#[test]
fn two_collectives_in_one_window_are_counted_as_duplicates() {
    let s = settings();
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    // Two collectives 200 ms apart inside one 1 s window: the second collides.
    t.ingest(
        None,
        &[tpt(0, 4, T0 + 100 * MS), tpt(0, 4, T0 + 300 * MS)],
        Timestamp(T0),
        &s,
        &mut c,
    );
    assert_eq!(c.dropped(DropReason::Duplicate), 1);
    let st = t.comms().next().unwrap().1.streams[0].as_ref().unwrap();
    assert_eq!(st.duplicates, 1);
}

#[test]
fn naming_transitions_are_reported_once_each_way() {
    let s = settings();
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let mut step = |seq: i64, late: bool, t: &mut ClusterTracker| {
        let base = T0 + seq as u64 * 1_000 * MS;
        let pts: Vec<_> = (0..4)
            .map(|r| {
                pt(
                    r,
                    4,
                    seq,
                    base + u64::from(r) * 100_000 + if late && r == 1 { 80 * MS } else { 0 },
                )
            })
            .collect();
        t.ingest(None, &pts, Timestamp(base), &s, &mut c);
    };
    for seq in 0..12 {
        step(seq, true, &mut t);
    }
    let (tr, dropped) = t.take_transitions();
    assert_eq!(dropped, 0);
    assert_eq!(tr.len(), 1, "{tr:?}");
    assert!(tr[0].named && tr[0].rank == 1 && tr[0].window == 10);
    assert!((tr[0].median_lag_ms.unwrap() - 80.0).abs() < 0.5);
    // On time from now on: once the behind share drops under half it is un-named.
    for seq in 12..60 {
        step(seq, false, &mut t);
    }
    let (tr, _) = t.take_transitions();
    assert_eq!(tr.len(), 1, "{tr:?}");
    assert!(!tr[0].named && tr[0].rank == 1);
    let st = t.comms().next().unwrap().1.streams[0].as_ref().unwrap();
    assert!(st.named.is_empty());
    assert_eq!(st.steps, 60);
}

#[test]
fn refinement_removes_the_arrival_error_but_keeps_a_slow_rank() {
    let s = settings(); // refine on, quantile 0.1
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let (a, b) = (node(0), node(1));
    let boot_b = T0 - 3_600_000 * MS; // node B booted an hour before T0
    let mut lag6 = Vec::new();
    let mut lag5 = Vec::new();
    for seq in 0..80i64 {
        let truth = T0 + seq as u64 * 3_000 * MS;
        // Node A (ranks 0-3) sends wall-clock times.
        let pa: Vec<_> = (0..4)
            .map(|r| pt(r, 8, seq, truth + u64::from(r) * 100_000))
            .collect();
        t.ingest(Some(&a), &pa, Timestamp(truth + 40 * MS), &s, &mut c);
        // Node B (ranks 4-7) sends monotonic times; its batch arrives 40 ms after its
        // newest point, so the arrival bound puts it 40 ms late. Rank 6 is 100 ms behind.
        let pb: Vec<_> = (4..8)
            .map(|r| {
                let slow = if r == 6 { 100 * MS } else { 0 };
                pt(r, 8, seq, truth + u64::from(r) * 100_000 + slow - boot_b)
            })
            .collect();
        let newest = truth + 100 * MS + 700_000;
        t.ingest(Some(&b), &pb, Timestamp(newest + 40 * MS), &s, &mut c);
        for r in t.drain() {
            match r.rank {
                6 => lag6.push(r.lag_ms),
                5 => lag5.push(r.lag_ms),
                _ => {}
            }
        }
    }
    let clock = t.node_clocks().find(|(n, _)| **n == b).unwrap().1;
    assert!(clock.is_refined());
    // Not emitted while calibrating: 3 deliveries of warm-up, then refinement steps of 16
    // instances (4 ranks each) until SETTLE_STEPS steps in a row are small corrections.
    assert!(c.dropped(DropReason::ClockWarmup) > 0);
    assert!(lag6.len() >= 15, "{}", lag6.len());
    // After refinement node B's on-time ranks sit at the median, rank 6 keeps 100 ms.
    let last5 = *lag5.last().unwrap();
    let last6 = *lag6.last().unwrap();
    assert!(last5.abs() < 1.0, "rank 5 lag {last5}");
    assert!((last6 - 100.0).abs() < 1.0, "rank 6 lag {last6}");
}

#[test]
fn output_cap_drops_and_counts_records() {
    let mut cfg = NcclConfig::default();
    cfg.limits.max_pending_output = 3;
    let s = Settings::new(&cfg);
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let pts: Vec<_> = (0..4).map(|r| pt(r, 4, 1, T0 + u64::from(r))).collect();
    t.ingest(None, &pts, Timestamp(T0), &s, &mut c);
    assert_eq!(t.pending_output(), 3);
    assert_eq!(c.dropped(DropReason::CapOutput), 1);
    assert_eq!(c.lag_points, 3);
}

#[test]
fn discard_counts_everything_it_throws_away() {
    let s = settings();
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    t.ingest(
        None,
        &[pt(0, 4, 1, T0), pt(1, 4, 1, T0)],
        Timestamp(T0),
        &s,
        &mut c,
    );
    let full: Vec<_> = (0..2).map(|r| pt(r, 2, 1, T0)).collect();
    let mut other = full.clone();
    for p in &mut other {
        p.comm = 0xc2;
    }
    t.ingest(None, &other, Timestamp(T0), &s, &mut c);
    t.discard(&mut c);
    assert_eq!(c.dropped(DropReason::Shutdown), 4);
    assert_eq!(
        (t.open_instances(), t.buffered_points(), t.pending_output()),
        (0, 0, 0)
    );
}

#[test]
fn rank_series_cap_keeps_lags_but_not_statistics() {
    let mut cfg = NcclConfig::default();
    cfg.limits.max_rank_series_per_cluster = 3;
    let s = Settings::new(&cfg);
    let mut t = ClusterTracker::new(&s);
    let mut c = Counts::default();
    let pts: Vec<_> = (0..4).map(|r| pt(r, 4, 1, T0 + u64::from(r))).collect();
    t.ingest(None, &pts, Timestamp(T0), &s, &mut c);
    assert_eq!(t.drain().len(), 4, "every lag is still emitted");
    assert_eq!(t.rank_series(), 3);
    assert_eq!(c.dropped(DropReason::CapRankSeries), 1);
    // Forgetting the communicator frees its windows.
    t.tick(Timestamp(T0 + s.comm_idle_ns), &s, &mut c);
    assert_eq!(t.rank_series(), 0);
}
