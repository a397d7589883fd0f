//! Unit tests of instances, closed keys, exact and time-bucket alignment.

use super::*;

fn budget() -> Budget {
    Budget {
        max_open_instances: 100,
        max_buffered_points: 1000,
        ..Budget::default()
    }
}

fn e(rank: u32, t: i64) -> Entry {
    Entry::wall(rank, t)
}

#[test]
fn instance_refuses_duplicates_and_out_of_range_ranks() {
    let mut i = Instance::new(Timestamp::ZERO, 70, 0);
    assert!(i.push(e(69, 1)));
    assert!(i.has(69));
    assert!(!i.push(e(69, 2)));
    assert!(!i.push(e(70, 2)));
    assert!(!i.has(70));
    assert_eq!(i.len(), 1);
    let moved = i.remove_where(|x| x.rank == 69);
    assert_eq!(moved.len(), 1);
    assert!(!i.has(69) && i.is_empty());
}

#[test]
fn closed_keys_remember_a_ring_and_treat_older_as_closed() {
    let mut c = ClosedKeys::default();
    assert!(!c.is_closed(5));
    c.close(5);
    c.close(7);
    assert!(c.is_closed(5) && c.is_closed(7));
    assert!(!c.is_closed(6) && !c.is_closed(8));
    c.close(6);
    assert!(c.is_closed(6));
    // Advancing clears the slots the ring reuses.
    c.close(7 + CLOSED_RING - 1);
    assert!(c.is_closed(7));
    assert!(!c.is_closed(8));
    assert!(!c.is_closed(9));
    c.close(6 + 2 * CLOSED_RING);
    assert!(c.is_closed(5), "far below the ring counts as closed");
    assert!(!c.is_closed(7 + CLOSED_RING));
    // Negative keys work too.
    let mut n = ClosedKeys::default();
    n.close(-3);
    assert!(n.is_closed(-3) && !n.is_closed(-2) && !n.is_closed(-4));
}

#[test]
fn exact_instances_join_by_sequence_and_count_late_points() {
    let mut b = budget();
    let mut x = ExactInstances::default();
    let now = Timestamp::from_secs(1);
    assert_eq!(
        x.insert(10, 0, 3, e(0, 1), now, &mut b),
        Placed::Added { key: 10 }
    );
    assert_eq!(
        x.insert(10, 0, 3, e(1, 2), now, &mut b),
        Placed::Added { key: 10 }
    );
    assert_eq!(x.insert(10, 0, 3, e(1, 3), now, &mut b), Placed::Duplicate);
    assert_eq!(x.insert(10, 1, 3, e(2, 3), now, &mut b), Placed::OpMismatch);
    assert_eq!(
        x.insert(11, 0, 3, e(0, 9), now, &mut b),
        Placed::Added { key: 11 }
    );
    assert_eq!((b.open_instances, b.buffered_points), (2, 3));
    let inst = x.take(10, &mut b).unwrap();
    assert_eq!(inst.len(), 2);
    assert_eq!((b.open_instances, b.buffered_points), (1, 1));
    assert_eq!(x.insert(10, 0, 3, e(2, 3), now, &mut b), Placed::Late);
    assert!(x.get(11).is_some());
}

#[test]
fn exact_instances_respect_the_budget() {
    let mut b = Budget {
        max_open_instances: 1,
        max_buffered_points: 2,
        ..Budget::default()
    };
    let mut x = ExactInstances::default();
    let now = Timestamp::ZERO;
    assert!(matches!(
        x.insert(1, 0, 4, e(0, 1), now, &mut b),
        Placed::Added { .. }
    ));
    assert_eq!(x.insert(2, 0, 4, e(0, 1), now, &mut b), Placed::CapBuckets);
    assert!(matches!(
        x.insert(1, 0, 4, e(1, 1), now, &mut b),
        Placed::Added { .. }
    ));
    assert_eq!(x.insert(1, 0, 4, e(2, 1), now, &mut b), Placed::CapBuckets);
    assert_eq!(b.buffered_points, 2);
}

const W: i64 = 1_000;
const RULE: BucketRule = BucketRule {
    window_ns: W,
    skew_ns: W / 2,
};

fn tb_insert(tb: &mut TimeBuckets, b: &mut Budget, rank: u32, t: i64) -> Placed {
    tb.insert(RULE, 0, 8, e(rank, t), Timestamp::from_secs(1), b)
}

#[test]
fn bucket_rule_grid_and_zone() {
    assert_eq!(RULE.natural_key(0), 0);
    assert_eq!(RULE.natural_key(999), 0);
    assert_eq!(RULE.natural_key(1_000), 1);
    assert_eq!(RULE.natural_key(-1), -1);
    assert!(RULE.in_zone(1_000, 1) && RULE.in_zone(1_499, 1));
    assert!(!RULE.in_zone(1_500, 1) && !RULE.in_zone(999, 1));
}

#[test]
fn straddling_rank_joins_the_previous_open_bucket() {
    let mut b = budget();
    let mut tb = TimeBuckets::default();
    assert_eq!(tb_insert(&mut tb, &mut b, 0, 900), Placed::Added { key: 0 });
    // 400 past the boundary: inside the zone (500) -> previous bucket.
    assert_eq!(
        tb_insert(&mut tb, &mut b, 1, 1_400),
        Placed::Added { key: 0 }
    );
    // Past the zone -> its own bucket.
    assert_eq!(
        tb_insert(&mut tb, &mut b, 2, 1_600),
        Placed::Added { key: 1 }
    );
    // In the zone but rank 0 already sits in bucket 0 -> its natural bucket.
    assert_eq!(
        tb_insert(&mut tb, &mut b, 0, 1_100),
        Placed::Added { key: 1 }
    );
    assert_eq!(tb.get(0).unwrap().len(), 2);
    assert_eq!(tb.get(1).unwrap().len(), 2);
    assert_eq!(tb_insert(&mut tb, &mut b, 2, 1_700), Placed::Duplicate);
}

#[test]
fn straddling_rank_does_not_join_an_emitted_bucket() {
    let mut b = budget();
    let mut tb = TimeBuckets::default();
    tb_insert(&mut tb, &mut b, 0, 900);
    let emitted = tb.take(0, &mut b).unwrap();
    assert_eq!(emitted.len(), 1);
    assert_eq!(
        tb_insert(&mut tb, &mut b, 1, 1_100),
        Placed::Added { key: 1 }
    );
    assert_eq!(tb_insert(&mut tb, &mut b, 2, 950), Placed::Late);
    assert_eq!((b.open_instances, b.buffered_points), (1, 1));
}

#[test]
fn late_rank_arriving_first_is_moved_when_its_peers_open_the_bucket() {
    let mut b = budget();
    let mut tb = TimeBuckets::default();
    // Rank 5's batch arrives first: it entered 300 past the boundary.
    assert_eq!(
        tb_insert(&mut tb, &mut b, 5, 1_300),
        Placed::Added { key: 1 }
    );
    // A rank of the next collective far into bucket 1 stays there.
    assert_eq!(
        tb_insert(&mut tb, &mut b, 6, 1_800),
        Placed::Added { key: 1 }
    );
    // Its peers entered just before the boundary.
    assert_eq!(tb_insert(&mut tb, &mut b, 0, 950), Placed::Added { key: 0 });
    let b0 = tb.get(0).unwrap();
    assert!(b0.has(0) && b0.has(5) && b0.len() == 2);
    let b1 = tb.get(1).unwrap();
    assert!(b1.has(6) && b1.len() == 1);
    assert_eq!((b.open_instances, b.buffered_points), (2, 3));
    // When the zone held everything, the emptied bucket disappears.
    let mut b = budget();
    let mut tb = TimeBuckets::default();
    tb_insert(&mut tb, &mut b, 5, 1_300);
    tb_insert(&mut tb, &mut b, 0, 950);
    assert!(tb.get(1).is_none());
    assert_eq!((b.open_instances, b.buffered_points), (1, 2));
}

#[test]
fn expired_keys_are_sorted_and_respect_grace() {
    let mut open: IntMap<i64, Instance> = IntMap::default();
    open.insert(3, Instance::new(Timestamp::from_secs(1), 2, 0));
    open.insert(1, Instance::new(Timestamp::from_secs(2), 2, 0));
    open.insert(2, Instance::new(Timestamp::from_secs(9), 2, 0));
    let keys = expired_keys(&open, Timestamp::from_secs(7), 5_000_000_000);
    assert_eq!(keys, vec![1, 3]);
}
