//! OTLP/protobuf decoder for `ExportMetricsServiceRequest` on the receiver's hot path, with
//! prost as the reference and the fallback.
//!
//! prost allocates every string and vector of a request afresh and frees them when the batch
//! is dropped: about half of a protobuf push's decoding was `malloc`, `free` and the UTF-8
//! check of each string. This decoder reads the wire format itself and takes its strings and
//! vectors from the thread's [`Recycler`] pool, as the JSON decoder does, so a push reuses
//! the buffers of an earlier one.
//!
//! It reads the messages agents and SDKs send for gauges and sums: the request, resource,
//! scope, metric, gauge, sum, number data point, key-value and any-value messages with
//! scalar, string and bytes values. On anything else it gives up and the whole body is
//! decoded by prost instead ([`decode_metrics`]): histograms, exponential histograms and
//! summaries, exemplars, entity references, array and key-value-list attribute values,
//! groups, a known field with another wire type, a malformed body. So every body decodes to
//! exactly what prost gives, and every error is prost's, word for word: this decoder only
//! ever answers for bodies it has read completely.
//!
//! Wire-format rules it follows as prost does: fields in any order; unknown fields skipped;
//! a scalar or string field given twice keeps the last value; a singular message field
//! given twice is merged; repeated fields append; a oneof member replaces another member
//! and merges into the same member; varints of up to ten bytes, non-canonical ones
//! included, truncated to the field's width; strings must be UTF-8.

use component::recycle::Recycler;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyKind;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

/// After the reader gives up on a body, this thread's next this-many bodies go to prost
/// directly: a client whose pushes the reader leaves to prost (histograms, say) then pays
/// for the reader's partial read once in every `PROST_TURNS_AFTER_GIVING_UP + 1` bodies,
/// not on each.
pub const PROST_TURNS_AFTER_GIVING_UP: u8 = 16;

thread_local! {
    static PROST_TURNS: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Decode an OTLP/protobuf `ExportMetricsServiceRequest`: the pooled reader first, prost
/// when it gives up (which is also where every error comes from).
pub fn decode_metrics(body: &[u8]) -> Result<ExportMetricsServiceRequest, prost::DecodeError> {
    let turns = PROST_TURNS.get();
    if turns > 0 {
        PROST_TURNS.set(turns - 1);
        return ExportMetricsServiceRequest::decode(body);
    }
    match read_pooled(body) {
        Some(req) => Ok(req),
        None => {
            PROST_TURNS.set(PROST_TURNS_AFTER_GIVING_UP);
            ExportMetricsServiceRequest::decode(body)
        }
    }
}

/// The pooled reader alone: `None` where it gives up (where [`decode_metrics`] asks prost;
/// what it had read goes back to the pool). For tests and benchmarks, which check that it
/// reads what it should and agrees with prost whenever it answers.
pub fn read_pooled(body: &[u8]) -> Option<ExportMetricsServiceRequest> {
    let mut pool = component::recycle::take_thread_pool();
    // This reader takes strings and vectors from the pools; a batch the thread kept whole
    // (for the JSON decoder, which writes in place) goes there first.
    pool.set_writes_in_place(false);
    pool.spill_tree();
    let mut req = ExportMetricsServiceRequest::default();
    let read = request(&mut Wire::new(body), &mut pool, &mut req);
    let out = match read {
        Ok(()) => Some(req),
        Err(GiveUp) => {
            pool.recycle(req);
            None
        }
    };
    component::recycle::put_thread_pool(pool);
    out
}

/// This reader does not decode the body (an error, or a part it leaves to prost).
#[derive(Debug)]
struct GiveUp;

type Step<T = ()> = Result<T, GiveUp>;

const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const I32: u8 = 5;

/// A cursor over one message's bytes.
struct Wire<'a> {
    buf: &'a [u8],
}

impl<'a> Wire<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Wire { buf }
    }

    /// The next field's number and wire type; `None` at the end of the message.
    #[inline(always)]
    fn field(&mut self) -> Step<Option<(u32, u8)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        // prost refuses keys beyond 32 bits and field number 0.
        let key = u32::try_from(key).map_err(|_| GiveUp)?;
        let tag = key >> 3;
        if tag == 0 {
            return Err(GiveUp);
        }
        Ok(Some((tag, (key & 7) as u8)))
    }

    /// A varint of up to ten bytes (prost's limits: the tenth byte at most 1). Most are one
    /// byte (keys, small lengths) and take the inlined path.
    #[inline(always)]
    fn varint(&mut self) -> Step<u64> {
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(b));
        }
        self.long_varint()
    }

    #[inline(never)]
    fn long_varint(&mut self) -> Step<u64> {
        let mut value = 0u64;
        for (i, &b) in self.buf.iter().enumerate().take(10) {
            if i == 9 && b > 1 {
                return Err(GiveUp);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(GiveUp)
    }

    #[inline]
    fn fixed64(&mut self) -> Step<u64> {
        let (head, rest) = self.buf.split_first_chunk::<8>().ok_or(GiveUp)?;
        self.buf = rest;
        Ok(u64::from_le_bytes(*head))
    }

    #[inline]
    fn fixed32(&mut self) -> Step<u32> {
        let (head, rest) = self.buf.split_first_chunk::<4>().ok_or(GiveUp)?;
        self.buf = rest;
        Ok(u32::from_le_bytes(*head))
    }

    /// A length-delimited payload.
    #[inline]
    fn bytes(&mut self) -> Step<&'a [u8]> {
        let len = usize::try_from(self.varint()?).map_err(|_| GiveUp)?;
        if len > self.buf.len() {
            return Err(GiveUp);
        }
        let (payload, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(payload)
    }

    /// A UTF-8 string payload.
    #[inline]
    fn str(&mut self) -> Step<&'a str> {
        let b = self.bytes()?;
        if b.is_ascii() {
            // SAFETY: every byte is below 0x80, and ASCII is valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(b) });
        }
        std::str::from_utf8(b).map_err(|_| GiveUp)
    }

    /// The payload of a field that must be length-delimited.
    #[inline]
    fn message(&mut self, wire: u8) -> Step<Wire<'a>> {
        expect(wire, LEN)?;
        Ok(Wire::new(self.bytes()?))
    }

    /// Skip an unknown field (groups are left to prost).
    fn skip(&mut self, wire: u8) -> Step {
        match wire {
            VARINT => self.varint().map(drop),
            I64 => self.fixed64().map(drop),
            LEN => self.bytes().map(drop),
            I32 => self.fixed32().map(drop),
            _ => Err(GiveUp),
        }
    }
}

#[inline]
fn expect(wire: u8, want: u8) -> Step {
    if wire == want { Ok(()) } else { Err(GiveUp) }
}

/// A varint field's value (`wire` checked).
#[inline]
fn varint(w: &mut Wire<'_>, wire: u8) -> Step<u64> {
    expect(wire, VARINT)?;
    w.varint()
}

/// A string field, set in place (the last one given wins).
#[inline]
fn string(w: &mut Wire<'_>, wire: u8, pool: &mut Recycler, slot: &mut String) -> Step {
    expect(wire, LEN)?;
    pool.set_string(slot, w.str()?);
    Ok(())
}

/// A new element at the end of a repeated field, its vector taken from the pool when empty.
#[inline]
fn push<'v, T: Default>(
    list: &'v mut Vec<T>,
    pool: &mut Recycler,
    take: fn(&mut Recycler) -> Vec<T>,
) -> &'v mut T {
    if list.capacity() == 0 {
        *list = take(pool);
    }
    list.push(T::default());
    let last = list.len() - 1;
    &mut list[last]
}

fn request(w: &mut Wire<'_>, pool: &mut Recycler, req: &mut ExportMetricsServiceRequest) -> Step {
    while let Some((tag, wire)) = w.field()? {
        match tag {
            1 => {
                let mut m = w.message(wire)?;
                let rm = push(&mut req.resource_metrics, pool, Recycler::resources);
                resource_metrics(&mut m, pool, rm)?;
            }
            _ => w.skip(wire)?,
        }
    }
    Ok(())
}

fn resource_metrics(w: &mut Wire<'_>, pool: &mut Recycler, rm: &mut ResourceMetrics) -> Step {
    while let Some((tag, wire)) = w.field()? {
        match tag {
            1 => {
                let mut m = w.message(wire)?;
                resource(&mut m, pool, rm.resource.get_or_insert_default())?;
            }
            2 => {
                let mut m = w.message(wire)?;
                let sm = push(&mut rm.scope_metrics, pool, Recycler::scopes);
                scope_metrics(&mut m, pool, sm)?;
            }
            3 => string(w, wire, pool, &mut rm.schema_url)?,
            _ => w.skip(wire)?,
        }
    }
    Ok(())
}

fn resource(w: &mut Wire<'_>, pool: &mut Recycler, r: &mut Resource) -> Step {
    while let Some((tag, wire)) = w.field()? {
        match tag {
            1 => attribute(w, wire, pool, &mut r.attributes)?,
            2 => r.dropped_attributes_count = varint(w, wire)? as u32,
            3 => return Err(GiveUp), // entity_refs
            _ => w.skip(wire)?,
        }
    }
    Ok(())
}

fn scope_metrics(w: &mut Wire<'_>, pool: &mut Recycler, sm: &mut ScopeMetrics) -> Step {
    while let Some((tag, wire)) = w.field()? {
        match tag {
            1 => {
                let mut m = w.message(wire)?;
                scope(&mut m, pool, sm.scope.get_or_insert_default())?;
            }
            2 => {
                let mut m = w.message(wire)?;
                let metric = push(&mut sm.metrics, pool, Recycler::metrics);
                self::metric(&mut m, pool, metric)?;
            }
            3 => string(w, wire, pool, &mut sm.schema_url)?,
            _ => w.skip(wire)?,
        }
    }
    Ok(())
}

fn scope(w: &mut Wire<'_>, pool: &mut Recycler, s: &mut InstrumentationScope) -> Step {
    while let Some((tag, wire)) = w.field()? {
        match tag {
            1 => string(w, wire, pool, &mut s.name)?,
            2 => string(w, wire, pool, &mut s.version)?,
            3 => attribute(w, wire, pool, &mut s.attributes)?,
            4 => s.dropped_attributes_count = varint(w, wire)? as u32,
            _ => w.skip(wire)?,
        }
    }
    Ok(())
}

fn metric(w: &mut Wire<'_>, pool: &mut Recycler, m: &mut Metric) -> Step {
    use metric::Data;
    while let Some((tag, wire)) = w.field()? {
        match tag {
            1 => string(w, wire, pool, &mut m.name)?,
            2 => string(w, wire, pool, &mut m.description)?,
            3 => string(w, wire, pool, &mut m.unit)?,
            12 => attribute(w, wire, pool, &mut m.metadata)?,
            5 => {
                let mut body = w.message(wire)?;
                if !matches!(m.data, Some(Data::Gauge(_))) {
                    m.data = Some(Data::Gauge(Gauge::default()));
                }
                if let Some(Data::Gauge(g)) = &mut m.data {
                    while let Some((tag, wire)) = body.field()? {
                        match tag {
                            1 => point(&mut body, wire, pool, &mut g.data_points)?,
                            _ => body.skip(wire)?,
                        }
                    }
                }
            }
            7 => {
                let mut body = w.message(wire)?;
                if !matches!(m.data, Some(Data::Sum(_))) {
                    m.data = Some(Data::Sum(Sum::default()));
                }
                if let Some(Data::Sum(s)) = &mut m.data {
                    while let Some((tag, wire)) = body.field()? {
                        match tag {
                            1 => point(&mut body, wire, pool, &mut s.data_points)?,
                            2 => s.aggregation_temporality = varint(&mut body, wire)? as i32,
                            3 => s.is_monotonic = varint(&mut body, wire)? != 0,
                            _ => body.skip(wire)?,
                        }
                    }
                }
            }
            // Histograms, exponential histograms and summaries.
            9..=11 => return Err(GiveUp),
            _ => w.skip(wire)?,
        }
    }
    Ok(())
}

/// One element of a repeated `NumberDataPoint` field.
fn point(
    w: &mut Wire<'_>,
    wire: u8,
    pool: &mut Recycler,
    points: &mut Vec<NumberDataPoint>,
) -> Step {
    use number_data_point::Value;
    let mut m = w.message(wire)?;
    let p = push(points, pool, Recycler::points);
    while let Some((tag, wire)) = m.field()? {
        match tag {
            7 => attribute(&mut m, wire, pool, &mut p.attributes)?,
            2 => {
                expect(wire, I64)?;
                p.start_time_unix_nano = m.fixed64()?;
            }
            3 => {
                expect(wire, I64)?;
                p.time_unix_nano = m.fixed64()?;
            }
            4 => {
                expect(wire, I64)?;
                p.value = Some(Value::AsDouble(f64::from_bits(m.fixed64()?)));
            }
            6 => {
                expect(wire, I64)?;
                p.value = Some(Value::AsInt(m.fixed64()? as i64));
            }
            8 => p.flags = varint(&mut m, wire)? as u32,
            5 => return Err(GiveUp), // exemplars
            _ => m.skip(wire)?,
        }
    }
    Ok(())
}

/// One element of a repeated `KeyValue` field.
fn attribute(w: &mut Wire<'_>, wire: u8, pool: &mut Recycler, list: &mut Vec<KeyValue>) -> Step {
    let mut m = w.message(wire)?;
    let kv = push(list, pool, Recycler::kvs);
    while let Some((tag, wire)) = m.field()? {
        match tag {
            1 => string(&mut m, wire, pool, &mut kv.key)?,
            2 => {
                let mut v = m.message(wire)?;
                any_value(&mut v, pool, kv.value.get_or_insert_default())?;
            }
            3 => kv.key_strindex = varint(&mut m, wire)? as i32,
            _ => m.skip(wire)?,
        }
    }
    Ok(())
}

fn any_value(w: &mut Wire<'_>, pool: &mut Recycler, v: &mut AnyValue) -> Step {
    while let Some((tag, wire)) = w.field()? {
        let member = match tag {
            1 => {
                expect(wire, LEN)?;
                let text = w.str()?;
                if let Some(AnyKind::StringValue(s)) = &mut v.value {
                    s.clear();
                    s.push_str(text);
                    continue;
                }
                AnyKind::StringValue(pool.string_from(text))
            }
            2 => AnyKind::BoolValue(varint(w, wire)? != 0),
            3 => AnyKind::IntValue(varint(w, wire)? as i64),
            4 => {
                expect(wire, I64)?;
                AnyKind::DoubleValue(f64::from_bits(w.fixed64()?))
            }
            7 => {
                expect(wire, LEN)?;
                AnyKind::BytesValue(w.bytes()?.to_vec())
            }
            8 => AnyKind::StringValueStrindex(varint(w, wire)? as i32),
            // Array and key-value-list values (nested messages: prost keeps their depth).
            5 | 6 => return Err(GiveUp),
            _ => {
                w.skip(wire)?;
                continue;
            }
        };
        v.value = Some(member);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push_body() -> Vec<u8> {
        let kv = |k: &str, v: &str| KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(AnyKind::StringValue(v.into())),
            }),
            key_strindex: 0,
        };
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![kv("ingero.node.id", "n1"), kv("ingero.cluster.id", "c")],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "ingero.node.health_score".into(),
                        unit: "1".into(),
                        data: Some(metric::Data::Gauge(Gauge {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![kv("ingero.node.state", "active")],
                                time_unix_nano: 1_763_769_600_000_000_000,
                                value: Some(number_data_point::Value::AsDouble(0.93)),
                                ..Default::default()
                            }],
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn a_push_decodes_as_prost_decodes_it_and_without_falling_back() {
        let body = push_body();
        let mut req = ExportMetricsServiceRequest::default();
        let mut pool = Recycler::default();
        request(&mut Wire::new(&body), &mut pool, &mut req).expect("read without prost");
        assert_eq!(req, ExportMetricsServiceRequest::decode(&body[..]).unwrap());
    }

    #[test]
    fn a_second_push_reuses_the_first_ones_buffers() {
        let body = push_body();
        let first = decode_metrics(&body).unwrap();
        component::recycle::recycle_on_this_thread(first.resource_metrics);
        let kept = component::recycle::take_thread_pool();
        // Taken apart into the pools, not kept whole: this reader does not write in place.
        assert!(!kept.keeps_tree());
        let before = kept.kept();
        component::recycle::put_thread_pool(kept);
        assert!(before.strings >= 6, "{before:?}");
        let second = decode_metrics(&body).unwrap();
        let kept = component::recycle::take_thread_pool();
        let after = kept.kept();
        component::recycle::put_thread_pool(kept);
        assert!(after.strings < before.strings, "{before:?} -> {after:?}");
        assert_eq!(
            second,
            ExportMetricsServiceRequest::decode(&body[..]).unwrap()
        );
    }

    fn strings_kept() -> usize {
        let pool = component::recycle::take_thread_pool();
        let n = pool.kept().strings;
        component::recycle::put_thread_pool(pool);
        n
    }

    #[test]
    fn after_giving_up_the_thread_asks_prost_for_a_while_then_reads_again() {
        let push = push_body();
        let histogram = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "h".into(),
                        data: Some(metric::Data::Histogram(Default::default())),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec();
        let fill = |n: usize| {
            for _ in 0..n {
                let req = ExportMetricsServiceRequest::decode(&push[..]).unwrap();
                component::recycle::recycle_on_this_thread(req.resource_metrics);
            }
        };
        fill(4);
        assert!(decode_metrics(&histogram).is_ok());
        // Prost's turns: the pool is not drawn from.
        for _ in 0..PROST_TURNS_AFTER_GIVING_UP {
            let before = strings_kept();
            let req = decode_metrics(&push).unwrap();
            assert_eq!(strings_kept(), before);
            drop(req);
        }
        // The reader's turn again: it takes the push's strings from the pool.
        let before = strings_kept();
        let req = decode_metrics(&push).unwrap();
        assert!(strings_kept() < before, "{before} -> {}", strings_kept());
        assert_eq!(req, ExportMetricsServiceRequest::decode(&push[..]).unwrap());
    }

    #[test]
    fn what_it_leaves_to_prost_still_decodes_and_errors_are_prosts() {
        // A histogram: the reader gives up, prost decodes.
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "h".into(),
                        data: Some(metric::Data::Histogram(Default::default())),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let body = req.encode_to_vec();
        let mut pool = Recycler::default();
        assert!(request(&mut Wire::new(&body), &mut pool, &mut Default::default()).is_err());
        assert_eq!(decode_metrics(&body).unwrap(), req);
        // A truncated push: the same error prost gives.
        let body = push_body();
        let cut = &body[..body.len() - 3];
        assert_eq!(
            decode_metrics(cut).unwrap_err().to_string(),
            ExportMetricsServiceRequest::decode(cut)
                .unwrap_err()
                .to_string()
        );
    }
}
