//! Reading NCCL points out of OTLP, in both wire formats:
//!
//! - the Ingero agent (`ingero trace --otlp`, spec 5.3): gauge points of
//!   `nccl.collective.duration_ms` with `nccl.op_type`, `nccl.comm_id_hash` (16 hex chars),
//!   `nccl.rank`, `nccl.nranks` and a **monotonic** `timeUnixNano` (the uprobe entry time);
//! - this project's agent: the same plus a wall-clock `timeUnixNano` and `nccl.op_seq`.
//!
//! Only `nccl.collective.duration_ms` points are aligned (their timestamp is the rank's
//! entry into the collective); `nccl.collective.bytes` and `barrier_wait_ms` carry the same
//! attributes and timestamp and would only duplicate it, so they are counted as ignored.
//! The duration value itself is not used: it measures the host-side enqueue, not the wait
//! at the barrier (spec 5.2), so it says nothing about who was late.

use component::otlp::{AnyValueKind, KeyValue, Metric, MetricKind, NumberDataPoint};
use ingero_wire::{attr, metric};

use crate::metrics::{Counts, DropReason, Outcome};

/// One NCCL collective entry as read from the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclPoint {
    /// Index into the configured operation types.
    pub op: u8,
    pub comm: u64,
    pub rank: u32,
    pub nranks: u32,
    /// Raw `timeUnixNano` (monotonic or wall clock, see `clock::is_wall_clock`).
    pub ts: u64,
    pub op_seq: Option<i64>,
}

/// The configured operation types, looked up by name.
#[derive(Debug, Clone)]
pub struct OpTypes {
    names: Vec<String>,
}

impl OpTypes {
    pub fn new(names: &[String]) -> Self {
        OpTypes {
            names: names.iter().take(u8::MAX as usize).cloned().collect(),
        }
    }

    pub fn index(&self, name: &str) -> Option<u8> {
        self.names
            .iter()
            .position(|n| n == name)
            .and_then(|i| u8::try_from(i).ok())
    }

    pub fn name(&self, op: u8) -> &str {
        self.names
            .get(op as usize)
            .map(String::as_str)
            .unwrap_or("")
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Result of reading one data point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    Point(NcclPoint),
    Ignored,
    Dropped(DropReason),
}

/// Bounds on what a point may claim.
#[derive(Debug, Clone, Copy)]
pub struct PointLimits {
    pub max_ranks: u32,
    pub min_ranks: u32,
}

/// `nccl.comm_id_hash`: 1 to 16 hex digits (the agent sends 16, zero-padded).
pub fn parse_comm_hash(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// The wire spelling of a communicator hash: 16 lower-case hex digits.
pub fn format_comm_hash(h: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(16);
    for i in (0..16).rev() {
        s.push(char::from(HEX[((h >> (i * 4)) & 0xf) as usize]));
    }
    s
}

fn value_i64(v: &AnyValueKind) -> Option<i64> {
    match v {
        AnyValueKind::IntValue(i) => Some(*i),
        AnyValueKind::DoubleValue(d) if d.fract() == 0.0 && d.is_finite() && d.abs() < 9.0e15 => {
            Some(*d as i64)
        }
        AnyValueKind::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn value(kv: &KeyValue) -> Option<&AnyValueKind> {
    kv.value.as_ref().and_then(|v| v.value.as_ref())
}

/// Read one `nccl.collective.duration_ms` data point.
pub fn parse_point(dp: &NumberDataPoint, ops: &OpTypes, limits: PointLimits) -> Parsed {
    let mut op_name: Option<&str> = None;
    let mut comm: Option<&str> = None;
    let mut rank: Option<i64> = None;
    let mut nranks: Option<i64> = None;
    let mut op_seq: Option<Option<i64>> = None;
    // One pass over the attributes; the first occurrence of a key wins.
    for kv in &dp.attributes {
        match kv.key.as_str() {
            attr::NCCL_OP_TYPE if op_name.is_none() => {
                op_name = match value(kv) {
                    Some(AnyValueKind::StringValue(s)) => Some(s.as_str()),
                    _ => Some(""),
                }
            }
            attr::NCCL_COMM_ID_HASH if comm.is_none() => {
                comm = match value(kv) {
                    Some(AnyValueKind::StringValue(s)) => Some(s.as_str()),
                    _ => Some(""),
                }
            }
            attr::NCCL_RANK if rank.is_none() => {
                rank = Some(value(kv).and_then(value_i64).unwrap_or(-1))
            }
            attr::NCCL_NRANKS if nranks.is_none() => {
                nranks = Some(value(kv).and_then(value_i64).unwrap_or(-1))
            }
            attr::NCCL_OP_SEQ if op_seq.is_none() => op_seq = Some(value(kv).and_then(value_i64)),
            _ => {}
        }
    }
    let Some(op_name) = op_name else {
        return Parsed::Dropped(DropReason::Invalid);
    };
    let Some(op) = ops.index(op_name) else {
        // Point-to-point, CommInitAll or an operation the config does not align.
        return if op_name.is_empty() {
            Parsed::Dropped(DropReason::Invalid)
        } else {
            Parsed::Ignored
        };
    };
    let Some(comm) = comm.and_then(parse_comm_hash) else {
        return Parsed::Dropped(DropReason::Invalid);
    };
    let (Some(rank), Some(nranks)) = (rank, nranks) else {
        return Parsed::Dropped(DropReason::Invalid);
    };
    if comm == 0 || nranks == 0 {
        return Parsed::Dropped(DropReason::UnknownComm);
    }
    let (Ok(rank), Ok(nranks)) = (u32::try_from(rank), u32::try_from(nranks)) else {
        return Parsed::Dropped(DropReason::Invalid);
    };
    if nranks > limits.max_ranks || rank >= nranks {
        return Parsed::Dropped(DropReason::Invalid);
    }
    if nranks < limits.min_ranks {
        // A communicator this small has no peers to lag behind.
        return Parsed::Ignored;
    }
    let op_seq = match op_seq {
        None => None,
        Some(Some(s)) if s >= 0 => Some(s),
        Some(_) => return Parsed::Dropped(DropReason::Invalid),
    };
    if dp.time_unix_nano == 0 {
        return Parsed::Dropped(DropReason::Invalid);
    }
    Parsed::Point(NcclPoint {
        op,
        comm,
        rank,
        nranks,
        ts: dp.time_unix_nano,
        op_seq,
    })
}

/// True when the metric is one of the `nccl.collective.*` metrics this processor reads or
/// deliberately ignores.
pub fn is_nccl_metric(m: &Metric) -> bool {
    crate::READS_METRICS.contains(&m.name.as_str())
}

fn points(m: &Metric) -> &[NumberDataPoint] {
    match &m.data {
        Some(MetricKind::Gauge(g)) => &g.data_points,
        Some(MetricKind::Sum(s)) => &s.data_points,
        _ => &[],
    }
}

/// Read every NCCL point of one resource's metrics into `out`, counting what is ignored
/// or malformed. Returns the number of NCCL data points seen.
pub fn collect_points<'a>(
    metrics: impl Iterator<Item = &'a Metric>,
    ops: &OpTypes,
    limits: PointLimits,
    out: &mut Vec<NcclPoint>,
    counts: &mut Counts,
) -> u64 {
    let mut seen = 0u64;
    for m in metrics {
        if m.name == metric::NCCL_DURATION_MS {
            for dp in points(m) {
                seen += 1;
                match parse_point(dp, ops, limits) {
                    Parsed::Point(p) => out.push(p),
                    Parsed::Ignored => counts.outcome(Outcome::Ignored, 1),
                    Parsed::Dropped(r) => counts.refuse(r),
                }
            }
        } else if is_nccl_metric(m) {
            let n = points(m).len() as u64;
            seen += n;
            counts.outcome(Outcome::Ignored, n);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{kv_f64, kv_i64, kv_str, point_f64};

    fn ops() -> OpTypes {
        OpTypes::new(&["ncclAllReduce".to_string(), "ncclAllGather".to_string()])
    }

    const LIMITS: PointLimits = PointLimits {
        max_ranks: 64,
        min_ranks: 2,
    };

    fn attrs(op: &str, comm: &str, rank: i64, nranks: i64) -> Vec<KeyValue> {
        vec![
            kv_str(attr::NCCL_OP_TYPE, op),
            kv_str(attr::NCCL_COMM_ID_HASH, comm),
            kv_i64(attr::NCCL_RANK, rank),
            kv_i64(attr::NCCL_NRANKS, nranks),
            kv_i64(attr::NCCL_DATATYPE, 7),
            kv_i64(attr::NCCL_REDUCE_OP, 0),
        ]
    }

    fn parse(a: Vec<KeyValue>, t: u64) -> Parsed {
        parse_point(&point_f64(a, t, 0.02), &ops(), LIMITS)
    }

    #[test]
    fn reads_the_ingero_agent_format() {
        let p = parse(
            attrs("ncclAllGather", "00000000deadbeef", 3, 8),
            5_000_000_000,
        );
        assert_eq!(
            p,
            Parsed::Point(NcclPoint {
                op: 1,
                comm: 0xdead_beef,
                rank: 3,
                nranks: 8,
                ts: 5_000_000_000,
                op_seq: None
            })
        );
    }

    #[test]
    fn reads_op_seq_and_lenient_integers() {
        let mut a = vec![
            kv_str(attr::NCCL_OP_TYPE, "ncclAllReduce"),
            kv_str(attr::NCCL_COMM_ID_HASH, "ABCDEF0123456789"),
            kv_str(attr::NCCL_RANK, "1"),
            kv_f64(attr::NCCL_NRANKS, 4.0),
        ];
        a.push(kv_i64(attr::NCCL_OP_SEQ, 42));
        match parse(a, 7) {
            Parsed::Point(p) => {
                assert_eq!(
                    (p.comm, p.rank, p.nranks, p.op_seq),
                    (0xabcd_ef01_2345_6789, 1, 4, Some(42))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_communicators_are_named_as_such() {
        assert_eq!(
            parse(attrs("ncclAllReduce", "0000000000000000", 0, 8), 1),
            Parsed::Dropped(DropReason::UnknownComm)
        );
        assert_eq!(
            parse(attrs("ncclAllReduce", "00000000000000aa", 0, 0), 1),
            Parsed::Dropped(DropReason::UnknownComm)
        );
    }

    #[test]
    fn malformed_points_are_invalid_and_p2p_is_ignored() {
        let bad = [
            attrs("ncclAllReduce", "xyz", 0, 8),
            attrs("ncclAllReduce", "00112233445566778", 0, 8),
            attrs("ncclAllReduce", "aa", 8, 8),
            attrs("ncclAllReduce", "aa", -1, 8),
            attrs("ncclAllReduce", "aa", 0, 65),
            attrs("", "aa", 0, 8),
            vec![kv_str(attr::NCCL_COMM_ID_HASH, "aa")],
        ];
        for a in bad {
            assert_eq!(
                parse(a.clone(), 1),
                Parsed::Dropped(DropReason::Invalid),
                "{a:?}"
            );
        }
        assert_eq!(
            parse(attrs("ncclAllReduce", "aa", 0, 8), 0),
            Parsed::Dropped(DropReason::Invalid)
        );
        let mut neg = attrs("ncclAllReduce", "aa", 0, 8);
        neg.push(kv_i64(attr::NCCL_OP_SEQ, -5));
        assert_eq!(parse(neg, 1), Parsed::Dropped(DropReason::Invalid));
        assert_eq!(parse(attrs("ncclSend", "aa", 0, 8), 1), Parsed::Ignored);
        assert_eq!(
            parse(attrs("ncclAllReduce", "aa", 0, 1), 1),
            Parsed::Ignored
        );
    }

    #[test]
    fn comm_hash_round_trips() {
        for h in [0u64, 1, 0xdead_beef, 0x0123_4567_89ab_cdef, u64::MAX] {
            assert_eq!(parse_comm_hash(&format_comm_hash(h)).unwrap_or(0), h);
            assert_eq!(format_comm_hash(h), format!("{h:016x}"));
        }
        assert_eq!(format_comm_hash(0xab), "00000000000000ab");
    }
}
