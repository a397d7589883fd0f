//! Scalar encodings of OTLP/JSON: 64-bit integers as numbers or strings, the lenient
//! `asDouble`/`asInt` members, doubles that may be strings, hex and base64 bytes.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{NullOr, repeated};

/// A `fixed64`/`uint64` field: integer or decimal string; `null` is 0.
pub(super) fn uint64<'de, A: MapAccess<'de>>(map: &mut A) -> Result<u64, A::Error> {
    Ok(map.next_value_seed(NullOr(U64Seed))?.unwrap_or_default())
}

/// A repeated `fixed64`/`uint64` field (elements may not be `null`).
pub(super) fn uint64s<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Vec<u64>, A::Error> {
    repeated(map, U64Seed)
}

/// A `u64` as a JSON integer or a decimal string.
#[derive(Clone, Copy)]
pub(super) struct U64Seed;

impl<'de> DeserializeSeed<'de> for U64Seed {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for U64Seed {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a u64 integer or a string containing a u64 integer")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(format_args!("i64 value {v} is out of range for u64")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        v.parse::<u64>().map_err(E::custom)
    }
}

/// An `i64` as a JSON integer or a decimal string.
#[derive(Clone, Copy)]
pub(super) struct I64Seed;

impl<'de> DeserializeSeed<'de> for I64Seed {
    type Value = i64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<i64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for I64Seed {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an i64 integer or a string containing an i64 integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v)
            .map_err(|_| E::custom(format_args!("u64 value {v} is out of range for i64")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
        v.parse::<i64>().map_err(E::custom)
    }
}

/// `asDouble`/`asInt` as the generic path reads them: a value of the wrong type is
/// consumed and reported as [`NumberMember::Invalid`], not as an error.
#[derive(Clone, Copy)]
pub(super) enum NumberSeed {
    Double,
    Int,
}

/// One `asDouble`/`asInt` member.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum NumberMember {
    /// `null`: the member is absent.
    Null,
    /// Present but not a number of its kind: the point has no value.
    Invalid,
    Double(f64),
    Int(i64),
}

impl NumberSeed {
    fn invalid<E: de::Error>(self) -> Result<NumberMember, E> {
        Ok(NumberMember::Invalid)
    }
}

impl<'de> DeserializeSeed<'de> for NumberSeed {
    type Value = NumberMember;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<NumberMember, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NumberSeed {
    type Value = NumberMember;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_unit<E: de::Error>(self) -> Result<NumberMember, E> {
        Ok(NumberMember::Null)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<NumberMember, E> {
        match self {
            NumberSeed::Double => Ok(NumberMember::Double(v)),
            NumberSeed::Int => self.invalid(),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<NumberMember, E> {
        match self {
            NumberSeed::Double => Ok(NumberMember::Double(v as f64)),
            NumberSeed::Int => {
                Ok(i64::try_from(v).map_or(NumberMember::Invalid, NumberMember::Int))
            }
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<NumberMember, E> {
        match self {
            NumberSeed::Double => Ok(NumberMember::Double(v as f64)),
            NumberSeed::Int => Ok(NumberMember::Int(v)),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<NumberMember, E> {
        match self {
            NumberSeed::Double => self.invalid(),
            NumberSeed::Int => Ok(v
                .parse::<i64>()
                .map_or(NumberMember::Invalid, NumberMember::Int)),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<NumberMember, E> {
        self.invalid()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NumberMember, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.invalid()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NumberMember, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.invalid()
    }
}

/// A double that may also be written as a string: `"NaN"`, `"Infinity"`, `"-Infinity"`,
/// or anything `f64::from_str` reads (`ValueAtQuantile` only, as the generic path).
#[derive(Clone, Copy)]
pub(super) struct SpecialF64Seed;

impl<'de> DeserializeSeed<'de> for SpecialF64Seed {
    type Value = f64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SpecialF64Seed {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a float or a string representing NaN, Infinity, or -Infinity")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        match v {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => v.parse::<f64>().map_err(|_| {
                E::custom(format_args!(
                    "invalid string for f64: expected a number, NaN, Infinity, or -Infinity but got '{v}'"
                ))
            }),
        }
    }
}

/// Bytes written as hex (`spanId`, `traceId`).
#[derive(Clone, Copy)]
pub(super) struct HexSeed;

impl<'de> DeserializeSeed<'de> for HexSeed {
    type Value = Vec<u8>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for HexSeed {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string representing hex-encoded bytes")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        const_hex::decode(v).map_err(|e| E::custom(format_args!("invalid hex string: {e}")))
    }
}

/// A hex bytes field; `null` is empty.
pub(super) fn hex_bytes<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Vec<u8>, A::Error> {
    Ok(map.next_value_seed(NullOr(HexSeed))?.unwrap_or_default())
}

/// Bytes written as standard base64 with padding (`bytesValue`).
#[derive(Clone, Copy)]
pub(super) struct Base64Seed;

impl<'de> DeserializeSeed<'de> for Base64Seed {
    type Value = Vec<u8>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Base64Seed {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a base64 string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_err(|e| E::custom(format_args!("invalid base64 in bytesValue: {e}")))
    }
}
