//! The selective decoder of the pass-through processors against prost: on every batch the
//! full decoder accepts, `decode_selected` equals a full decode with the unread metrics
//! removed; on mutated bytes it never panics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use component::otlp::ExportMetricsServiceRequest;
use ingero_fleet::select::{decode_full_then_filter, decode_selected};
use proptest::prelude::*;
use prost::Message;
use testkit::{AgentPush, NcclPoint, json_to_proto, nccl_export_json};

const READERS: [&[&str]; 3] = [
    ingero_processor::READS_METRICS,
    nccl_processor::READS_METRICS,
    &[],
];

/// A batch of agent health pushes and NCCL timing pushes, in the given order.
fn batch(health: &[(u8, f64)], nccl: &[(u8, f64)]) -> Vec<u8> {
    let mut req = ExportMetricsServiceRequest::default();
    for (i, (node, score)) in health.iter().enumerate() {
        let p = AgentPush::new("c", &format!("node-{node}"), *score);
        req.resource_metrics.extend(p.to_proto().resource_metrics);
        if let Some((rank, ms)) = nccl.get(i) {
            let pts = [NcclPoint::all_reduce(
                "comm",
                i64::from(*rank),
                8,
                *ms,
                1_700_000_000_000_000_000,
            )];
            req.resource_metrics.extend(json_to_proto(&nccl_export_json(
                Some("c"),
                &format!("node-{rank}"),
                &pts,
            )));
        }
    }
    req.encode_to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn equals_a_filtered_full_decode(
        health in prop::collection::vec((any::<u8>(), 0.0f64..1.0), 0..6),
        nccl in prop::collection::vec((0u8..8, 0.1f64..100.0), 0..6),
    ) {
        let b = batch(&health, &nccl);
        for names in READERS {
            prop_assert_eq!(
                decode_selected(&b, names).unwrap(),
                decode_full_then_filter(&b, names).unwrap()
            );
        }
    }

    #[test]
    fn mutated_bytes_never_panic_and_agree_when_prost_accepts(
        health in prop::collection::vec((any::<u8>(), 0.0f64..1.0), 1..4),
        nccl in prop::collection::vec((0u8..8, 0.1f64..100.0), 0..3),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = batch(&health, &nccl);
        for (at, byte) in edits {
            let i = at.index(b.len());
            b[i] = byte;
        }
        b.truncate(cut.index(b.len() + 1));
        for names in READERS {
            let selected = decode_selected(&b, names);
            if let Ok(full) = decode_full_then_filter(&b, names) {
                // Everything prost accepts decodes selectively to the same batch.
                prop_assert_eq!(selected.unwrap(), full);
            }
        }
    }
}
