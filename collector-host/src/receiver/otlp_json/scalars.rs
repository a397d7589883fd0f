//! Scalar encodings of OTLP/JSON: 64-bit integers as numbers or strings, the lenient
//! `asDouble`/`asInt` members, doubles that may be strings, hex and base64 bytes.

use super::reader::{Number, Peek, Reader, Result};
use super::repeated;

/// A `fixed64`/`uint64` field: integer or decimal string; `null` is 0.
pub(super) fn uint64(r: &mut Reader<'_>) -> Result<u64> {
    if r.null()? {
        return Ok(0);
    }
    u64_value(r)
}

/// A repeated `fixed64`/`uint64` field (elements may not be `null`).
pub(super) fn uint64s(r: &mut Reader<'_>) -> Result<Vec<u64>> {
    repeated(r, u64_value)
}

const U64_EXPECTING: &str = "a u64 integer or a string containing a u64 integer";
const I64_EXPECTING: &str = "an i64 integer or a string containing an i64 integer";

/// A `u64` as a JSON integer or a decimal string (Rust's parser: an optional `+`).
fn u64_value(r: &mut Reader<'_>) -> Result<u64> {
    match r.peek() {
        Peek::Number => match r.number()? {
            Number::U64(v) => Ok(v),
            Number::I64(v) => Err(r.error(format_args!("i64 value {v} is out of range for u64"))),
            n @ Number::F64(_) => Err(r.error(format_args!(
                "invalid type: {}, expected {U64_EXPECTING}",
                n.describe()
            ))),
        },
        Peek::String => {
            if let Some(v) = r.digit_string(u64::MAX) {
                return Ok(v);
            }
            let s = r.string()?;
            if let Some(v) = short_decimal(&s) {
                return Ok(v);
            }
            s.parse::<u64>()
                .map_err(|e| r.error(format_args!("{e}: {s:?}")))
        }
        _ => Err(r.invalid_type(U64_EXPECTING)),
    }
}

/// The value of 1 to 19 ASCII digits (which cannot overflow a `u64`), else `None` and the
/// caller parses with Rust's rules. Timestamps take this path on every point.
#[inline]
fn short_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

/// An `i64` as a JSON integer or a decimal string; `None` for `null`.
pub(super) fn int64(r: &mut Reader<'_>) -> Result<Option<i64>> {
    match r.peek() {
        Peek::Null => r.null().map(|_| None),
        Peek::Number => match r.number()? {
            Number::I64(v) => Ok(Some(v)),
            Number::U64(v) => i64::try_from(v)
                .map(Some)
                .map_err(|_| r.error(format_args!("u64 value {v} is out of range for i64"))),
            n @ Number::F64(_) => Err(r.error(format_args!(
                "invalid type: {}, expected {I64_EXPECTING}",
                n.describe()
            ))),
        },
        Peek::String => {
            if let Some(v) = r.digit_string(i64::MAX as u64) {
                return Ok(Some(v as i64));
            }
            let s = r.string()?;
            s.parse::<i64>()
                .map(Some)
                .map_err(|e| r.error(format_args!("{e}: {s:?}")))
        }
        _ => Err(r.invalid_type(I64_EXPECTING)),
    }
}

/// Which member of a point's or exemplar's value oneof is being read.
#[derive(Clone, Copy)]
pub(super) enum NumberKind {
    Double,
    Int,
}

/// One `asDouble`/`asInt` member, read as the generic path reads it: a value of the wrong
/// type is consumed and reported as [`NumberMember::Invalid`], not as an error (its
/// syntax must still be valid, and a string must still decode).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum NumberMember {
    /// `null`: the member is absent.
    Null,
    /// Present but not a number of its kind: the point has no value.
    Invalid,
    Double(f64),
    Int(i64),
}

impl NumberKind {
    pub(super) fn read(self, r: &mut Reader<'_>) -> Result<NumberMember> {
        use NumberKind::{Double, Int};
        Ok(match (r.peek(), self) {
            (Peek::Null, _) => {
                r.null()?;
                NumberMember::Null
            }
            (Peek::Number, _) => match (r.number()?, self) {
                (n, Double) => NumberMember::Double(n.as_f64()),
                (Number::I64(v), Int) => NumberMember::Int(v),
                (Number::U64(v), Int) => {
                    i64::try_from(v).map_or(NumberMember::Invalid, NumberMember::Int)
                }
                (Number::F64(_), Int) => NumberMember::Invalid,
            },
            (Peek::String, Double) => {
                r.string()?;
                NumberMember::Invalid
            }
            (Peek::String, Int) => r
                .string()?
                .parse::<i64>()
                .map_or(NumberMember::Invalid, NumberMember::Int),
            (Peek::True | Peek::False | Peek::Array | Peek::Object, _) => {
                r.skip_value()?;
                NumberMember::Invalid
            }
            (Peek::Other, _) => return Err(r.invalid_type("a number")),
        })
    }
}

/// A double that may also be written as a string: `"NaN"`, `"Infinity"`, `"-Infinity"`,
/// or anything `f64::from_str` reads (`ValueAtQuantile` only, as the generic path);
/// `null` is 0.
pub(super) fn special_f64(r: &mut Reader<'_>) -> Result<f64> {
    match r.peek() {
        Peek::Null => r.null().map(|_| 0.0),
        Peek::Number => r.number().map(Number::as_f64),
        Peek::String => {
            let v = r.string()?;
            match &*v {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                _ => v.parse::<f64>().map_err(|_| {
                    r.error(format_args!(
                        "invalid string for f64: expected a number, NaN, Infinity, or -Infinity but got '{v}'"
                    ))
                }),
            }
        }
        _ => Err(r.invalid_type("a float or a string representing NaN, Infinity, or -Infinity")),
    }
}

/// Bytes written as hex (`spanId`, `traceId`, either case, optional `0x`); `null` is empty.
pub(super) fn hex_bytes(r: &mut Reader<'_>) -> Result<Vec<u8>> {
    match r.peek() {
        Peek::Null => r.null().map(|_| Vec::new()),
        Peek::String => {
            let v = r.string()?;
            const_hex::decode(&*v).map_err(|e| r.error(format_args!("invalid hex string: {e}")))
        }
        _ => Err(r.invalid_type("a string representing hex-encoded bytes")),
    }
}

/// Bytes written as standard base64 with padding (`bytesValue`); `None` for `null`.
pub(super) fn base64_value(r: &mut Reader<'_>) -> Result<Option<Vec<u8>>> {
    use base64::Engine as _;
    match r.peek() {
        Peek::Null => r.null().map(|_| None),
        Peek::String => {
            let v = r.string()?;
            base64::engine::general_purpose::STANDARD
                .decode(&*v)
                .map(Some)
                .map_err(|e| r.error(format_args!("invalid base64 in bytesValue: {e}")))
        }
        _ => Err(r.invalid_type("a base64 string")),
    }
}

#[cfg(test)]
mod tests {
    use super::short_decimal;

    #[test]
    fn short_decimals_agree_with_the_std_parser() {
        for s in [
            "0",
            "7",
            "1763769600000000000",
            "9999999999999999999",
            "0000000000000000001",
        ] {
            assert_eq!(short_decimal(s), s.parse::<u64>().ok(), "{s}");
        }
        // Left to the std parser: empty, signs, 20 digits, anything not a digit.
        for s in ["", "+7", "-1", "18446744073709551615", "1 ", "1_0", "١"] {
            assert_eq!(short_decimal(s), None, "{s}");
        }
    }
}
