//! Lag records as OTLP: one `ResourceMetrics` per (cluster, node, clock) with a
//! `nccl.collective.peer_lag_ms` gauge (unit `ms`, double) holding one point per rank and
//! collective instance. The clock attribute sits on the resource (a node's entries are all
//! wall-clock or all monotonic), which keeps the per-point attributes to the four the
//! contract names: output cost is dominated by allocating them. `nccl.op_seq` is used for
//! alignment only and never put on the output: it changes every step, so as a Prometheus
//! label it would make one series per collective.

use std::collections::HashMap;
use std::sync::Arc;

use component::Timestamp;
use component::otlp::{
    KeyValue, NumberDataPoint, ResourceMetrics, gauge_f64, kv_i64, kv_str, point_f64,
    resource_metrics,
};
use ingero_wire::{attr, metric, resource};

use crate::ingest::{OpTypes, format_comm_hash};
use crate::metrics::{ATTR_LAG_CLOCK, CLOCK_MONOTONIC, CLOCK_WALL, LAG_UNIT, SCOPE_NAME};
use crate::tracker::LagRecord;

/// Output resource: (node, all entries wall-clock).
type GroupKey = (Option<Arc<str>>, bool);

/// Build the OTLP output of one cluster's records. Points without a known wall-clock time
/// are stamped `now`.
pub fn build(
    cluster: &str,
    records: Vec<LagRecord>,
    ops: &OpTypes,
    now: Timestamp,
    out: &mut Vec<ResourceMetrics>,
) {
    if records.is_empty() {
        return;
    }
    // Records of one node come in runs (an instance's entries arrive per node batch), so the
    // previous record's group is tried before the map.
    let mut groups: Vec<(GroupKey, Vec<NumberDataPoint>)> = Vec::new();
    let mut index: HashMap<GroupKey, usize> = HashMap::new();
    let mut last: Option<usize> = None;
    for r in records {
        let attrs: Vec<KeyValue> = vec![
            kv_str(attr::NCCL_COMM_ID_HASH, format_comm_hash(r.comm)),
            kv_str(attr::NCCL_OP_TYPE, ops.name(r.op)),
            kv_i64(attr::NCCL_RANK, i64::from(r.rank)),
            kv_i64(attr::NCCL_NRANKS, i64::from(r.nranks)),
        ];
        let t = r.time_ns.unwrap_or(now.as_nanos());
        let point = point_f64(attrs, t, r.lag_ms);
        let key = (r.node, r.wall_clock);
        let slot = match last {
            Some(i) if groups.get(i).is_some_and(|g| g.0 == key) => i,
            _ => *index.entry(key.clone()).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            }),
        };
        if let Some(g) = groups.get_mut(slot) {
            g.1.push(point);
        }
        last = Some(slot);
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    for ((node, wall), points) in groups {
        let mut res = vec![kv_str(resource::CLUSTER_ID, cluster)];
        if let Some(n) = node {
            res.push(kv_str(resource::NODE_ID, n.as_ref()));
        }
        res.push(kv_str(
            ATTR_LAG_CLOCK,
            if wall { CLOCK_WALL } else { CLOCK_MONOTONIC },
        ));
        out.push(resource_metrics(
            res,
            SCOPE_NAME,
            vec![gauge_f64(metric::NCCL_PEER_LAG_MS, LAG_UNIT, points)],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{get_i64, get_str, number_points, point_value, resource_attrs};

    #[test]
    fn groups_by_node_and_clock_and_spells_every_attribute() {
        let ops = OpTypes::new(&["ncclAllReduce".to_string()]);
        let rec = |rank: u32, node: Option<&str>, seq: Option<i64>, time: Option<u64>| LagRecord {
            comm: 0xabc,
            op: 0,
            rank,
            nranks: 4,
            op_seq: seq,
            lag_ms: f64::from(rank) * 10.0,
            time_ns: time,
            node: node.map(Arc::from),
            wall_clock: time.is_some(),
        };
        let mut out = Vec::new();
        build(
            "prod",
            vec![
                rec(0, Some("a"), Some(5), Some(77)),
                rec(1, Some("b"), None, None),
                rec(2, Some("a"), Some(5), Some(77)),
                rec(3, None, None, None),
            ],
            &ops,
            Timestamp(999),
            &mut out,
        );
        assert_eq!(out.len(), 3);
        // Sorted: None first, then "a", "b".
        assert_eq!(get_str(resource_attrs(&out[0]), resource::NODE_ID), None);
        assert_eq!(
            get_str(resource_attrs(&out[1]), resource::CLUSTER_ID),
            Some("prod")
        );
        assert_eq!(
            get_str(resource_attrs(&out[1]), resource::NODE_ID),
            Some("a")
        );
        let m = &out[1].scope_metrics[0].metrics[0];
        assert_eq!(m.name, metric::NCCL_PEER_LAG_MS);
        assert_eq!(m.unit, "ms");
        let pts = number_points(m);
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[1].time_unix_nano, 77);
        assert_eq!(point_value(&pts[1]), Some(20.0));
        let a = &pts[1].attributes;
        assert_eq!(
            get_str(a, attr::NCCL_COMM_ID_HASH),
            Some("0000000000000abc")
        );
        assert_eq!(get_str(a, attr::NCCL_OP_TYPE), Some("ncclAllReduce"));
        assert_eq!(get_i64(a, attr::NCCL_RANK), Some(2));
        assert_eq!(get_i64(a, attr::NCCL_NRANKS), Some(4));
        assert_eq!(
            get_i64(a, attr::NCCL_OP_SEQ),
            None,
            "op_seq is never a label"
        );
        assert_eq!(a.len(), 4);
        assert_eq!(get_str(a, ATTR_LAG_CLOCK), None, "on the resource");
        assert_eq!(
            get_str(resource_attrs(&out[1]), ATTR_LAG_CLOCK),
            Some(CLOCK_WALL)
        );
        let b = &number_points(&out[2].scope_metrics[0].metrics[0])[0];
        assert_eq!(b.time_unix_nano, 999);
        assert_eq!(get_i64(&b.attributes, attr::NCCL_OP_SEQ), None);
        assert_eq!(
            get_str(resource_attrs(&out[2]), ATTR_LAG_CLOCK),
            Some(CLOCK_MONOTONIC)
        );
    }

    #[test]
    fn nothing_in_nothing_out() {
        let mut out = Vec::new();
        build("c", Vec::new(), &OpTypes::new(&[]), Timestamp(1), &mut out);
        assert!(out.is_empty());
    }
}
