//! The pooled OTLP/protobuf metrics reader (`receiver::otlp_proto`) against prost: requests
//! of the shapes it reads (gauges and sums, scalar, string and bytes attributes, scopes) must
//! decode without prost and to prost's message, also when re-encoded the ways the wire
//! format allows and prost's encoder does not produce (fields repeated, which merges or
//! appends; unknown fields; non-canonical varints; fields out of order); whatever it answers
//! for mutated or arbitrary bytes prost answers the same; and `decode_metrics` gives prost's
//! result or prost's error for every body.

use collector_host::receiver::otlp_proto::{decode_metrics, read_pooled};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyKind;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Histogram, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric,
    number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::collection::vec;
use proptest::prelude::*;
use prost::Message;

// ---- generators: the shapes the reader handles ------------------------------------------

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z._]{0,12}",
        1 => vec(any::<char>(), 0..5).prop_map(String::from_iter),
    ]
}

fn any_value() -> impl Strategy<Value = Option<AnyValue>> {
    let kind = prop_oneof![
        6 => text().prop_map(AnyKind::StringValue),
        1 => any::<bool>().prop_map(AnyKind::BoolValue),
        1 => any::<i64>().prop_map(AnyKind::IntValue),
        1 => any::<f64>().prop_map(AnyKind::DoubleValue),
        1 => vec(any::<u8>(), 0..6).prop_map(AnyKind::BytesValue),
        1 => any::<i32>().prop_map(AnyKind::StringValueStrindex),
    ];
    prop::option::weighted(
        0.95,
        prop::option::weighted(0.95, kind).prop_map(|value| AnyValue { value }),
    )
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    vec(
        (
            text(),
            any_value(),
            prop_oneof![9 => Just(0), 1 => any::<i32>()],
        )
            .prop_map(|(key, value, key_strindex)| KeyValue {
                key,
                value,
                key_strindex,
            }),
        0..4,
    )
}

fn points() -> impl Strategy<Value = Vec<NumberDataPoint>> {
    let value = prop::option::of(prop_oneof![
        any::<f64>().prop_map(number_data_point::Value::AsDouble),
        any::<i64>().prop_map(number_data_point::Value::AsInt),
    ]);
    vec(
        (
            attributes(),
            any::<u64>(),
            any::<u64>(),
            value,
            any::<u32>(),
        )
            .prop_map(|(attributes, start, time, value, flags)| NumberDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                exemplars: Vec::new(),
                flags,
                value,
            }),
        0..3,
    )
}

fn metrics() -> impl Strategy<Value = Vec<Metric>> {
    let data = prop::option::of(prop_oneof![
        points().prop_map(|data_points| metric::Data::Gauge(Gauge { data_points })),
        (points(), any::<i32>(), any::<bool>()).prop_map(|(data_points, t, m)| {
            metric::Data::Sum(Sum {
                data_points,
                aggregation_temporality: t,
                is_monotonic: m,
            })
        }),
    ]);
    vec(
        (text(), text(), text(), attributes(), data).prop_map(
            |(name, description, unit, metadata, data)| Metric {
                name,
                description,
                unit,
                metadata,
                data,
            },
        ),
        0..4,
    )
}

fn request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
    let scope = prop::option::of((text(), text(), attributes(), any::<u32>()).prop_map(
        |(name, version, attributes, dropped)| InstrumentationScope {
            name,
            version,
            attributes,
            dropped_attributes_count: dropped,
        },
    ));
    let scopes = vec(
        (scope, metrics(), text()).prop_map(|(scope, metrics, schema_url)| ScopeMetrics {
            scope,
            metrics,
            schema_url,
        }),
        0..3,
    );
    let resource = prop::option::of((attributes(), any::<u32>()).prop_map(
        |(attributes, dropped)| Resource {
            attributes,
            dropped_attributes_count: dropped,
            entity_refs: Vec::new(),
        },
    ));
    vec(
        (resource, scopes, text()).prop_map(|(resource, scope_metrics, schema_url)| {
            ResourceMetrics {
                resource,
                scope_metrics,
                schema_url,
            }
        }),
        0..3,
    )
    .prop_map(|resource_metrics| ExportMetricsServiceRequest { resource_metrics })
}

// ---- re-encoding the way the wire format allows ----------------------------------------

/// Which fields of which message are messages the reader walks into: (message, field) ->
/// the field's message. Messages: 0 request, 1 resource metrics, 2 resource, 3 scope
/// metrics, 4 scope, 5 metric, 6 gauge or sum, 7 point, 8 key-value, 9 any-value.
fn child(msg: u8, tag: u64) -> Option<u8> {
    Some(match (msg, tag) {
        (0, 1) => 1,
        (1, 1) => 2,
        (1, 2) => 3,
        (2, 1) | (4, 3) | (5, 12) | (7, 7) => 8,
        (3, 1) => 4,
        (3, 2) => 5,
        (5, 5) | (5, 7) => 6,
        (6, 1) => 7,
        (8, 2) => 9,
        _ => return None,
    })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64, overlong: bool) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            if overlong {
                // One redundant continuation byte, still within ten bytes for small values.
                out.push(b | 0x80);
                out.push(0);
            } else {
                out.push(b);
            }
            return;
        }
        out.push(b | 0x80);
    }
}

fn get_varint(buf: &mut &[u8]) -> u64 {
    let mut v = 0u64;
    for i in 0..10 {
        let b = buf[0];
        *buf = &buf[1..];
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            break;
        }
    }
    v
}

/// The fields of one canonical message: (key, raw field bytes after the key).
fn fields(mut buf: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = get_varint(&mut buf);
        let start = buf;
        match key & 7 {
            0 => {
                get_varint(&mut buf);
            }
            1 => buf = &buf[8..],
            2 => {
                let n = get_varint(&mut buf) as usize;
                buf = &buf[n..];
            }
            5 => buf = &buf[4..],
            w => panic!("wire type {w} in a canonical encoding"),
        }
        out.push((key, start[..start.len() - buf.len()].to_vec()));
    }
    out
}

/// Re-encode message `msg` of type `kind`, choices drawn from `pick`: unknown fields of
/// every wire type inserted, keys and lengths written as non-canonical varints, and a
/// message field given as two fields with the same number, each with part of the fields
/// (a singular message is then merged, a repeated one gets two elements: prost decides).
fn rewrite(msg: &[u8], kind: u8, pick: &mut impl FnMut(u32) -> u32) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, raw) in fields(msg) {
        if pick(8) == 0 {
            // Unknown field numbers above every OTLP field here, each wire type.
            let tag = 100 + u64::from(pick(50));
            match pick(4) {
                0 => {
                    put_varint(&mut out, tag << 3, false);
                    put_varint(&mut out, u64::from(pick(1000)), false);
                }
                1 => {
                    put_varint(&mut out, (tag << 3) | 1, false);
                    out.extend_from_slice(&[7; 8]);
                }
                2 => {
                    put_varint(&mut out, (tag << 3) | 2, false);
                    put_varint(&mut out, 3, false);
                    out.extend_from_slice(b"xyz");
                }
                _ => {
                    put_varint(&mut out, (tag << 3) | 5, false);
                    out.extend_from_slice(&[9; 4]);
                }
            }
        }
        let tag = key >> 3;
        let overlong = pick(6) == 0;
        match child(kind, tag) {
            Some(inner) if key & 7 == 2 => {
                let mut b = raw.as_slice();
                let n = get_varint(&mut b) as usize;
                let payload = rewrite(&b[..n], inner, pick);
                let parts = fields(&payload);
                if parts.len() >= 2 && pick(4) == 0 {
                    // The message given twice, each time with part of its fields.
                    let cut = 1 + pick(parts.len() as u32 - 1) as usize;
                    for half in [&parts[..cut], &parts[cut..]] {
                        let mut m = Vec::new();
                        for (k, raw) in half {
                            put_varint(&mut m, *k, false);
                            m.extend_from_slice(raw);
                        }
                        put_varint(&mut out, key, false);
                        put_varint(&mut out, m.len() as u64, false);
                        out.extend_from_slice(&m);
                    }
                    continue;
                }
                put_varint(&mut out, key, pick(10) == 0);
                put_varint(&mut out, payload.len() as u64, overlong);
                out.extend_from_slice(&payload);
            }
            _ => {
                put_varint(&mut out, key, overlong);
                out.extend_from_slice(&raw);
            }
        }
    }
    out
}

fn prost_decode(body: &[u8]) -> Result<ExportMetricsServiceRequest, String> {
    ExportMetricsServiceRequest::decode(body).map_err(|e| e.to_string())
}

/// Equal, with NaN equal to itself (same bits on the wire).
fn same(a: &ExportMetricsServiceRequest, b: &ExportMetricsServiceRequest) -> bool {
    a == b || a.encode_to_vec() == b.encode_to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// What prost writes, the reader reads, without prost and to the same message.
    #[test]
    fn canonical_bodies_read_without_prost(req in request()) {
        let body = req.encode_to_vec();
        let read = read_pooled(&body);
        prop_assert!(read.is_some(), "gave up on {req:?}");
        prop_assert!(same(&read.unwrap(), &req));
        // And again from a pool that now holds the first decode's buffers.
        let first = decode_metrics(&body).unwrap();
        component::recycle::recycle_on_this_thread(first.resource_metrics);
        prop_assert!(same(&decode_metrics(&body).unwrap(), &req));
    }

    /// Unknown fields, non-canonical varints and messages given in parts (see [`rewrite`]):
    /// still read without prost, and to prost's message.
    #[test]
    fn rewritten_bodies_read_as_prost_reads_them(req in request(), seed in any::<u64>()) {
        let mut state = seed | 1;
        let mut pick = |n: u32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % u64::from(n.max(1))) as u32
        };
        let body = rewrite(&req.encode_to_vec(), 0, &mut pick);
        let want = prost_decode(&body).expect("prost reads the rewritten body");
        let read = read_pooled(&body);
        prop_assert!(read.is_some(), "gave up on a rewritten body");
        prop_assert!(same(&read.unwrap(), &want));
    }

    /// Mutated bodies: whenever the reader answers, prost accepts and agrees; and the
    /// receiver's entry point always gives prost's result or prost's error.
    #[test]
    fn mutated_bodies_get_prosts_answer(req in request(), edits in vec((any::<usize>(), any::<u8>()), 1..4), cut in any::<usize>()) {
        let mut body = req.encode_to_vec();
        for (at, b) in edits {
            if !body.is_empty() {
                let i = at % body.len();
                body[i] = b;
            }
        }
        if cut % 3 == 0 && !body.is_empty() {
            body.truncate(cut % body.len());
        }
        let want = prost_decode(&body);
        if let Some(read) = read_pooled(&body) {
            let want = want.as_ref().map_err(|e| TestCaseError::fail(format!("reader answered where prost refused: {e}")))?;
            prop_assert!(same(&read, want));
        }
        match (decode_metrics(&body).map_err(|e| e.to_string()), want) {
            (Ok(a), Ok(b)) => prop_assert!(same(&a, &b)),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "decode_metrics {a:?} against prost {b:?}"),
        }
    }

    #[test]
    fn arbitrary_bytes_get_prosts_answer(body in vec(any::<u8>(), 0..64)) {
        let want = prost_decode(&body);
        if let Some(read) = read_pooled(&body) {
            prop_assert!(want.as_ref().is_ok_and(|w| same(&read, w)), "{want:?}");
        }
        prop_assert_eq!(decode_metrics(&body).map_err(|e| e.to_string()).is_ok(), want.is_ok());
    }
}

/// Parts the reader leaves to prost (histograms here) still decode, through prost.
#[test]
fn what_the_reader_leaves_to_prost_decodes_through_prost() {
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "latency".into(),
                    data: Some(metric::Data::Histogram(Histogram {
                        data_points: Vec::new(),
                        aggregation_temporality: 2,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let body = req.encode_to_vec();
    assert!(read_pooled(&body).is_none());
    assert_eq!(decode_metrics(&body).unwrap(), req);
}

/// A key above `u32::MAX` (prost refuses it): the reader must not answer.
#[test]
fn a_key_beyond_32_bits_is_refused_as_prost_refuses_it() {
    let mut body = Vec::new();
    put_varint(&mut body, 1u64 << 33, false);
    put_varint(&mut body, 5, false);
    assert!(prost_decode(&body).is_err());
    assert!(read_pooled(&body).is_none());
    assert!(decode_metrics(&body).is_err());
}
