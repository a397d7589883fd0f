//! Streaming OTLP/JSON decoder for `ExportMetricsServiceRequest`.
//!
//! The generic path (`serde_json::from_slice` through opentelemetry-proto's `with-serde`
//! impls) buffers every metric, data point, exemplar and attribute value into serde's
//! private `Content` tree, because those types use `#[serde(flatten)]` for their oneofs; on
//! the agent's push that buffering and its allocations were most of the receiver's CPU.
//! Here one `DeserializeSeed`/`Visitor` per OTLP message is driven directly by a
//! `serde_json::Deserializer` over the body: keys are matched without allocating, values
//! go straight into the prost structs, nothing is buffered. Layout: this file holds the
//! entry point and the generic message machinery, `scalars` the number, string-number
//! and bytes encodings, `common` attributes and resources, `metrics` the metric messages.
//!
//! # Rules (shared with the generic path; checked by differential tests)
//! - Field names in lowerCamelCase. Unknown fields are skipped, as OTLP/JSON requires. A
//!   known field given twice is an error (`duplicate field`).
//! - 64-bit integers (`timeUnixNano`, `count`, `bucketCounts` items, `asInt`, `intValue`,
//!   ...): a JSON integer or a decimal string (parsed with Rust's `str::parse`, so an
//!   optional leading `+`). Out of range (a negative `u64`, an `i64` above `i64::MAX`) or a
//!   fraction is an error.
//! - 32-bit integers and enums (`flags`, `aggregationTemporality`, `scale`, ...): JSON
//!   integers only. Enum names such as `"AGGREGATION_TEMPORALITY_CUMULATIVE"` are not
//!   accepted (the generic path does not accept them either).
//! - Doubles: JSON numbers. Strings only in `ValueAtQuantile.quantile`/`.value`: `"NaN"`,
//!   `"Infinity"`, `"-Infinity"` and anything Rust's `f64` parser reads, as the generic path.
//! - `spanId`/`traceId`: hex (either case, optional `0x`); `bytesValue`: standard base64
//!   with padding. Same crates as the generic path, so the same strings pass.
//! - Oneofs: a metric's `gauge`/`sum`/`histogram`/`exponentialHistogram`/`summary` and a
//!   point's or exemplar's `asDouble`/`asInt`: the first member present wins, later
//!   members are skipped unread. `AnyValue`: the last member present wins.
//! - `asDouble`/`asInt` of the wrong type (`"asDouble":"NaN"`, `"asInt":1.5`) leaves the
//!   point without a value instead of failing the request: the processors then refuse that
//!   one point and the client gets a partial-success count for it.
//! - Nothing but whitespace after the value; serde_json's 128-level recursion limit.
//!
//! # Where this decoder deliberately differs from the generic path
//! Looser (accepted here, refused or lost there), as the OTLP/JSON and proto3 JSON
//! mappings require:
//! - The original proto snake_case names (`time_unix_nano`, `data_points`, ...) are
//!   accepted too; the generic path skipped them as unknown and lost their values. Both
//!   spellings of one field in one object is a `duplicate field` error.
//! - `null` for any field means the field is absent (default value, unset oneof member).
//!   The generic path accepted `null` only for message, optional-double and `AnyValue`
//!   member fields. `null` as an array element is still an error.
//! - An omitted `KeyValue.key`, `ArrayValue.values`, `KeyValueList.values` or `EntityRef`
//!   field defaults like every other field. The generic path refused these with `missing
//!   field`, although Go's protojson omits them when empty (`{"arrayValue":{}}`).
//! - Values of unknown fields are checked for JSON syntax only, by serde_json's skipper:
//!   any depth (it is iterative), and a string with a lone surrogate escape (`"\ud800"`)
//!   passes. The generic path decoded the unknown fields of metrics, data points,
//!   exemplars and `AnyValue`s into its buffer and so refused both there (elsewhere it
//!   skipped them as this decoder does).
//!
//! Stricter (refused here, accepted there):
//! - Any error inside a metric's data (its `gauge`/`sum`/... object and everything below
//!   it, apart from the `asDouble`/`asInt` rule above) fails the request. The generic path
//!   wraps that oneof in `Option` + `#[serde(flatten)]`, and serde turns every error inside
//!   it into `None`: the metric was accepted with no data and all its points vanished
//!   without an error or a partial-success count (for example `aggregationTemporality` as
//!   an enum name, `"NaN"` as a histogram `sum`, a malformed exemplar `traceId`).
//!   Reproducing that would need the metric body buffered, which is the cost this decoder
//!   removes, and an error naming line and column is more useful to a client than silent
//!   loss.
//! - Messages written as JSON arrays (serde's sequence form of a derived struct, e.g.
//!   `"resource":[[...],0]`) are refused; OTLP/JSON has no such form.
//! - The whole body must be UTF-8. The generic path did not check values it skipped
//!   (unknown fields of most messages), so it took invalid bytes there.
//! - `AnyValue` nesting (`arrayValue`/`kvlistValue`) deeper than [`MAX_ANY_VALUE_DEPTH`]
//!   levels is refused with its own message. The generic path was bounded only by
//!   serde_json's recursion limit (about 40 levels of `AnyValue`).

use std::fmt;
use std::marker::PhantomData;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Deepest `AnyValue` accepted: an attribute's value is level 1, each `arrayValue` or
/// `kvlistValue` adds one.
pub const MAX_ANY_VALUE_DEPTH: usize = 32;

/// Decode an OTLP/JSON `ExportMetricsServiceRequest` body.
pub fn decode_metrics(body: &[u8]) -> Result<ExportMetricsServiceRequest, serde_json::Error> {
    // The whole body must be UTF-8, including values that are skipped unread (serde_json
    // checks only the strings it decodes); checked once here, strings are not re-checked.
    let text = std::str::from_utf8(body).map_err(|e| {
        let (line, column) = position(body, e.valid_up_to());
        de::Error::custom(format_args!(
            "invalid UTF-8 at line {line} column {column} (byte {})",
            e.valid_up_to()
        ))
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let req = MessageSeed::<ExportMetricsServiceRequest>::new().deserialize(&mut de)?;
    de.end()?;
    Ok(req)
}

/// 1-based line and column of a byte offset, as serde_json counts them.
fn position(body: &[u8], offset: usize) -> (usize, usize) {
    let before = body.get(..offset).unwrap_or(body);
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

/// The fields of one message, looked up by either JSON spelling.
trait FieldKey: Copy + 'static {
    fn lookup(name: &str) -> Option<Self>;
    /// The lowerCamelCase name, for error messages.
    fn name(self) -> &'static str;
    /// Bit for duplicate detection.
    fn bit(self) -> u32;
    /// Member of the message's oneof (first present member wins, no duplicate error).
    fn is_oneof(self) -> bool;
}

/// `fields!(Name { Variant = "camelCase" | "snake_case", #[oneof] Member = "member", .. })`
/// declares a field enum and its [`FieldKey`] impl.
macro_rules! fields {
    ($name:ident { $( $(#[$kind:ident])? $var:ident = $camel:literal $(| $snake:literal)? ),+ $(,)? }) => {
        // Variants are the proto field names, some of which share a suffix (`*Value`).
        #[allow(clippy::enum_variant_names)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum $name { $($var),+ }

        // One bit per field in a `u32` (duplicate detection).
        const _: () = assert!([$($camel),+].len() <= 32);

        impl $crate::receiver::otlp_json::FieldKey for $name {
            fn lookup(name: &str) -> Option<Self> {
                match name {
                    $($camel $(| $snake)? => Some(Self::$var),)+
                    _ => None,
                }
            }
            fn name(self) -> &'static str {
                match self { $(Self::$var => $camel),+ }
            }
            fn bit(self) -> u32 {
                1u32 << (self as u32)
            }
            fn is_oneof(self) -> bool {
                match self { $(Self::$var => fields!(@oneof $($kind)?)),+ }
            }
        }
    };
    (@oneof oneof) => { true };
    (@oneof) => { false };
}

mod common;
mod metrics;
mod scalars;

use scalars::{
    Base64Seed, I64Seed, NumberMember, NumberSeed, SpecialF64Seed, hex_bytes, uint64, uint64s,
};

/// A prost message decoded from a JSON object, field by field.
trait JsonMessage: Default {
    type Field: FieldKey;
    /// What the message is, for `invalid type` errors.
    const EXPECTING: &'static str;
    /// Decode the value of `field` into `self`. Returns `false` when the value was `null`,
    /// so an unset oneof member does not decide the oneof.
    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        field: Self::Field,
        map: &mut A,
    ) -> Result<bool, A::Error>;
}

/// Decodes any [`JsonMessage`] from a JSON object.
struct MessageSeed<M>(PhantomData<fn() -> M>);

impl<M> MessageSeed<M> {
    fn new() -> Self {
        MessageSeed(PhantomData)
    }
}

impl<M> Clone for MessageSeed<M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for MessageSeed<M> {}

impl<'de, M: JsonMessage> DeserializeSeed<'de> for MessageSeed<M> {
    type Value = M;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<M, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, M: JsonMessage> Visitor<'de> for MessageSeed<M> {
    type Value = M;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(M::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<M, A::Error> {
        let mut msg = M::default();
        let mut seen = Seen::default();
        let mut oneof_set = false;
        while let Some(key) = map.next_key_seed(KeySeed::<M::Field>::new())? {
            match key {
                None => skip(&mut map)?,
                Some(f) if f.is_oneof() => {
                    if oneof_set {
                        skip(&mut map)?;
                    } else {
                        oneof_set = msg.field(f, &mut map)?;
                    }
                }
                Some(f) => {
                    seen.mark::<_, A::Error>(f)?;
                    msg.field(f, &mut map)?;
                }
            }
        }
        Ok(msg)
    }
}

/// Known fields already read in one object.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn mark<F: FieldKey, E: de::Error>(&mut self, f: F) -> Result<(), E> {
        if self.0 & f.bit() != 0 {
            return Err(E::duplicate_field(f.name()));
        }
        self.0 |= f.bit();
        Ok(())
    }
}

/// Skip the value of an unknown (or already decided) field.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

/// An object key mapped to a field, `None` if unknown; no allocation even when escaped.
struct KeySeed<F>(PhantomData<fn() -> F>);

impl<F> KeySeed<F> {
    fn new() -> Self {
        KeySeed(PhantomData)
    }
}

impl<'de, F: FieldKey> DeserializeSeed<'de> for KeySeed<F> {
    type Value = Option<F>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<F>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, F: FieldKey> Visitor<'de> for KeySeed<F> {
    type Value = Option<F>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<F>, E> {
        Ok(F::lookup(v))
    }
}

/// `null` as `None`, anything else through the inner seed.
#[derive(Clone, Copy)]
struct NullOr<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for NullOr<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for NullOr<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

/// A JSON array, each element through the seed.
#[derive(Clone, Copy)]
struct Repeated<S>(S);

impl<'de, S: DeserializeSeed<'de> + Copy> DeserializeSeed<'de> for Repeated<S> {
    type Value = Vec<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, S: DeserializeSeed<'de> + Copy> Visitor<'de> for Repeated<S> {
    type Value = Vec<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.0)? {
            out.push(v);
        }
        Ok(out)
    }
}

/// A repeated field: `null` or absent is empty.
fn repeated<'de, A, S>(map: &mut A, seed: S) -> Result<Vec<S::Value>, A::Error>
where
    A: MapAccess<'de>,
    S: DeserializeSeed<'de> + Copy,
{
    Ok(map
        .next_value_seed(NullOr(Repeated(seed)))?
        .unwrap_or_default())
}

/// A repeated message field.
fn messages<'de, A: MapAccess<'de>, M: JsonMessage>(map: &mut A) -> Result<Vec<M>, A::Error> {
    repeated(map, MessageSeed::<M>::new())
}

/// An optional message field (`null` is unset).
fn message<'de, A: MapAccess<'de>, M: JsonMessage>(map: &mut A) -> Result<Option<M>, A::Error> {
    map.next_value_seed(NullOr(MessageSeed::<M>::new()))
}

/// A scalar field with serde's own rules for its type (`String`, `bool`, `u32`, `i32`,
/// `f64`); `null` is the default.
fn scalar<'de, A, T>(map: &mut A) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: de::Deserialize<'de> + Default,
{
    Ok(map.next_value::<Option<T>>()?.unwrap_or_default())
}

#[cfg(test)]
mod tests;
