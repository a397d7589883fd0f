//! Selective protobuf decoding for pass-through processors: decode an OTLP metrics batch
//! keeping only what a processor reads, and skip the rest at the wire level without
//! building it.
//!
//! A pass-through processor (`ingero`, `nccl_peer_lag`) reads a few metrics of each agent
//! push, two resource attributes and a few data-point attributes, and its output batch is
//! never used (the Go shim keeps its own `pmetric.Metrics`), so building the rest (strings,
//! attribute lists, points) is wasted work: with prost it is most of the call. Each
//! processor crate declares what its `process` reads ([`Selection`]); the result of
//! [`decode_selected`] equals a full prost decode passed through [`project`]:
//!
//! - metrics whose name is not selected are removed (resources and scopes are kept, also
//!   when left without metrics);
//! - resource attributes and the attributes of gauge and sum data points keep only the
//!   selected keys, every occurrence, in wire order (so "first occurrence wins" or any other
//!   lookup rule sees the same values); a resource left without metrics keeps no attributes
//!   (the processors read a resource's attributes only for the metrics they read);
//! - what no processor reads is left at its default: schema URLs, instrumentation scopes,
//!   metric descriptions, units and metadata, the resource's dropped-attribute count and
//!   entity references, exemplars;
//! - everything else (names, data kinds, timestamps, values, flags, sum temporality and
//!   monotonicity, histogram and summary metrics as a whole) is decoded as prost does,
//!   with the same rules for repeated fields (a repeated message merges, the last scalar
//!   or oneof member wins).
//!
//! Skipped parts are still checked for well-formed wire framing (tags, varints, lengths)
//! and for the wire type of known fields, not for their content (e.g. UTF-8 of their
//! strings, nesting depth of attribute values): the bytes come from the collector's own
//! marshaler, so this only matters for input that was never a valid batch. Whatever prost
//! accepts is accepted here with the same selected content (`tests/it/select_differential.rs`).

use WireType::LengthDelimited as Len;
use component::otlp::{
    AnyValue, AnyValueKind, ExportMetricsServiceRequest, Gauge, KeyValue, Metric, MetricKind,
    NumberDataPoint, NumberValue, Resource, ResourceMetrics, ScopeMetrics, Sum,
};
pub use component::recycle::Recycler;
use prost::Message;
use prost::encoding::{
    DecodeContext, WireType, bool as pbool, check_wire_type, decode_key, decode_varint, double,
    fixed64, int32, sfixed64, skip_field, uint32,
};
use prost::{DecodeError, bytes::Bytes};

/// What a pass-through processor's `process` reads of a batch: its metadata's `reads`
/// (declared by its crate: `READS_METRICS`, `READS_RESOURCE_ATTRIBUTES`,
/// `READS_POINT_ATTRIBUTES`).
pub type Selection = component::factory::Reads;

/// Why a batch did not decode.
#[derive(Debug)]
pub enum SelectError {
    /// prost refused a message this module decodes fully (or a framing error it found).
    Decode(DecodeError),
    /// Framing this module checks itself.
    Malformed(&'static str),
}

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectError::Decode(e) => e.fmt(f),
            SelectError::Malformed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for SelectError {}

impl From<DecodeError> for SelectError {
    fn from(e: DecodeError) -> Self {
        SelectError::Decode(e)
    }
}

/// Field numbers of the messages walked here (opentelemetry/proto/metrics/v1,
/// resource/v1, common/v1).
const REQUEST_RESOURCE_METRICS: u32 = 1;
const RM_RESOURCE: u32 = 1;
const RM_SCOPE_METRICS: u32 = 2;
const RM_SCHEMA_URL: u32 = 3;
const RESOURCE_ATTRIBUTES: u32 = 1;
const RESOURCE_DROPPED_ATTRIBUTES_COUNT: u32 = 2;
const RESOURCE_ENTITY_REFS: u32 = 3;
const SM_SCOPE: u32 = 1;
const SM_METRICS: u32 = 2;
const SM_SCHEMA_URL: u32 = 3;
const METRIC_NAME: u32 = 1;
const METRIC_DESCRIPTION: u32 = 2;
const METRIC_UNIT: u32 = 3;
const METRIC_GAUGE: u32 = 5;
const METRIC_SUM: u32 = 7;
const METRIC_HISTOGRAM: u32 = 9;
const METRIC_EXPONENTIAL_HISTOGRAM: u32 = 10;
const METRIC_SUMMARY: u32 = 11;
const METRIC_METADATA: u32 = 12;
const GAUGE_DATA_POINTS: u32 = 1;
const SUM_DATA_POINTS: u32 = 1;
const SUM_AGGREGATION_TEMPORALITY: u32 = 2;
const SUM_IS_MONOTONIC: u32 = 3;
const NDP_START_TIME: u32 = 2;
const NDP_TIME: u32 = 3;
const NDP_AS_DOUBLE: u32 = 4;
const NDP_EXEMPLARS: u32 = 5;
const NDP_AS_INT: u32 = 6;
const NDP_ATTRIBUTES: u32 = 7;
const NDP_FLAGS: u32 = 8;
const KV_KEY: u32 = 1;

/// Decode `bytes` keeping only what `sel` selects (see the module documentation).
pub fn decode_selected(
    bytes: &[u8],
    sel: &Selection,
) -> Result<ExportMetricsServiceRequest, SelectError> {
    decode_selected_reusing(bytes, sel, &mut Recycler::default())
}

/// [`decode_selected`], taking the strings and vectors it builds from `r` (what earlier
/// batches left there through [`Recycler::recycle`]) instead of allocating them. The result
/// is the same value; only where its memory comes from differs.
pub fn decode_selected_reusing(
    bytes: &[u8],
    sel: &Selection,
    r: &mut Recycler,
) -> Result<ExportMetricsServiceRequest, SelectError> {
    let mut req = ExportMetricsServiceRequest {
        resource_metrics: r.resources(),
    };
    walk(bytes, |tag, wt, buf| match tag {
        REQUEST_RESOURCE_METRICS => {
            let body = take_len(wt, buf)?;
            let rm = resource_metrics(body, sel, r)?;
            req.resource_metrics.push(rm);
            Ok(())
        }
        _ => skip(wt, tag, buf),
    })?;
    Ok(req)
}

fn resource_metrics(
    bytes: &[u8],
    sel: &Selection,
    r: &mut Recycler,
) -> Result<ResourceMetrics, SelectError> {
    let mut rm = ResourceMetrics {
        scope_metrics: r.scopes(),
        ..ResourceMetrics::default()
    };
    // The resource's attributes are read only when the resource holds a selected metric,
    // known after the walk: the (one, in practice) resource field waits until then.
    let mut first_resource: Option<&[u8]> = None;
    let mut more_resources = false;
    walk(bytes, |tag, wt, buf| match tag {
        RM_RESOURCE => {
            let body = take_len(wt, buf)?;
            let res = rm.resource.get_or_insert_with(|| Resource {
                attributes: r.kvs(),
                ..Resource::default()
            });
            if first_resource.is_none() {
                first_resource = Some(body);
                Ok(())
            } else {
                // Framing only; read in a second pass below.
                more_resources = true;
                resource(body, &[], res, r)
            }
        }
        RM_SCOPE_METRICS => {
            let body = take_len(wt, buf)?;
            let sm = scope_metrics(body, sel, r)?;
            rm.scope_metrics.push(sm);
            Ok(())
        }
        RM_SCHEMA_URL => skip_known(wt, Len, tag, buf),
        _ => skip(wt, tag, buf),
    })?;
    let (Some(res), Some(first)) = (&mut rm.resource, first_resource) else {
        return Ok(rm);
    };
    let keys = if holds_metrics(&rm.scope_metrics) {
        sel.resource_attributes
    } else {
        &[]
    };
    if !more_resources || keys.is_empty() {
        resource(first, keys, res, r)?;
    } else {
        // Repeated occurrences of a message field merge (protobuf semantics): read them
        // all, in order.
        walk(bytes, |tag, wt, buf| match tag {
            RM_RESOURCE => resource(take_len(wt, buf)?, keys, res, r),
            _ => skip(wt, tag, buf),
        })?;
    }
    Ok(rm)
}

/// Whether any scope kept a metric (a processor reads a resource's attributes only for the
/// metrics it reads).
fn holds_metrics(scopes: &[ScopeMetrics]) -> bool {
    scopes.iter().any(|sm| !sm.metrics.is_empty())
}

fn resource(
    bytes: &[u8],
    keys: &[&str],
    res: &mut Resource,
    r: &mut Recycler,
) -> Result<(), SelectError> {
    walk(bytes, |tag, wt, buf| match tag {
        RESOURCE_ATTRIBUTES => {
            attribute_if_selected_in(take_len(wt, buf)?, keys, &mut res.attributes, r)
        }
        RESOURCE_DROPPED_ATTRIBUTES_COUNT => skip_known(wt, WireType::Varint, tag, buf),
        RESOURCE_ENTITY_REFS => skip_known(wt, Len, tag, buf),
        _ => skip(wt, tag, buf),
    })
}

fn scope_metrics(
    bytes: &[u8],
    sel: &Selection,
    r: &mut Recycler,
) -> Result<ScopeMetrics, SelectError> {
    let mut sm = ScopeMetrics {
        metrics: r.metrics(),
        ..ScopeMetrics::default()
    };
    walk(bytes, |tag, wt, buf| match tag {
        SM_METRICS => {
            let body = take_len(wt, buf)?;
            if metric_name_is_one_of(body, sel.metrics)? {
                let m = metric_in(body, sel.point_attributes, r)?;
                sm.metrics.push(m);
            }
            Ok(())
        }
        SM_SCOPE | SM_SCHEMA_URL => skip_known(wt, Len, tag, buf),
        _ => skip(wt, tag, buf),
    })?;
    Ok(sm)
}

/// Whether the encoded `Metric` is named one of `names`. Walks the whole message (so its
/// framing is checked) and uses the last `name` field, as a decoder would.
fn metric_name_is_one_of(bytes: &[u8], names: &[&str]) -> Result<bool, SelectError> {
    let name = last_string_field(bytes, METRIC_NAME)?;
    Ok(names.iter().any(|n| n.as_bytes() == name))
}

/// The last occurrence of the length-delimited field `field` of a message (empty when
/// absent), checking the framing of the whole message.
fn last_string_field(bytes: &[u8], field: u32) -> Result<&[u8], SelectError> {
    let mut value: &[u8] = b"";
    walk(bytes, |tag, wt, buf| {
        if tag == field {
            value = take_len(wt, buf)?;
            Ok(())
        } else {
            skip(wt, tag, buf)
        }
    })?;
    Ok(value)
}

fn metric_in(bytes: &[u8], point_keys: &[&str], r: &mut Recycler) -> Result<Metric, SelectError> {
    let mut m = Metric::default();
    walk(bytes, |tag, wt, buf| match tag {
        METRIC_NAME => {
            let name = take_len(wt, buf)?;
            r.set_string(&mut m.name, str_of(name)?);
            Ok(())
        }
        METRIC_GAUGE => {
            let body = take_len(wt, buf)?;
            // A oneof member merges into the same member and replaces another one.
            if !matches!(m.data, Some(MetricKind::Gauge(_))) {
                m.data = Some(MetricKind::Gauge(Gauge {
                    data_points: r.points(),
                }));
            }
            match &mut m.data {
                Some(MetricKind::Gauge(g)) => gauge(body, point_keys, g, r),
                _ => Ok(()),
            }
        }
        METRIC_SUM => {
            let body = take_len(wt, buf)?;
            if !matches!(m.data, Some(MetricKind::Sum(_))) {
                m.data = Some(MetricKind::Sum(Sum {
                    data_points: r.points(),
                    ..Sum::default()
                }));
            }
            match &mut m.data {
                Some(MetricKind::Sum(s)) => sum(body, point_keys, s, r),
                _ => Ok(()),
            }
        }
        METRIC_HISTOGRAM => {
            let body = take_len(wt, buf)?;
            match &mut m.data {
                Some(MetricKind::Histogram(h)) => h.merge(body)?,
                _ => m.data = Some(MetricKind::Histogram(Message::decode(body)?)),
            }
            Ok(())
        }
        METRIC_EXPONENTIAL_HISTOGRAM => {
            let body = take_len(wt, buf)?;
            match &mut m.data {
                Some(MetricKind::ExponentialHistogram(h)) => h.merge(body)?,
                _ => m.data = Some(MetricKind::ExponentialHistogram(Message::decode(body)?)),
            }
            Ok(())
        }
        METRIC_SUMMARY => {
            let body = take_len(wt, buf)?;
            match &mut m.data {
                Some(MetricKind::Summary(s)) => s.merge(body)?,
                _ => m.data = Some(MetricKind::Summary(Message::decode(body)?)),
            }
            Ok(())
        }
        METRIC_DESCRIPTION | METRIC_UNIT | METRIC_METADATA => skip_known(wt, Len, tag, buf),
        _ => skip(wt, tag, buf),
    })?;
    Ok(m)
}

fn gauge(bytes: &[u8], keys: &[&str], g: &mut Gauge, r: &mut Recycler) -> Result<(), SelectError> {
    walk(bytes, |tag, wt, buf| match tag {
        GAUGE_DATA_POINTS => {
            let dp = number_point_in(take_len(wt, buf)?, keys, r)?;
            g.data_points.push(dp);
            Ok(())
        }
        _ => skip(wt, tag, buf),
    })
}

fn sum(bytes: &[u8], keys: &[&str], s: &mut Sum, r: &mut Recycler) -> Result<(), SelectError> {
    let ctx = DecodeContext::default;
    walk(bytes, |tag, wt, buf| match tag {
        SUM_DATA_POINTS => {
            let dp = number_point_in(take_len(wt, buf)?, keys, r)?;
            s.data_points.push(dp);
            Ok(())
        }
        SUM_AGGREGATION_TEMPORALITY => Ok(int32::merge(
            wt,
            &mut s.aggregation_temporality,
            buf,
            ctx(),
        )?),
        SUM_IS_MONOTONIC => Ok(pbool::merge(wt, &mut s.is_monotonic, buf, ctx())?),
        _ => skip(wt, tag, buf),
    })
}

fn number_point_in(
    bytes: &[u8],
    keys: &[&str],
    r: &mut Recycler,
) -> Result<NumberDataPoint, SelectError> {
    let mut dp = NumberDataPoint {
        attributes: r.kvs(),
        ..NumberDataPoint::default()
    };
    let ctx = DecodeContext::default;
    walk(bytes, |tag, wt, buf| match tag {
        NDP_ATTRIBUTES => attribute_if_selected_in(take_len(wt, buf)?, keys, &mut dp.attributes, r),
        NDP_START_TIME => Ok(fixed64::merge(
            wt,
            &mut dp.start_time_unix_nano,
            buf,
            ctx(),
        )?),
        NDP_TIME => Ok(fixed64::merge(wt, &mut dp.time_unix_nano, buf, ctx())?),
        NDP_AS_DOUBLE => {
            let mut v = 0.0;
            double::merge(wt, &mut v, buf, ctx())?;
            dp.value = Some(NumberValue::AsDouble(v));
            Ok(())
        }
        NDP_AS_INT => {
            let mut v = 0;
            sfixed64::merge(wt, &mut v, buf, ctx())?;
            dp.value = Some(NumberValue::AsInt(v));
            Ok(())
        }
        NDP_FLAGS => Ok(uint32::merge(wt, &mut dp.flags, buf, ctx())?),
        NDP_EXEMPLARS => skip_known(wt, Len, tag, buf),
        _ => skip(wt, tag, buf),
    })?;
    Ok(dp)
}

/// Decode the encoded `KeyValue` in `bytes` into `out` when its key (the last `key` field,
/// as a decoder would take it) is one of `keys`; otherwise only check its framing.
fn attribute_if_selected_in(
    bytes: &[u8],
    keys: &[&str],
    out: &mut Vec<KeyValue>,
    r: &mut Recycler,
) -> Result<(), SelectError> {
    if let Some((key, value)) =
        plain_string_attribute(bytes).or_else(|| plain_string_attribute_value_first(bytes))
    {
        if keys.iter().any(|k| k.as_bytes() == key) {
            let key = recycled_string(r, key)?;
            let value = recycled_string(r, value)?;
            out.push(KeyValue {
                key,
                value: Some(AnyValue {
                    value: Some(AnyValueKind::StringValue(value)),
                }),
                ..KeyValue::default()
            });
        }
        return Ok(());
    }
    let key = last_string_field(bytes, KV_KEY)?;
    if keys.iter().any(|k| k.as_bytes() == key) {
        out.push(KeyValue::decode(bytes)?);
    }
    Ok(())
}

/// The key and string value of an encoded `KeyValue` in the shape marshalers write for a
/// string attribute (every attribute the processors read): `key` once, then `value` once
/// holding only `string_value`. `None` for any other encoding (another value kind, a
/// repeated or reordered field, `key_strindex`), which then takes the general path, so
/// prost's merge rules still decide those.
#[inline]
fn plain_string_attribute(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut buf = bytes;
    let key = plain_field(PLAIN_KEY, &mut buf)?;
    let mut value = plain_field(PLAIN_VALUE, &mut buf)?;
    let s = plain_field(PLAIN_STRING_VALUE, &mut value)?;
    (buf.is_empty() && value.is_empty()).then_some((key, s))
}

/// [`plain_string_attribute`] for the other order, `value` once (holding only
/// `string_value`) then `key` once: what pdata's Go marshaler writes (it writes the fields
/// of every message from the last to the first), so every attribute the Go shim passes.
/// A decoder reads both orders as the same `KeyValue`.
#[inline]
fn plain_string_attribute_value_first(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut buf = bytes;
    let mut value = plain_field(PLAIN_VALUE, &mut buf)?;
    let key = plain_field(PLAIN_KEY, &mut buf)?;
    let s = plain_field(PLAIN_STRING_VALUE, &mut value)?;
    (buf.is_empty() && value.is_empty()).then_some((key, s))
}

const PLAIN_KEY: u8 = (1 << 3) | 2; // field 1, length-delimited
const PLAIN_VALUE: u8 = (2 << 3) | 2;
const PLAIN_STRING_VALUE: u8 = (1 << 3) | 2;

/// The body of a length-delimited field with this one-byte key at the start of `buf`.
#[inline(always)]
fn plain_field<'a>(tag: u8, buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (&t, rest) = buf.split_first()?;
    if t != tag {
        return None;
    }
    *buf = rest;
    take_len(Len, buf).ok()
}

/// Call `field` for every (tag, wire type) of the message in `bytes`; `field` consumes the
/// field's value from the buffer.
#[inline(always)]
fn walk<'a>(
    mut bytes: &'a [u8],
    mut field: impl FnMut(u32, WireType, &mut &'a [u8]) -> Result<(), SelectError>,
) -> Result<(), SelectError> {
    while !bytes.is_empty() {
        let (tag, wt) = key(&mut bytes)?;
        field(tag, wt, &mut bytes)?;
    }
    Ok(())
}

/// A field key. Every key of an OTLP metrics batch fits one byte (field numbers below 16):
/// that case is read here, the others by prost (which also reports the errors).
#[inline(always)]
fn key(buf: &mut &[u8]) -> Result<(u32, WireType), SelectError> {
    if let Some((&b, rest)) = buf.split_first()
        && (8..0x80).contains(&b)
        && let Ok(wt) = WireType::try_from(u64::from(b & 7))
    {
        *buf = rest;
        return Ok((u32::from(b >> 3), wt));
    }
    Ok(decode_key(buf)?)
}

/// A varint; one- and two-byte values (every length in an agent push: a metric's data runs
/// to ~130 bytes) without a call into prost.
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Result<u64, SelectError> {
    let bytes: &[u8] = buf;
    match *bytes {
        [b, ..] if b < 0x80 => {
            *buf = &bytes[1..];
            Ok(u64::from(b))
        }
        [b0, b1, ..] if b1 < 0x80 => {
            *buf = &bytes[2..];
            Ok(u64::from(b0 & 0x7f) | (u64::from(b1) << 7))
        }
        _ => Ok(decode_varint(buf)?),
    }
}

/// The body of a length-delimited field, advancing past it; a known field declared
/// length-delimited with another wire type is an error, as in prost.
#[inline(always)]
fn take_len<'a>(wt: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], SelectError> {
    check_wire_type(Len, wt)?;
    let len = varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= buf.len())
        .ok_or_else(underflow)?;
    let (body, rest) = buf.split_at(len);
    *buf = rest;
    Ok(body)
}

/// Skip an unknown field (groups, never used by OTLP, through prost).
#[inline(always)]
fn skip(wt: WireType, tag: u32, buf: &mut &[u8]) -> Result<(), SelectError> {
    let width = match wt {
        WireType::LengthDelimited => return take_len(wt, buf).map(drop),
        WireType::Varint => return varint(buf).map(drop),
        WireType::SixtyFourBit => 8,
        WireType::ThirtyTwoBit => 4,
        WireType::StartGroup | WireType::EndGroup => {
            return Ok(skip_field(wt, tag, buf, DecodeContext::default())?);
        }
    };
    *buf = buf.get(width..).ok_or_else(underflow)?;
    Ok(())
}

fn underflow() -> SelectError {
    SelectError::Malformed("buffer underflow")
}

/// Skip a known field no processor reads, refusing another wire type than its declaration
/// (as prost does when it decodes the field).
fn skip_known(
    wt: WireType,
    expected: WireType,
    tag: u32,
    buf: &mut &[u8],
) -> Result<(), SelectError> {
    check_wire_type(expected, wt)?;
    skip(wt, tag, buf)
}

/// `bytes` as a string (UTF-8 checked as in [`string`]), reusing a kept string.
#[inline]
fn recycled_string(r: &mut Recycler, bytes: &[u8]) -> Result<String, SelectError> {
    let text = str_of(bytes)?;
    Ok(r.string_from(text))
}

/// `bytes` as text: the UTF-8 check of [`string`] without the copy.
#[inline]
fn str_of(bytes: &[u8]) -> Result<&str, SelectError> {
    if is_ascii(bytes) {
        // SAFETY: ASCII is valid UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes)
        .map_err(|_| SelectError::Malformed("invalid string value: data is not UTF-8 encoded"))
}

/// The decoding steps without a recycler (the unit tests' entry points).
#[cfg(test)]
fn attribute_if_selected(
    bytes: &[u8],
    keys: &[&str],
    out: &mut Vec<KeyValue>,
) -> Result<(), SelectError> {
    attribute_if_selected_in(bytes, keys, out, &mut Recycler::default())
}

#[cfg(test)]
fn metric(bytes: &[u8], point_keys: &[&str]) -> Result<Metric, SelectError> {
    metric_in(bytes, point_keys, &mut Recycler::default())
}

#[cfg(test)]
fn number_point(bytes: &[u8], keys: &[&str]) -> Result<NumberDataPoint, SelectError> {
    number_point_in(bytes, keys, &mut Recycler::default())
}

/// `bytes` as an owned string, as prost checks it (tests; the decoder uses [`Recycler`]).
#[cfg(test)]
fn string(bytes: &[u8]) -> Result<String, SelectError> {
    str_of(bytes).map(str::to_owned)
}

/// Whether every byte is ASCII, eight bytes at a time: the ids and attribute values of a
/// batch are short ASCII strings, for which `str::from_utf8` (alignment handling, then its
/// own ASCII loop) costs several times more. Anything else still goes through
/// `str::from_utf8`, so the result and the errors are the same.
#[inline]
fn is_ascii(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    let mut acc = 0u64;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        acc |= u64::from_ne_bytes(w);
    }
    for &b in chunks.remainder() {
        acc |= u64::from(b);
    }
    acc & HIGH == 0
}

/// What [`decode_selected`] keeps of a fully decoded batch: `req` with everything `sel`
/// does not select removed or left at its default (see the module documentation).
pub fn project(req: &mut ExportMetricsServiceRequest, sel: &Selection) {
    let keep = |keys: &[&str], attrs: &mut Vec<KeyValue>| {
        attrs.retain(|kv| keys.contains(&kv.key.as_str()));
    };
    for rm in &mut req.resource_metrics {
        rm.schema_url.clear();
        for sm in &mut rm.scope_metrics {
            sm.metrics
                .retain(|m| sel.metrics.contains(&m.name.as_str()));
        }
        let reads_resource = holds_metrics(&rm.scope_metrics);
        if let Some(res) = &mut rm.resource {
            if reads_resource {
                keep(sel.resource_attributes, &mut res.attributes);
            } else {
                res.attributes.clear();
            }
            res.dropped_attributes_count = 0;
            res.entity_refs.clear();
        }
        for sm in &mut rm.scope_metrics {
            sm.scope = None;
            sm.schema_url.clear();
            for m in &mut sm.metrics {
                m.description.clear();
                m.unit.clear();
                m.metadata.clear();
                let points: &mut [NumberDataPoint] = match &mut m.data {
                    Some(MetricKind::Gauge(g)) => &mut g.data_points,
                    Some(MetricKind::Sum(s)) => &mut s.data_points,
                    _ => &mut [],
                };
                for dp in points {
                    keep(sel.point_attributes, &mut dp.attributes);
                    dp.exemplars.clear();
                }
            }
        }
    }
}

/// Reference semantics (tests): a full prost decode passed through [`project`].
#[doc(hidden)]
pub fn decode_full_then_project(
    bytes: &[u8],
    sel: &Selection,
) -> Result<ExportMetricsServiceRequest, DecodeError> {
    let mut req = ExportMetricsServiceRequest::decode(Bytes::copy_from_slice(bytes))?;
    project(&mut req, sel);
    Ok(req)
}

#[cfg(test)]
mod tests;
