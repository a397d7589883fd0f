//! Unit tests of the selective decoder (the differential proptests are in
//! `tests/it/select_differential.rs`).

use super::*;
use component::otlp::{get_str, kv_i64, kv_str, resource_attrs};
use ingero_wire::{attr, metric, resource};
use testkit::AgentPush;

const HEALTH: Selection = Selection {
    metrics: &[metric::HEALTH_SCORE],
    resource_attributes: &[resource::CLUSTER_ID, resource::NODE_ID],
    point_attributes: &[attr::NODE_STATE],
};

fn batch(n: usize) -> Vec<u8> {
    let mut req = ExportMetricsServiceRequest::default();
    for i in 0..n {
        req.resource_metrics.extend(
            AgentPush::new("c", &format!("n{i}"), 0.9)
                .provider("aws")
                .world(8, 1)
                .to_proto()
                .resource_metrics,
        );
    }
    req.encode_to_vec()
}

fn keys(attrs: &[KeyValue]) -> Vec<&str> {
    attrs.iter().map(|kv| kv.key.as_str()).collect()
}

#[test]
fn keeps_exactly_what_is_selected_with_resources_and_scopes() {
    let b = batch(3);
    let got = decode_selected(&b, &HEALTH).unwrap();
    assert_eq!(got, decode_full_then_project(&b, &HEALTH).unwrap());
    assert_eq!(got.resource_metrics.len(), 3);
    let metrics: Vec<&Metric> = got
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .collect();
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, vec![metric::HEALTH_SCORE; 3]);
    let rm = &got.resource_metrics[1];
    // The push's resource also holds the provider, world size and rank: not selected.
    assert_eq!(
        keys(resource_attrs(rm)),
        vec![resource::NODE_ID, resource::CLUSTER_ID]
    );
    assert_eq!(get_str(resource_attrs(rm), resource::NODE_ID), Some("n1"));
    assert_eq!(rm.scope_metrics[0].scope, None);
    let points = component::otlp::number_points(metrics[1]);
    assert_eq!(keys(&points[0].attributes), vec![attr::NODE_STATE]);
    assert_eq!(points[0].time_unix_nano, 1_763_769_600_000_000_000);
    assert_eq!(component::otlp::point_value(&points[0]), Some(0.9));
    assert_eq!(metrics[1].unit, "");
    // Nothing selected: resources and scopes only.
    let none = decode_selected(&b, &Selection::NOTHING).unwrap();
    assert_eq!(
        none,
        decode_full_then_project(&b, &Selection::NOTHING).unwrap()
    );
    assert!(
        none.resource_metrics
            .iter()
            .all(|rm| { resource_attrs(rm).is_empty() && rm.scope_metrics[0].metrics.is_empty() })
    );
}

#[test]
fn a_resource_without_selected_metrics_keeps_no_attributes() {
    let mut req = ExportMetricsServiceRequest::default();
    req.resource_metrics
        .extend(testkit::json_to_proto(&testkit::nccl_export_json(
            Some("c"),
            "n0",
            &[testkit::NcclPoint::all_reduce("aa", 0, 2, 1.0, 1)],
        )));
    req.resource_metrics
        .extend(AgentPush::new("c", "n1", 0.9).to_proto().resource_metrics);
    let b = req.encode_to_vec();
    let got = decode_selected(&b, &HEALTH).unwrap();
    assert_eq!(got, decode_full_then_project(&b, &HEALTH).unwrap());
    let nccl = &got.resource_metrics[0];
    assert!(nccl.resource.is_some() && resource_attrs(nccl).is_empty());
    assert!(nccl.scope_metrics[0].metrics.is_empty());
    assert_eq!(
        get_str(resource_attrs(&got.resource_metrics[1]), resource::NODE_ID),
        Some("n1")
    );
}

#[test]
fn repeated_fields_follow_protobuf_rules() {
    // Two `resource` fields merge (attributes concatenate); the last `name` wins.
    let a = ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![kv_str(resource::NODE_ID, "1"), kv_str("other", "x")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut b = ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![kv_str(resource::NODE_ID, "2")],
            ..Default::default()
        }),
        ..Default::default()
    };
    b.scope_metrics.push(ScopeMetrics {
        metrics: vec![Metric {
            name: metric::HEALTH_SCORE.into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let mut rm_bytes = a.encode_to_vec();
    rm_bytes.extend(b.encode_to_vec());
    let mut req = Vec::new();
    prost::encoding::bytes::encode(REQUEST_RESOURCE_METRICS, &rm_bytes, &mut req);
    let got = decode_selected(&req, &HEALTH).unwrap();
    assert_eq!(got, decode_full_then_project(&req, &HEALTH).unwrap());
    assert_eq!(
        keys(resource_attrs(&got.resource_metrics[0])),
        vec![resource::NODE_ID, resource::NODE_ID]
    );

    let mut m = Metric {
        name: "other".into(),
        ..Default::default()
    }
    .encode_to_vec();
    prost::encoding::string::encode(METRIC_NAME, &metric::HEALTH_SCORE.to_string(), &mut m);
    assert!(metric_name_is_one_of(&m, HEALTH.metrics).unwrap());

    // A key written twice: the last one decides whether the attribute is kept.
    let mut kv = kv_str("other", "v").encode_to_vec();
    prost::encoding::string::encode(KV_KEY, &attr::NODE_STATE.to_string(), &mut kv);
    let mut out = Vec::new();
    attribute_if_selected(&kv, HEALTH.point_attributes, &mut out).unwrap();
    assert_eq!(out, vec![kv_str(attr::NODE_STATE, "v")]);
}

#[test]
fn string_attributes_in_any_encoding_decode_as_prost_decodes_them() {
    let selected = |bytes: &[u8]| {
        let mut out = Vec::new();
        attribute_if_selected(bytes, HEALTH.point_attributes, &mut out).map(|()| out)
    };
    let plain = kv_str(attr::NODE_STATE, "active").encode_to_vec();
    assert!(
        plain_string_attribute(&plain).is_some(),
        "the fast path is taken"
    );
    assert_eq!(
        selected(&plain).unwrap(),
        vec![KeyValue::decode(plain.as_slice()).unwrap()]
    );
    let empty = kv_str(attr::NODE_STATE, "").encode_to_vec();
    assert_eq!(
        selected(&empty).unwrap(),
        vec![kv_str(attr::NODE_STATE, "")]
    );

    // Encodings a marshaler does not write go to the general path, with prost's rules.
    let value = AnyValue {
        value: Some(AnyValueKind::StringValue("idle".into())),
    };
    let mut value_first = Vec::new();
    prost::encoding::message::encode(2, &value, &mut value_first);
    prost::encoding::string::encode(KV_KEY, &attr::NODE_STATE.to_string(), &mut value_first);
    let mut two_values = plain.clone();
    prost::encoding::message::encode(2, &value, &mut two_values);
    for bytes in [value_first, two_values] {
        assert!(plain_string_attribute(&bytes).is_none());
        assert_eq!(
            selected(&bytes).unwrap(),
            vec![KeyValue::decode(bytes.as_slice()).unwrap()]
        );
    }

    // A selected key with a value that is not UTF-8 is refused, as prost refuses it; an
    // unselected one is only framed.
    let mut bad = plain.clone();
    let last = bad.len() - 1;
    bad[last] = 0xff;
    assert!(KeyValue::decode(bad.as_slice()).is_err());
    assert!(selected(&bad).is_err());
    let mut other = kv_str("other", "x").encode_to_vec();
    let last = other.len() - 1;
    other[last] = 0xff;
    assert_eq!(selected(&other).unwrap(), vec![]);
}

#[test]
fn oneof_members_merge_or_replace_as_in_prost() {
    let point = |v: NumberValue, attrs: Vec<KeyValue>| NumberDataPoint {
        attributes: attrs,
        time_unix_nano: 7,
        value: Some(v),
        ..Default::default()
    };
    // A metric encoded with no name holds only its data member.
    let only = |d: MetricKind| {
        Metric {
            data: Some(d),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let gauge = |dp: NumberDataPoint| {
        only(MetricKind::Gauge(Gauge {
            data_points: vec![dp],
        }))
    };
    let sum = only(MetricKind::Sum(Sum {
        data_points: vec![point(NumberValue::AsInt(3), vec![])],
        aggregation_temporality: 2,
        is_monotonic: true,
    }));
    // gauge + gauge merge, a sum replaces them, a second sum merges, a gauge replaces
    // it and the last gauge merges into that one.
    let mut m = Metric {
        name: metric::HEALTH_SCORE.into(),
        ..Default::default()
    }
    .encode_to_vec();
    m.extend(gauge(point(
        NumberValue::AsDouble(0.5),
        vec![kv_i64("x", 1), kv_str(attr::NODE_STATE, "idle")],
    )));
    m.extend(gauge(point(NumberValue::AsInt(1), vec![])));
    m.extend(&sum);
    m.extend(&sum);
    m.extend(gauge(point(NumberValue::AsDouble(0.25), vec![])));
    // Two value fields in one point: the last wins.
    let mut dp = point(NumberValue::AsDouble(0.1), vec![]).encode_to_vec();
    prost::encoding::sfixed64::encode(NDP_AS_INT, &9, &mut dp);
    let mut g = Vec::new();
    prost::encoding::bytes::encode(GAUGE_DATA_POINTS, &dp, &mut g);
    prost::encoding::bytes::encode(METRIC_GAUGE, &g, &mut m);
    let mut sm = Vec::new();
    prost::encoding::bytes::encode(SM_METRICS, &m, &mut sm);
    let mut rm = Vec::new();
    prost::encoding::bytes::encode(RM_SCOPE_METRICS, &sm, &mut rm);
    let mut req = Vec::new();
    prost::encoding::bytes::encode(REQUEST_RESOURCE_METRICS, &rm, &mut req);

    let got = decode_selected(&req, &HEALTH).unwrap();
    assert_eq!(got, decode_full_then_project(&req, &HEALTH).unwrap());
    let m = &got.resource_metrics[0].scope_metrics[0].metrics[0];
    let values: Vec<Option<f64>> = component::otlp::number_points(m)
        .iter()
        .map(component::otlp::point_value)
        .collect();
    assert_eq!(values, vec![Some(0.25), Some(9.0)]);
    assert!(matches!(m.data, Some(MetricKind::Gauge(_))));
}

#[test]
fn a_known_field_with_the_wrong_wire_type_is_refused_as_by_prost() {
    // `unit` (never decoded here) written as a varint, `time_unix_nano` as a varint.
    for (tag, wt) in [
        (METRIC_UNIT, WireType::Varint),
        (METRIC_GAUGE, WireType::Varint),
    ] {
        let mut m = Vec::new();
        prost::encoding::string::encode(METRIC_NAME, &metric::HEALTH_SCORE.to_string(), &mut m);
        prost::encoding::encode_key(tag, wt, &mut m);
        prost::encoding::encode_varint(1, &mut m);
        assert!(Metric::decode(m.as_slice()).is_err());
        assert!(metric(&m, &[]).is_err(), "tag {tag}");
    }
    let mut dp = Vec::new();
    prost::encoding::encode_key(NDP_TIME, WireType::Varint, &mut dp);
    prost::encoding::encode_varint(1, &mut dp);
    assert!(NumberDataPoint::decode(dp.as_slice()).is_err());
    assert!(number_point(&dp, &[]).is_err());
}

#[test]
fn truncated_input_is_an_error_never_a_panic() {
    let b = batch(2);
    for cut in 0..b.len() {
        let r = decode_selected(&b[..cut], &HEALTH);
        if let Ok(v) = &r {
            // A cut on a field boundary is a valid (shorter) message.
            assert_eq!(v, &decode_full_then_project(&b[..cut], &HEALTH).unwrap());
        }
    }
}

#[test]
fn the_ascii_fast_path_of_strings_agrees_with_from_utf8() {
    // Every length around the 8-byte chunks, with a non-ASCII byte (valid UTF-8 or not) at
    // every position: `string` accepts and copies exactly what `str::from_utf8` accepts.
    for len in 0..40usize {
        let ascii: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        assert!(is_ascii(&ascii));
        assert_eq!(string(&ascii).unwrap().as_bytes(), ascii.as_slice());
        for pos in 0..len {
            for bad in [0x80u8, 0xc3, 0xff, 0x7f | 0x80] {
                let mut b = ascii.clone();
                b[pos] = bad;
                assert!(!is_ascii(&b), "len {len} pos {pos}");
                assert_eq!(string(&b).is_ok(), std::str::from_utf8(&b).is_ok());
            }
            // A valid two-byte sequence ("é") starting here.
            if pos + 1 < len {
                let mut b = ascii.clone();
                b[pos] = 0xc3;
                b[pos + 1] = 0xa9;
                assert!(!is_ascii(&b));
                assert_eq!(string(&b).unwrap().as_bytes(), b.as_slice());
            }
        }
    }
}

#[test]
fn a_recycled_batch_serves_the_next_decode_without_changing_it() {
    let b = batch(3);
    let fresh = decode_selected(&b, &HEALTH).unwrap();
    let mut r = Recycler::default();
    let first = decode_selected_reusing(&b, &HEALTH, &mut r).unwrap();
    assert_eq!(first, fresh);
    r.recycle(first);
    let kept = r.kept();
    assert!(kept.strings > 0 && kept.kvs > 0 && kept.points > 0 && kept.resources > 0);
    // The same shape again: every string comes from the recycler, and goes back to it.
    let second = decode_selected_reusing(&b, &HEALTH, &mut r).unwrap();
    assert!(r.kept().strings == 0 && r.kept().resources == 0);
    assert_eq!(second, fresh);
    r.recycle(second);
    assert_eq!(r.kept().strings, kept.strings);
    // Another selection and batch from the same recycler: still what a fresh decode gives.
    let other = batch(1);
    let got = decode_selected_reusing(&other, &Selection::NOTHING, &mut r).unwrap();
    assert_eq!(got, decode_selected(&other, &Selection::NOTHING).unwrap());
    r.recycle(got);
    // Bounded: nothing kept beyond the limits.
    for _ in 0..3 {
        let mut big = ExportMetricsServiceRequest::default();
        for _ in 0..Recycler::KEEP_STRINGS {
            big.resource_metrics
                .extend(decode_selected(&b, &HEALTH).unwrap().resource_metrics);
        }
        r.recycle(big);
    }
    assert_eq!(r.kept().strings, Recycler::KEEP_STRINGS);
    assert_eq!(r.kept().kvs, Recycler::KEEP_VECS);
    // A string longer than the limit is not kept.
    let mut normal = Recycler::default();
    normal.recycle(decode_selected(&b, &HEALTH).unwrap());
    let mut long = decode_selected(&b, &HEALTH).unwrap();
    long.resource_metrics[0].scope_metrics[0].metrics[0].name =
        "x".repeat(Recycler::MAX_STRING_BYTES + 1);
    let mut r = Recycler::default();
    r.recycle(long);
    assert_eq!(r.kept().strings + 1, normal.kept().strings);
}

#[test]
fn value_first_string_attributes_take_their_fast_path_and_decode_as_prost() {
    // pdata's Go marshaler writes `value` before `key`: the shape of every attribute the Go
    // shim passes.
    let selected = |bytes: &[u8]| {
        let mut out = Vec::new();
        attribute_if_selected(bytes, HEALTH.point_attributes, &mut out).map(|()| out)
    };
    let encode = |key: &str, v: &str| {
        let value = AnyValue {
            value: Some(AnyValueKind::StringValue(v.into())),
        };
        let mut b = Vec::new();
        prost::encoding::message::encode(2, &value, &mut b);
        prost::encoding::string::encode(KV_KEY, &key.to_string(), &mut b);
        b
    };
    for v in ["active", "", "é-idle"] {
        let b = encode(attr::NODE_STATE, v);
        assert!(plain_string_attribute(&b).is_none());
        assert_eq!(
            plain_string_attribute_value_first(&b),
            Some((attr::NODE_STATE.as_bytes(), v.as_bytes()))
        );
        assert_eq!(
            selected(&b).unwrap(),
            vec![KeyValue::decode(b.as_slice()).unwrap()]
        );
    }
    // Unselected: skipped; selected with a value that is not UTF-8: refused, as by prost.
    assert_eq!(selected(&encode("other", "x")).unwrap(), vec![]);
    let mut bad = encode(attr::NODE_STATE, "active");
    bad[4] = 0xff; // inside "active" (tag, len, tag, len, then the bytes)
    assert!(KeyValue::decode(bad.as_slice()).is_err());
    assert!(selected(&bad).is_err());
    // Anything more (a second key, another value kind) is not the fast path's shape.
    let mut two_keys = encode(attr::NODE_STATE, "active");
    prost::encoding::string::encode(KV_KEY, &"x".to_string(), &mut two_keys);
    assert!(plain_string_attribute_value_first(&two_keys).is_none());
    assert_eq!(
        selected(&two_keys).unwrap(),
        Vec::<KeyValue>::new(),
        "the last key (x) wins, as in prost"
    );
    assert_eq!(KeyValue::decode(two_keys.as_slice()).unwrap().key, "x");
    let int = kv_i64(attr::NODE_STATE, 3);
    let mut int_first = Vec::new();
    prost::encoding::message::encode(2, int.value.as_ref().unwrap(), &mut int_first);
    prost::encoding::string::encode(KV_KEY, &int.key, &mut int_first);
    assert!(plain_string_attribute_value_first(&int_first).is_none());
    assert_eq!(selected(&int_first).unwrap(), vec![int]);
}

#[test]
fn short_varints_decode_as_prost_decodes_them() {
    // Every one- and two-byte encoding (canonical or not), alone and followed by more bytes.
    let mut cases: Vec<Vec<u8>> = (0..0x80u8).map(|b| vec![b]).collect();
    for b0 in 0x80..=0xffu8 {
        for b1 in 0..0x80u8 {
            cases.push(vec![b0, b1]);
        }
        cases.push(vec![b0]); // truncated
    }
    for case in cases {
        for tail in [&[][..], &[0x05, 0x80][..]] {
            let bytes = [case.as_slice(), tail].concat();
            let (mut ours, mut theirs) = (bytes.as_slice(), bytes.as_slice());
            match (varint(&mut ours), decode_varint(&mut theirs)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "{bytes:?}");
                    assert_eq!(ours, theirs, "{bytes:?}");
                }
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{bytes:?}: {a:?} vs {b:?}"),
            }
        }
    }
}
