//! The streaming OTLP/JSON metrics decoder (`receiver::otlp_json`) against the generic
//! serde path it replaced (`serde_json::from_slice` through opentelemetry-proto's serde
//! impls): generated requests of every metric kind and attribute kind must decode to the
//! same message, whatever the spelling of integers, field names and unknown fields; and
//! mutated or arbitrary bytes never panic, and whatever the new decoder accepts the old
//! one accepts with the same result once the documented loosenings (`null` fields,
//! omitted `key`/`values`) are written out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use collector_host::receiver::otlp_json::{decode_metrics, recycle};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyKind;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exemplar, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::collection::vec;
use proptest::prelude::*;
use prost::Message;
use testkit::json_scalar_spans as scalar_spans;

// ---- generators ----------------------------------------------------------------------

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z.]{0,10}",
        1 => vec(any::<char>(), 0..6).prop_map(String::from_iter),
        1 => Just("\"\\/\u{0}\u{1f}\u{7f}é😀\u{2028}".to_string()),
    ]
}

/// Any f64, with the edges over-represented.
fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => any::<f64>(),
        1 => prop::sample::select(vec![
            0.0, -0.0, 1.0, -1.0, f64::MIN, f64::MAX, f64::MIN_POSITIVE, 5e-324, 1e-7,
            f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 9_007_199_254_740_993.0,
        ]),
    ]
}

/// Finite doubles, for fields the old serializer writes as plain JSON numbers where a
/// non-finite value becomes `null` and the old path then drops the metric's data.
fn finite_f64() -> impl Strategy<Value = f64> {
    any_f64().prop_map(|v| if v.is_finite() { v } else { 0.5 })
}

fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![3 => any::<u64>(), 1 => prop::sample::select(vec![0, 1, u64::MAX, i64::MAX as u64, 1 << 53])]
}

fn any_i64() -> impl Strategy<Value = i64> {
    prop_oneof![3 => any::<i64>(), 1 => prop::sample::select(vec![0, -1, i64::MIN, i64::MAX, 1 << 53])]
}

fn any_value() -> impl Strategy<Value = AnyValue> {
    let leaf = prop_oneof![
        Just(None),
        text().prop_map(|s| Some(AnyKind::StringValue(s))),
        any::<bool>().prop_map(|b| Some(AnyKind::BoolValue(b))),
        any_i64().prop_map(|i| Some(AnyKind::IntValue(i))),
        any_f64().prop_map(|d| Some(AnyKind::DoubleValue(d))),
        vec(any::<u8>(), 0..12).prop_map(|b| Some(AnyKind::BytesValue(b))),
        any::<i32>().prop_map(|i| Some(AnyKind::StringValueStrindex(i))),
    ]
    .prop_map(|value| AnyValue { value });
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(|values| AnyValue {
                value: Some(AnyKind::ArrayValue(ArrayValue { values }))
            }),
            vec((text(), prop::option::of(inner)), 0..4).prop_map(|kvs| AnyValue {
                value: Some(AnyKind::KvlistValue(KeyValueList {
                    values: kvs
                        .into_iter()
                        .map(|(key, value)| KeyValue {
                            key,
                            value,
                            key_strindex: 0,
                        })
                        .collect(),
                }))
            }),
        ]
    })
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    vec(
        (
            text(),
            prop::option::weighted(0.9, any_value()),
            prop_oneof![4 => Just(0), 1 => any::<i32>()],
        ),
        0..4,
    )
    .prop_map(|kvs| {
        kvs.into_iter()
            .map(|(key, value, key_strindex)| KeyValue {
                key,
                value,
                key_strindex,
            })
            .collect()
    })
}

fn exemplars() -> impl Strategy<Value = Vec<Exemplar>> {
    vec(
        (
            attributes(),
            any_u64(),
            vec(any::<u8>(), 0..9),
            vec(any::<u8>(), 0..17),
            prop_oneof![
                Just(None),
                any_f64().prop_map(|d| Some(exemplar::Value::AsDouble(d))),
                any_i64().prop_map(|i| Some(exemplar::Value::AsInt(i))),
            ],
        ),
        0..3,
    )
    .prop_map(|es| {
        es.into_iter()
            .map(
                |(filtered_attributes, time_unix_nano, span_id, trace_id, value)| Exemplar {
                    filtered_attributes,
                    time_unix_nano,
                    span_id,
                    trace_id,
                    value,
                },
            )
            .collect()
    })
}

fn number_points() -> impl Strategy<Value = Vec<NumberDataPoint>> {
    points_with(attributes(), exemplars())
}

/// Up to three number points with attributes and exemplars drawn from the given strategies.
fn points_with(
    attributes: impl Strategy<Value = Vec<KeyValue>>,
    exemplars: impl Strategy<Value = Vec<Exemplar>>,
) -> impl Strategy<Value = Vec<NumberDataPoint>> {
    vec(
        (
            attributes,
            any_u64(),
            any_u64(),
            exemplars,
            any::<u32>(),
            prop_oneof![
                Just(None),
                any_f64().prop_map(|d| Some(number_data_point::Value::AsDouble(d))),
                any_i64().prop_map(|i| Some(number_data_point::Value::AsInt(i))),
            ],
        ),
        0..4,
    )
    .prop_map(|ps| {
        ps.into_iter()
            .map(
                |(attributes, start, time, exemplars, flags, value)| NumberDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    exemplars,
                    flags,
                    value,
                },
            )
            .collect()
    })
}

fn histogram_points() -> impl Strategy<Value = Vec<HistogramDataPoint>> {
    vec(
        (
            (attributes(), any_u64(), any_u64(), any_u64()),
            (
                prop::option::of(any_f64()),
                vec(any_u64(), 0..5),
                vec(finite_f64(), 0..4),
            ),
            (exemplars(), any::<u32>()),
            (prop::option::of(any_f64()), prop::option::of(any_f64())),
        ),
        0..3,
    )
    .prop_map(|ps| {
        ps.into_iter()
            .map(
                |(
                    (attributes, start, time, count),
                    (sum, buckets, bounds),
                    (ex, flags),
                    (min, max),
                )| {
                    HistogramDataPoint {
                        attributes,
                        start_time_unix_nano: start,
                        time_unix_nano: time,
                        count,
                        sum,
                        bucket_counts: buckets,
                        explicit_bounds: bounds,
                        exemplars: ex,
                        flags,
                        min,
                        max,
                    }
                },
            )
            .collect()
    })
}

fn buckets() -> impl Strategy<Value = Option<Buckets>> {
    prop::option::of(
        (any::<i32>(), vec(any_u64(), 0..5)).prop_map(|(offset, bucket_counts)| Buckets {
            offset,
            bucket_counts,
        }),
    )
}

fn exp_histogram_points() -> impl Strategy<Value = Vec<ExponentialHistogramDataPoint>> {
    vec(
        (
            (attributes(), any_u64(), any_u64(), any_u64()),
            (prop::option::of(any_f64()), any::<i32>(), any_u64()),
            (buckets(), buckets(), any::<u32>(), exemplars()),
            (
                prop::option::of(any_f64()),
                prop::option::of(any_f64()),
                finite_f64(),
            ),
        ),
        0..3,
    )
    .prop_map(|ps| {
        ps.into_iter()
            .map(
                |(
                    (attributes, start, time, count),
                    (sum, scale, zero_count),
                    (positive, negative, flags, exemplars),
                    (min, max, zero_threshold),
                )| ExponentialHistogramDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    count,
                    sum,
                    scale,
                    zero_count,
                    positive,
                    negative,
                    flags,
                    exemplars,
                    min,
                    max,
                    zero_threshold,
                },
            )
            .collect()
    })
}

fn summary_points() -> impl Strategy<Value = Vec<SummaryDataPoint>> {
    vec(
        (
            (attributes(), any_u64(), any_u64(), any_u64()),
            finite_f64(),
            vec((any_f64(), any_f64()), 0..4),
            any::<u32>(),
        ),
        0..3,
    )
    .prop_map(|ps| {
        ps.into_iter()
            .map(
                |((attributes, start, time, count), sum, qs, flags)| SummaryDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    count,
                    sum,
                    quantile_values: qs
                        .into_iter()
                        .map(|(quantile, value)| ValueAtQuantile { quantile, value })
                        .collect(),
                    flags,
                },
            )
            .collect()
    })
}

fn temporality() -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0..3i32, 1 => any::<i32>()]
}

fn metric_data() -> impl Strategy<Value = Option<metric::Data>> {
    prop_oneof![
        1 => Just(None),
        3 => number_points().prop_map(|data_points| Some(metric::Data::Gauge(Gauge { data_points }))),
        3 => (number_points(), temporality(), any::<bool>()).prop_map(|(data_points, t, m)| {
            Some(metric::Data::Sum(Sum {
                data_points,
                aggregation_temporality: t,
                is_monotonic: m,
            }))
        }),
        2 => (histogram_points(), temporality()).prop_map(|(data_points, t)| {
            Some(metric::Data::Histogram(Histogram {
                data_points,
                aggregation_temporality: t,
            }))
        }),
        2 => (exp_histogram_points(), temporality()).prop_map(|(data_points, t)| {
            Some(metric::Data::ExponentialHistogram(ExponentialHistogram {
                data_points,
                aggregation_temporality: t,
            }))
        }),
        2 => summary_points().prop_map(|data_points| Some(metric::Data::Summary(Summary { data_points }))),
    ]
}

fn metrics() -> impl Strategy<Value = Vec<Metric>> {
    vec((text(), text(), text(), attributes(), metric_data()), 0..4).prop_map(|ms| {
        ms.into_iter()
            .map(|(name, description, unit, metadata, data)| Metric {
                name,
                description,
                unit,
                metadata,
                data,
            })
            .collect()
    })
}

fn entity_refs() -> impl Strategy<Value = Vec<EntityRef>> {
    vec((text(), text(), vec(text(), 0..3), vec(text(), 0..3)), 0..2).prop_map(|es| {
        es.into_iter()
            .map(
                |(schema_url, r#type, id_keys, description_keys)| EntityRef {
                    schema_url,
                    r#type,
                    id_keys,
                    description_keys,
                },
            )
            .collect()
    })
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
    let scope_metrics = vec(
        (scope, metrics(), text()).prop_map(|(scope, metrics, schema_url)| ScopeMetrics {
            scope,
            metrics,
            schema_url,
        }),
        0..3,
    );
    let resource = prop::option::of((attributes(), any::<u32>(), entity_refs()).prop_map(
        |(attributes, dropped, entity_refs)| Resource {
            attributes,
            dropped_attributes_count: dropped,
            entity_refs,
        },
    ));
    vec(
        (resource, scope_metrics, text()).prop_map(|(resource, scope_metrics, schema_url)| {
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

/// Attributes whose values are scalars or unset: a batch of these can be kept whole.
fn plain_attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    let value = prop_oneof![
        Just(None),
        text().prop_map(|s| Some(AnyKind::StringValue(s))),
        any::<bool>().prop_map(|b| Some(AnyKind::BoolValue(b))),
        any_i64().prop_map(|i| Some(AnyKind::IntValue(i))),
        any_f64().prop_map(|d| Some(AnyKind::DoubleValue(d))),
    ];
    vec((text(), prop::option::weighted(0.9, value)), 0..4).prop_map(|kvs| {
        kvs.into_iter()
            .map(|(key, value)| KeyValue {
                key,
                value: value.map(|value| AnyValue { value }),
                key_strindex: 0,
            })
            .collect()
    })
}

fn plain_points() -> impl Strategy<Value = Vec<NumberDataPoint>> {
    points_with(plain_attributes(), Just(Vec::new()))
}

/// A request a thread keeps whole after its pipeline (see `component::recycle`): gauges
/// and sums without exemplars, scalar attributes, no entity refs; the rest as
/// [`request`] varies it.
fn plain_request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
    let data = prop_oneof![
        1 => Just(None),
        3 => plain_points().prop_map(|data_points| Some(metric::Data::Gauge(Gauge { data_points }))),
        3 => (plain_points(), temporality(), any::<bool>()).prop_map(|(data_points, t, m)| {
            Some(metric::Data::Sum(Sum {
                data_points,
                aggregation_temporality: t,
                is_monotonic: m,
            }))
        }),
    ];
    let metrics = vec((text(), text(), text(), plain_attributes(), data), 0..4).prop_map(|ms| {
        ms.into_iter()
            .map(|(name, description, unit, metadata, data)| Metric {
                name,
                description,
                unit,
                metadata,
                data,
            })
            .collect::<Vec<_>>()
    });
    let scope = prop::option::of((text(), text(), plain_attributes(), any::<u32>()).prop_map(
        |(name, version, attributes, dropped)| InstrumentationScope {
            name,
            version,
            attributes,
            dropped_attributes_count: dropped,
        },
    ));
    let scope_metrics = vec(
        (scope, metrics, text()).prop_map(|(scope, metrics, schema_url)| ScopeMetrics {
            scope,
            metrics,
            schema_url,
        }),
        0..3,
    );
    let resource = prop::option::of((plain_attributes(), any::<u32>()).prop_map(
        |(attributes, dropped)| Resource {
            attributes,
            dropped_attributes_count: dropped,
            entity_refs: Vec::new(),
        },
    ));
    vec(
        (resource, scope_metrics, text()).prop_map(|(resource, scope_metrics, schema_url)| {
            ResourceMetrics {
                resource,
                scope_metrics,
                schema_url,
            }
        }),
        1..3,
    )
    .prop_map(|resource_metrics| ExportMetricsServiceRequest { resource_metrics })
}

// ---- helpers -------------------------------------------------------------------------

fn old(body: &[u8]) -> Result<ExportMetricsServiceRequest, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

fn new(body: &[u8]) -> Result<ExportMetricsServiceRequest, String> {
    decode_metrics(body).map_err(|e| e.to_string())
}

/// Equal, with NaN equal to itself (same bits on the wire).
fn equal(a: &ExportMetricsServiceRequest, b: &ExportMetricsServiceRequest) -> bool {
    a == b || a.encode_to_vec() == b.encode_to_vec()
}

/// Both decoders accept `body` and agree.
fn assert_same(body: &[u8]) -> Result<ExportMetricsServiceRequest, TestCaseError> {
    let o = old(body).map_err(|e| TestCaseError::fail(format!("old refused: {e}")))?;
    let n = new(body).map_err(|e| {
        TestCaseError::fail(format!(
            "new refused: {e}\n{}",
            String::from_utf8_lossy(body)
        ))
    })?;
    prop_assert!(
        equal(&o, &n),
        "differ on {}\n{}",
        String::from_utf8_lossy(body),
        first_difference(&o, &n)
    );
    Ok(n)
}

/// Where two messages first differ, as lines of their pretty debug output.
fn first_difference(
    old: &ExportMetricsServiceRequest,
    new: &ExportMetricsServiceRequest,
) -> String {
    let (o, n) = (format!("{old:#?}"), format!("{new:#?}"));
    let at = o
        .lines()
        .zip(n.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    let window = |s: &str| {
        s.lines()
            .skip(at.saturating_sub(12))
            .take(16)
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!("old:\n{}\nnew:\n{}", window(&o), window(&n))
}

// ---- JSON rewriting that keeps every scalar's text ------------------------------------
//
// serde_json's default float parser is not exact in the last bit, so a document that
// went through `serde_json::Value` and back can carry slightly different doubles. These
// rewrites therefore work on a tree that keeps scalars (strings, numbers, literals) as
// their source text and objects as ordered member lists (duplicates included).

#[derive(Debug, Clone)]
enum Node {
    Obj(Vec<(String, Node)>),
    Arr(Vec<Node>),
    /// A scalar's source text.
    Raw(String),
}

impl Node {
    fn parse(body: &[u8]) -> Option<Node> {
        let text = std::str::from_utf8(body).ok()?;
        let mut p = Parser { s: text, i: 0 };
        let v = p.value(0)?;
        p.ws();
        (p.i == text.len()).then_some(v)
    }

    fn print(&self, out: &mut String) {
        match self {
            Node::Raw(t) => out.push_str(t),
            Node::Arr(items) => {
                out.push('[');
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    item.print(out);
                }
                out.push(']');
            }
            Node::Obj(members) => {
                out.push('{');
                for (n, (k, v)) in members.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    v.print(out);
                }
                out.push('}');
            }
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut s = String::new();
        self.print(&mut s);
        s.into_bytes()
    }

    fn is_null(&self) -> bool {
        matches!(self, Node::Raw(t) if t == "null")
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Node::Obj(m) => m.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn obj_mut(&mut self) -> Option<&mut Vec<(String, Node)>> {
        match self {
            Node::Obj(m) => Some(m),
            _ => None,
        }
    }

    fn items_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        match self {
            Node::Arr(items) => Some(items.iter_mut()),
            _ => None,
        }
        .into_iter()
        .flatten()
    }

    /// Set `key` to `default` unless present.
    fn or_insert(&mut self, key: &str, default: &str) {
        if let Node::Obj(m) = self
            && !m.iter().any(|(k, _)| k == key)
        {
            m.push((key.to_string(), Node::Raw(default.to_string())));
        }
    }
}

struct Parser<'a> {
    s: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        let b = self.s.as_bytes();
        while self.i < b.len() && matches!(b[self.i], b' ' | b'\n' | b'\r' | b'\t') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn string(&mut self) -> Option<&str> {
        let b = self.s.as_bytes();
        let start = self.i;
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        while *b.get(self.i)? != b'"' {
            self.i += if b[self.i] == b'\\' { 2 } else { 1 };
        }
        self.i += 1;
        self.s.get(start..self.i)
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        if depth > 200 {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'{' => {
                self.i += 1;
                let mut m = Vec::new();
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(Node::Obj(m));
                }
                loop {
                    self.ws();
                    // A key serde_json cannot decode (a lone surrogate escape) can only be
                    // in a value the new decoder skipped: any stand-in will do.
                    let key: String = serde_json::from_str(self.string()?)
                        .unwrap_or_else(|_| "\u{fffd}".to_string());
                    self.ws();
                    if self.peek()? != b':' {
                        return None;
                    }
                    self.i += 1;
                    m.push((key, self.value(depth + 1)?));
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Some(Node::Obj(m));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(Node::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(Node::Arr(items));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => Some(Node::Raw(self.string()?.to_string())),
            _ => {
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then(|| Node::Raw(self.s[start..self.i].to_string()))
            }
        }
    }
}

/// Keys holding 64-bit integers, which the old serializer writes as strings.
const INT64_KEYS: &[&str] = &[
    "timeUnixNano",
    "startTimeUnixNano",
    "count",
    "zeroCount",
    "asInt",
    "intValue",
];

/// Rewrite 64-bit integer strings as JSON numbers (where `pick` says so).
fn ints_as_numbers(v: &mut Node, pick: &mut impl FnMut() -> bool) {
    match v {
        Node::Obj(m) => {
            for (k, child) in m.iter_mut() {
                if INT64_KEYS.contains(&k.as_str()) {
                    to_number(child, pick);
                } else if k == "bucketCounts" {
                    child.items_mut().for_each(|i| to_number(i, pick));
                } else {
                    ints_as_numbers(child, pick);
                }
            }
        }
        Node::Arr(items) => items.iter_mut().for_each(|i| ints_as_numbers(i, pick)),
        Node::Raw(_) => {}
    }
}

fn to_number(v: &mut Node, pick: &mut impl FnMut() -> bool) {
    if let Node::Raw(t) = v
        && let Some(inner) = t.strip_prefix('"').and_then(|t| t.strip_suffix('"'))
        && (inner.parse::<u64>().is_ok() || inner.parse::<i64>().is_ok())
        && pick()
    {
        *t = inner.to_string();
    }
}

/// camelCase field names to proto snake_case (every key: generated requests have no
/// free-form keys).
fn snake_keys(v: &mut Node) {
    match v {
        Node::Obj(m) => {
            for (k, child) in m.iter_mut() {
                snake_keys(child);
                let mut s = String::new();
                for c in k.chars() {
                    if c.is_ascii_uppercase() {
                        s.push('_');
                        s.push(c.to_ascii_lowercase());
                    } else {
                        s.push(c);
                    }
                }
                *k = s;
            }
        }
        Node::Arr(items) => items.iter_mut().for_each(snake_keys),
        Node::Raw(_) => {}
    }
}

/// Add an unknown field holding `junk` to every object (where `pick` says so).
fn add_unknown(v: &mut Node, junk: &Node, pick: &mut impl FnMut() -> bool) {
    match v {
        Node::Obj(m) => {
            m.iter_mut().for_each(|(_, c)| add_unknown(c, junk, pick));
            if pick() {
                let at = m.len() / 2;
                m.insert(at, ("someFutureField".into(), junk.clone()));
            }
        }
        Node::Arr(items) => items.iter_mut().for_each(|i| add_unknown(i, junk, pick)),
        Node::Raw(_) => {}
    }
}

/// Members a oneof may carry besides the one the serializer wrote, valid for both
/// decoders: `(oneof, member, value)`. The old decoder takes the first member present
/// for a metric's data and a point's or exemplar's value, the last for an `AnyValue`.
const EXTRA_MEMBERS: &[(&str, &str, &str)] = &[
    ("any", "stringValue", r#""extra""#),
    ("any", "intValue", r#""-7""#),
    ("any", "intValue", "7"),
    ("any", "boolValue", "true"),
    ("any", "doubleValue", "2.5"),
    ("any", "bytesValue", r#""AQI=""#),
    ("any", "arrayValue", r#"{"values":[{"intValue":"1"}]}"#),
    ("any", "kvlistValue", r#"{"values":[]}"#),
    ("any", "stringValue", "null"),
    ("any", "stringValueStrindex", "3"),
    (
        "data",
        "sum",
        r#"{"isMonotonic":true,"dataPoints":[{"asInt":"9"}]}"#,
    ),
    ("data", "gauge", r#"{"dataPoints":[]}"#),
    ("data", "summary", r#"{"dataPoints":[{"count":"1"}]}"#),
    ("data", "histogram", r#"{"aggregationTemporality":1}"#),
    (
        "data",
        "exponentialHistogram",
        r#"{"dataPoints":[{"scale":-2}]}"#,
    ),
    ("number", "asInt", r#""42""#),
    ("number", "asInt", "-42"),
    ("number", "asDouble", "0.25"),
    ("number", "asDouble", "-3"),
    ("number", "asDouble", "18446744073709551615"),
    ("number", "asDouble", r#""NaN""#),
    ("number", "asInt", "1.5"),
];

/// Which oneof an object holds, by the members the serializer writes (a metric always
/// has its `name` written; histogram points have a `sum` too).
fn oneof_kind(members: &[(String, Node)]) -> Option<&'static str> {
    let is_metric = members.iter().any(|(k, _)| k == "name");
    members.iter().find_map(|(k, _)| match k.as_str() {
        "stringValue" | "boolValue" | "intValue" | "doubleValue" | "arrayValue" | "kvlistValue"
        | "bytesValue" => Some("any"),
        "gauge" | "sum" | "histogram" | "exponentialHistogram" | "summary" if is_metric => {
            Some("data")
        }
        "asDouble" | "asInt" => Some("number"),
        _ => None,
    })
}

/// Add extra oneof members before or after the written one (where `pick` says so).
fn add_oneof_members(v: &mut Node, pick: &mut impl FnMut() -> bool, n: &mut usize) {
    match v {
        Node::Obj(m) => {
            m.iter_mut()
                .for_each(|(_, c)| add_oneof_members(c, pick, n));
            // A NaN value is written as `"asDouble":null`: the old decoder then leaves the
            // point without a value whatever follows, the new one takes `null` as absent
            // and reads the next member (a documented difference), so leave those alone.
            let null_number = m
                .iter()
                .any(|(k, v)| matches!(k.as_str(), "asDouble" | "asInt") && v.is_null());
            if let Some(kind) = oneof_kind(m)
                && !(kind == "number" && null_number)
                && pick()
            {
                let candidates: Vec<_> = EXTRA_MEMBERS.iter().filter(|e| e.0 == kind).collect();
                *n += 1;
                let (_, member, value) = candidates[*n % candidates.len()];
                let at = if pick() { 0 } else { m.len() };
                m.insert(at, (member.to_string(), Node::Raw(value.to_string())));
            }
        }
        Node::Arr(items) => items.iter_mut().for_each(|i| add_oneof_members(i, pick, n)),
        Node::Raw(_) => {}
    }
}

/// A deterministic coin from a seed.
fn coin(seed: u64) -> impl FnMut() -> bool {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x & 1 == 1
    }
}

// ---- the documented loosenings, written out for the old decoder ----------------------

/// Rewrite a JSON document the new decoder accepted into the form the old decoder must
/// accept with the same result: `null` object members removed (absent field), omitted
/// `KeyValue.key`, `ArrayValue.values`, `KeyValueList.values` and `EntityRef` fields
/// written as their defaults, undecodable strings in skipped values blanked.
/// Schema-aware only where a default must be added.
fn normalize(body: &[u8]) -> Option<Vec<u8>> {
    let mut v = Node::parse(body)?;
    undecodable_strings(&mut v);
    unparsable_numbers(&mut v);
    drop_nulls(&mut v);
    request_defaults(&mut v);
    Some(v.to_bytes())
}

/// Strings serde_json cannot decode (lone surrogate escapes) become `""`. The new decoder
/// only accepts them inside values it skips unread, where the old one sometimes decoded
/// them (unknown fields of its flattened messages): a documented difference.
fn undecodable_strings(v: &mut Node) {
    match v {
        Node::Raw(t) => {
            if t.starts_with('"') && serde_json::from_str::<String>(t).is_err() {
                *t = "\"\"".to_string();
            }
        }
        Node::Arr(items) => items.iter_mut().for_each(undecodable_strings),
        Node::Obj(m) => m.iter_mut().for_each(|(_, c)| undecodable_strings(c)),
    }
}

/// Numbers serde_json refuses to parse (`2E07209303`: out of range) become `0`. The new
/// decoder refuses them in fields it reads (checked in
/// `out_of_range_numbers_are_refused_where_read_and_skipped_elsewhere`) and checks only
/// the syntax of values it skips, as serde_json's own skipper does; the old one buffered
/// the unknown fields of its flattened messages and so parsed them: the same documented
/// difference as for strings.
fn unparsable_numbers(v: &mut Node) {
    match v {
        Node::Raw(t) => {
            let number = t.starts_with(|c: char| c == '-' || c.is_ascii_digit());
            if number && serde_json::from_str::<serde_json::Value>(t).is_err() {
                *t = "0".to_string();
            }
        }
        Node::Arr(items) => items.iter_mut().for_each(unparsable_numbers),
        Node::Obj(m) => m.iter_mut().for_each(|(_, c)| unparsable_numbers(c)),
    }
}

fn drop_nulls(v: &mut Node) {
    match v {
        Node::Obj(m) => {
            m.retain(|(_, c)| !c.is_null());
            m.iter_mut().for_each(|(_, c)| drop_nulls(c));
        }
        Node::Arr(items) => items.iter_mut().for_each(drop_nulls),
        Node::Raw(_) => {}
    }
}

/// Leave members of objects out (where `drop` says so) or write them as `null` (where
/// `null` says so), at every depth.
fn leave_out_members(
    v: &mut Node,
    drop: &mut impl FnMut() -> bool,
    null: &mut impl FnMut() -> bool,
) {
    match v {
        Node::Obj(m) => {
            m.retain(|_| !drop());
            for (_, c) in m.iter_mut() {
                if null() {
                    *c = Node::Raw("null".into());
                } else {
                    leave_out_members(c, drop, null);
                }
            }
        }
        Node::Arr(items) => items
            .iter_mut()
            .for_each(|i| leave_out_members(i, drop, null)),
        Node::Raw(_) => {}
    }
}

/// The array at `key` of an object, element by element.
fn each<'a>(v: &'a mut Node, key: &str) -> impl Iterator<Item = &'a mut Node> {
    v.get_mut(key).into_iter().flat_map(Node::items_mut)
}

fn request_defaults(req: &mut Node) {
    for rm in each(req, "resourceMetrics") {
        if let Some(res) = rm.get_mut("resource") {
            each(res, "attributes").for_each(kv_defaults);
            for er in each(res, "entityRefs") {
                er.or_insert("schemaUrl", "\"\"");
                er.or_insert("type", "\"\"");
                er.or_insert("idKeys", "[]");
                er.or_insert("descriptionKeys", "[]");
            }
        }
        for sm in each(rm, "scopeMetrics") {
            if let Some(scope) = sm.get_mut("scope") {
                each(scope, "attributes").for_each(kv_defaults);
            }
            for m in each(sm, "metrics") {
                each(m, "metadata").for_each(kv_defaults);
                let Some(members) = m.obj_mut() else { continue };
                for (kind, data) in members.iter_mut() {
                    if !matches!(
                        kind.as_str(),
                        "gauge" | "sum" | "histogram" | "exponentialHistogram" | "summary"
                    ) {
                        continue;
                    }
                    for p in each(data, "dataPoints") {
                        each(p, "attributes").for_each(kv_defaults);
                        for e in each(p, "exemplars") {
                            each(e, "filteredAttributes").for_each(kv_defaults);
                        }
                    }
                }
            }
        }
    }
}

fn kv_defaults(kv: &mut Node) {
    if kv.obj_mut().is_none() {
        return;
    }
    kv.or_insert("key", "\"\"");
    if let Some(v) = kv.get_mut("value") {
        any_defaults(v);
    }
}

fn any_defaults(v: &mut Node) {
    let Some(members) = v.obj_mut() else { return };
    for (member, inner) in members.iter_mut() {
        if inner.obj_mut().is_none() {
            continue;
        }
        match member.as_str() {
            "arrayValue" => {
                inner.or_insert("values", "[]");
                each(inner, "values").for_each(any_defaults);
            }
            "kvlistValue" => {
                inner.or_insert("values", "[]");
                each(inner, "values").for_each(kv_defaults);
            }
            _ => {}
        }
    }
}

/// Neither decoder panics on `body`; if the new one accepts it, the old one accepts the
/// normalized body with the same result.
fn check_accepts_no_more(body: &[u8]) -> Result<(), TestCaseError> {
    let n = new(body);
    let o = old(body);
    if let Ok(n) = n {
        if let Ok(o) = &o
            && equal(o, &n)
        {
            return Ok(());
        }
        let norm = normalize(body).ok_or_else(|| {
            TestCaseError::fail(format!(
                "new accepted what is not a JSON document: {}",
                String::from_utf8_lossy(body)
            ))
        })?;
        let o = old(&norm).map_err(|e| {
            TestCaseError::fail(format!(
                "new accepted, old refused even normalized ({e}):\n{}\n{}",
                String::from_utf8_lossy(body),
                String::from_utf8_lossy(&norm)
            ))
        })?;
        prop_assert!(
            equal(&o, &n),
            "accepted by both, different results:\n{}\nnew {n:?}\nold {o:?}",
            String::from_utf8_lossy(body)
        );
    }
    Ok(())
}

/// A scalar or small value to splice over another value.
fn replacement() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "null",
        "true",
        "false",
        "0",
        "-1",
        "1.5",
        "-0",
        "1e3",
        "\"\"",
        "\"x\"",
        "\"NaN\"",
        "\"Infinity\"",
        "\"-5\"",
        "\"+5\"",
        "18446744073709551616",
        "9223372036854775808",
        "\"18446744073709551615\"",
        "{}",
        "[]",
        "[null]",
        "[{}]",
        "{\"a\":1}",
        "\"0x00\"",
        "\"AA==\"",
        "\"\\u0000\"",
        "\"\\ud800\"",
    ])
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(prop::sample::Index),
    Flip(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index),
    /// Replace the n-th scalar value (string, number, literal) with another value.
    Splice(prop::sample::Index, &'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = prop_oneof![
        3 => prop::sample::select(b"{}[]\",:0123456789-+.eEnulltrfas \\x".to_vec()),
        1 => any::<u8>(),
    ];
    prop_oneof![
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        2 => (any::<prop::sample::Index>(), byte.clone()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (any::<prop::sample::Index>(), byte).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Delete),
        4 => (any::<prop::sample::Index>(), replacement()).prop_map(|(i, r)| Mutation::Splice(i, r)),
    ]
}

fn apply(body: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = body.to_vec();
    for m in muts {
        match m {
            Mutation::Truncate(i) => {
                let at = i.index(b.len() + 1);
                b.truncate(at);
            }
            Mutation::Flip(i, byte) if !b.is_empty() => {
                let at = i.index(b.len());
                b[at] = *byte;
            }
            Mutation::Insert(i, byte) => {
                let at = i.index(b.len() + 1);
                b.insert(at, *byte);
            }
            Mutation::Delete(i) if !b.is_empty() => {
                let at = i.index(b.len());
                b.remove(at);
            }
            Mutation::Splice(i, with) => {
                let spans = scalar_spans(&b);
                if !spans.is_empty() {
                    let (s, e) = spans[i.index(spans.len())];
                    b.splice(s..e, with.bytes());
                }
            }
            _ => {}
        }
    }
    b
}

/// Bodies the mutations start from: the agent's pushes and generated requests.
fn seed_body() -> impl Strategy<Value = Vec<u8>> {
    let agent = (0usize..4).prop_map(|k| {
        let push = testkit::AgentPush::new("prod", "gpu-node-01", 0.92)
            .gpu("NVIDIA H100 80GB HBM3", 8)
            .world(4, 1);
        match k {
            0 => push.to_json(),
            1 => push.straggler_event_json(1, 0.8, "e1"),
            2 => testkit::nccl_export_json(
                Some("c"),
                "n",
                &[testkit::NcclPoint::all_reduce("ab", 1, 8, 3.5, 17)],
            ),
            _ => {
                let mut p = push;
                p.with_cgroup_sums = true;
                p.to_json()
            }
        }
        .into_bytes()
    });
    prop_oneof![
        1 => agent,
        2 => request().prop_map(|r| serde_json::to_vec(&r).unwrap()),
    ]
}

// ---- properties ----------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever opentelemetry-proto's serializer writes, both decoders read the same.
    #[test]
    fn generated_requests_decode_identically(req in request(), pretty in any::<bool>()) {
        let body = if pretty {
            serde_json::to_vec_pretty(&req).unwrap()
        } else {
            serde_json::to_vec(&req).unwrap()
        };
        assert_same(&body)?;
    }

    /// A decode that takes its strings and vectors from the pool a finished batch of any
    /// shape (or a refused body) left on the thread reads the same as the old path: the
    /// pool changes where memory comes from, never what is decoded.
    #[test]
    fn decodes_from_a_recycled_pool_read_the_same(
        earlier in vec(request(), 1..3),
        req in request(),
        cut in any::<prop::sample::Index>(),
    ) {
        for e in &earlier {
            let n = new(&serde_json::to_vec(e).unwrap()).unwrap();
            recycle(n.resource_metrics);
        }
        // A body refused half-way has taken buffers from the pool (and frees them).
        let body = serde_json::to_vec(&req).unwrap();
        let _ = new(&body[..cut.index(body.len())]);
        assert_same(&body)?;
    }

    /// A decode into the batch the thread kept whole (the last one it finished, small and
    /// plain) reads the same as the old path, whatever that batch held and whatever the
    /// body is, also after a refused body overwrote part of it: reading in place changes
    /// where memory comes from, never what is decoded.
    #[test]
    fn decodes_into_a_kept_batch_read_the_same(
        earlier in plain_request(),
        req in prop_oneof![plain_request(), request()],
        cut_first in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let n = new(&serde_json::to_vec(&earlier).unwrap()).unwrap();
        recycle(n.resource_metrics);
        let pool = component::recycle::take_thread_pool();
        let kept = pool.keeps_tree();
        component::recycle::put_thread_pool(pool);
        prop_assert!(kept, "a plain batch is kept whole");
        let body = serde_json::to_vec(&req).unwrap();
        if cut_first {
            let _ = new(&body[..cut.index(body.len())]);
        }
        assert_same(&body)?;
    }

    /// A body read by replaying the shape of the body before it (the decoder's
    /// `reader::tape`) reads what a full decode of it reads: the same body again (always
    /// a replay), and the body with values of any kind spliced over its values (a replay
    /// where the new values are of the recorded kinds, a full decode otherwise; the
    /// request, or the error word for word).
    #[test]
    fn replays_read_what_a_full_decode_reads(
        req in prop_oneof![plain_request(), request()],
        pretty in any::<bool>(),
        splices in vec((any::<prop::sample::Index>(), replacement()), 0..4),
    ) {
        use collector_host::receiver::otlp_json::{forget_shape, last_decode_replayed, take_origin};
        let body = if pretty {
            serde_json::to_vec_pretty(&req).unwrap()
        } else {
            serde_json::to_vec(&req).unwrap()
        };
        let muts: Vec<Mutation> =
            splices.into_iter().map(|(i, with)| Mutation::Splice(i, with)).collect();
        let spliced = apply(&body, &muts);
        // Full decodes: nothing recorded or kept on the thread.
        let full = |b: &[u8]| {
            forget_shape();
            drop(component::recycle::take_thread_pool());
            let out = new(b);
            assert!(!last_decode_replayed());
            out
        };
        let (want, want_spliced) = (full(&body), full(&spliced));
        let first = want.as_ref().expect("a generated request decodes");
        // Handed back unchanged, as the receiver does: with its origin.
        let give_back = |req: ExportMetricsServiceRequest| {
            component::recycle::recycle_on_this_thread_from(req.resource_metrics, take_origin());
        };
        give_back(new(&body).unwrap());
        // Only a batch kept whole (small and plain) is replayed into.
        let pool = component::recycle::take_thread_pool();
        let kept = pool.keeps_tree();
        component::recycle::put_thread_pool(pool);
        let again = new(&body).unwrap();
        prop_assert!(
            last_decode_replayed() == (kept && body.len() <= 32 * 1024),
            "the same body again is replayed when kept ({kept}, {} bytes)",
            body.len()
        );
        prop_assert!(equal(&again, first), "{}", first_difference(first, &again));
        give_back(again);
        let got = new(&spliced);
        match (&got, &want_spliced) {
            (Ok(a), Ok(b)) => prop_assert!(
                equal(a, b),
                "replayed {}: {}\n{}",
                last_decode_replayed(),
                String::from_utf8_lossy(&spliced),
                first_difference(b, a)
            ),
            (a, b) => prop_assert_eq!(a.as_ref().err(), b.as_ref().err()),
        }
        // And back: a replay against the tape as the last replay moved it.
        if let Ok(req) = got {
            give_back(req);
        }
        let back = new(&body).unwrap();
        prop_assert!(equal(&back, first), "back: {}", first_difference(first, &back));
    }

    /// Read in place, a body with any fields left out or `null` (absent either way) gives
    /// what a thread with nothing kept gives: every field a used batch held and the body
    /// does not write is reset.
    #[test]
    fn fields_left_out_of_a_kept_batch_read_as_absent(
        earlier in plain_request(),
        req in plain_request(),
        seed in any::<u64>(),
        null_seed in any::<u64>(),
    ) {
        let mut doc = Node::parse(&serde_json::to_vec(&req).unwrap()).unwrap();
        // A member in four left out, one in eight `null`.
        let (mut d, mut n) = (coin(seed), coin(null_seed));
        leave_out_members(&mut doc, &mut || d() && d(), &mut || n() && n() && n());
        let body = doc.to_bytes();
        let fresh = {
            let body = body.clone();
            std::thread::spawn(move || new(&body)).join().unwrap()
        };
        let n = new(&serde_json::to_vec(&earlier).unwrap()).unwrap();
        recycle(n.resource_metrics);
        let reused = new(&body);
        match (&fresh, &reused) {
            (Ok(a), Ok(b)) => prop_assert!(
                equal(a, b),
                "differ on {}\n{}",
                String::from_utf8_lossy(&body),
                first_difference(a, b)
            ),
            (a, b) => prop_assert_eq!(a.as_ref().err(), b.as_ref().err()),
        }
    }

    /// 64-bit integers as JSON numbers instead of strings, unknown fields anywhere: both
    /// decoders still agree, and on the same message as the canonical body.
    #[test]
    fn numbers_and_unknown_fields_change_nothing(
        req in request(),
        seed in any::<u64>(),
        junk in prop::sample::select(vec![
            "null", "1", "\"s\"", "[1,{\"a\":[]}]", "{\"gauge\":{\"dataPoints\":5},\"x\":null}",
        ]),
    ) {
        let canonical = serde_json::to_vec(&req).unwrap();
        let want = assert_same(&canonical)?;
        let mut v = Node::parse(&canonical).unwrap();
        ints_as_numbers(&mut v, &mut coin(seed));
        let junk = Node::parse(junk.as_bytes()).unwrap();
        add_unknown(&mut v, &junk, &mut coin(seed.rotate_left(17)));
        let got = assert_same(&v.to_bytes())?;
        prop_assert!(equal(&got, &want));
    }

    /// Oneofs with more than one member: the same member wins in both decoders.
    #[test]
    fn extra_oneof_members_resolve_as_before(req in request(), seed in any::<u64>()) {
        let mut v = Node::parse(&serde_json::to_vec(&req).unwrap()).unwrap();
        add_oneof_members(&mut v, &mut coin(seed), &mut (seed as usize));
        assert_same(&v.to_bytes())?;
    }

    /// proto snake_case names read as the camelCase ones (the old decoder ignored them).
    #[test]
    fn snake_case_names_decode_like_camel_case(req in request()) {
        let canonical = serde_json::to_vec(&req).unwrap();
        let want = assert_same(&canonical)?;
        let mut v = Node::parse(&canonical).unwrap();
        snake_keys(&mut v);
        let got = new(&v.to_bytes()).map_err(TestCaseError::fail)?;
        prop_assert!(equal(&got, &want));
    }

    /// Mutated valid bodies: no panic; accepted only where the old path agrees.
    #[test]
    fn mutated_bodies_accept_no_more_than_before(
        body in seed_body(),
        muts in vec(mutation(), 1..4),
    ) {
        check_accepts_no_more(&apply(&body, &muts))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Arbitrary bytes, and strings of JSON punctuation: no panic; accepted only where
    /// the old path agrees.
    #[test]
    fn arbitrary_bytes_accept_no_more_than_before(
        bytes in prop_oneof![
            vec(any::<u8>(), 0..64),
            vec(prop::sample::select(b"{}[]\":,0 1-nulltrue\"resourceMetrics\"".to_vec()), 0..64),
        ],
    ) {
        check_accepts_no_more(&bytes)?;
    }
}

#[test]
fn normalize_writes_out_the_loosenings() {
    // The normalizer itself must be right, or the mutation property proves nothing.
    let body = br#"{"resourceMetrics":[{"resource":{"attributes":[{"value":{"arrayValue":{}}}],"entityRefs":[{}]},"schemaUrl":null}]}"#;
    assert!(old(body).is_err());
    let n = new(body).unwrap();
    let o = old(&normalize(body).unwrap()).unwrap();
    assert_eq!(n, o);
    // Scalars keep their text through the rewrites.
    let text = br#"{"a":[1.0000000000000002e-300,"x\u0041",null,-0],"b":{}}"#;
    assert_eq!(Node::parse(text).unwrap().to_bytes(), text.to_vec());
    check_accepts_no_more(body).unwrap();
    // A difference the normalizer does not explain is reported.
    let snake = br#"{"resource_metrics":[{}]}"#;
    assert!(check_accepts_no_more(snake).is_err());
}

#[test]
fn out_of_range_numbers_are_refused_where_read_and_skipped_elsewhere() {
    // Found by `mutated_bodies_accept_no_more_than_before`: an out-of-range number in an
    // unknown field of an `AnyValue`, which the old decoder buffered and parsed.
    let skipped = br#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"k","value":{"stringValueStrindex":2E07209303,"stringValue":"v"}}]}}]}"#;
    let n = new(skipped).expect("a skipped value is checked for syntax only");
    assert!(old(skipped).is_err(), "the old decoder parsed it");
    assert_eq!(n, old(&normalize(skipped).unwrap()).unwrap());
    check_accepts_no_more(skipped).unwrap();
    // Where the value is read, both refuse it.
    for body in [
        &br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[{"asDouble":2E07209303}]}}]}]}]}"#[..],
        br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","histogram":{"dataPoints":[{"sum":-1e400}]}}]}]}]}"#,
        br#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":1e999}}]}}]}"#,
    ] {
        let text = String::from_utf8_lossy(body);
        let e = new(body).expect_err(&text);
        assert!(e.contains("out of range"), "{text}: {e}");
        assert!(old(body).is_err(), "{text}");
    }
}
