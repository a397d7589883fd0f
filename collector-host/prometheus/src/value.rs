//! Attribute values as label strings, the way pdata's `Value.AsString` spells them
//! (what contrib puts in a label): strings verbatim, integers in decimal, doubles like a
//! JSON number, booleans `true`/`false`, bytes in base64, arrays and maps as JSON.

use std::fmt::Write;

use component::otlp::{AnyValue, AnyValueKind};

/// Append the label form of `v` to `out`.
pub fn write_value(v: Option<&AnyValue>, out: &mut String) {
    match v.and_then(|v| v.value.as_ref()) {
        None => {}
        Some(AnyValueKind::StringValue(s)) => out.push_str(s),
        Some(AnyValueKind::BoolValue(b)) => out.push_str(if *b { "true" } else { "false" }),
        Some(AnyValueKind::IntValue(i)) => {
            let _ = write!(out, "{i}");
        }
        Some(AnyValueKind::DoubleValue(d)) => write_json_number(*d, out),
        Some(AnyValueKind::BytesValue(b)) => write_base64(b, out),
        // A profiles-dictionary reference; metrics never carry one. Spelled as the index.
        Some(AnyValueKind::StringValueStrindex(i)) => {
            let _ = write!(out, "{i}");
        }
        Some(AnyValueKind::ArrayValue(a)) => {
            out.push('[');
            for (i, v) in a.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(Some(v), out);
            }
            out.push(']');
        }
        Some(AnyValueKind::KvlistValue(kv)) => {
            out.push('{');
            for (i, e) in kv.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(&e.key, out);
                out.push(':');
                write_json(e.value.as_ref(), out);
            }
            out.push('}');
        }
    }
}

/// The string form of a string value without copying, when it is one.
pub fn as_plain_str(v: Option<&AnyValue>) -> Option<&str> {
    match v.and_then(|v| v.value.as_ref()) {
        Some(AnyValueKind::StringValue(s)) => Some(s.as_str()),
        None => Some(""),
        _ => None,
    }
}

/// pdata formats doubles like ES6 `Number.prototype.toString` (Go's JSON encoder):
/// exponent form below 1e-6 and from 1e21, `e-7` not `e-07`, `e+21` with a sign.
fn write_json_number(d: f64, out: &mut String) {
    if d.is_nan() {
        out.push_str("json: unsupported value: NaN");
        return;
    }
    if d.is_infinite() {
        out.push_str(if d > 0.0 {
            "json: unsupported value: +Inf"
        } else {
            "json: unsupported value: -Inf"
        });
        return;
    }
    let a = d.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let s = format!("{d:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => {
                out.push_str(m);
                out.push_str("e+");
                out.push_str(e);
            }
            _ => out.push_str(&s),
        }
    } else {
        let _ = write!(out, "{d}");
    }
}

fn write_json(v: Option<&AnyValue>, out: &mut String) {
    match v.and_then(|v| v.value.as_ref()) {
        None => out.push_str("null"),
        Some(AnyValueKind::StringValue(s)) => write_json_string(s, out),
        Some(AnyValueKind::BytesValue(b)) => {
            out.push('"');
            write_base64(b, out);
            out.push('"');
        }
        Some(AnyValueKind::DoubleValue(d)) if !d.is_finite() => {
            write_json_string(&d.to_string(), out)
        }
        Some(_) => write_value(v, out),
    }
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_base64(bytes: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sym = |i: u32| char::from(ALPHABET[(i & 63) as usize]);
    for chunk in bytes.chunks(3) {
        let b0 = u32::from(chunk[0]);
        let b1 = chunk.get(1).copied().map_or(0, u32::from);
        let b2 = chunk.get(2).copied().map_or(0, u32::from);
        let n = (b0 << 16) | (b1 << 8) | b2;
        out.push(sym(n >> 18));
        out.push(sym(n >> 12));
        out.push(if chunk.len() > 1 { sym(n >> 6) } else { '=' });
        out.push(if chunk.len() > 2 { sym(n) } else { '=' });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::KeyValue;
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};

    fn s(v: AnyValueKind) -> String {
        let mut out = String::new();
        write_value(Some(&AnyValue { value: Some(v) }), &mut out);
        out
    }

    #[test]
    fn scalars() {
        assert_eq!(s(AnyValueKind::StringValue("x y".into())), "x y");
        assert_eq!(s(AnyValueKind::IntValue(-42)), "-42");
        assert_eq!(s(AnyValueKind::BoolValue(true)), "true");
        assert_eq!(s(AnyValueKind::DoubleValue(0.5)), "0.5");
        assert_eq!(s(AnyValueKind::DoubleValue(8.0)), "8");
        assert_eq!(s(AnyValueKind::DoubleValue(1e-7)), "1e-7");
        assert_eq!(s(AnyValueKind::DoubleValue(1.5e21)), "1.5e+21");
        assert_eq!(s(AnyValueKind::BytesValue(b"hello".to_vec())), "aGVsbG8=");
        assert_eq!(s(AnyValueKind::BytesValue(b"hi!".to_vec())), "aGkh");
        let mut empty = String::new();
        write_value(None, &mut empty);
        assert_eq!(empty, "");
    }

    #[test]
    fn composites_are_json() {
        let arr = AnyValueKind::ArrayValue(ArrayValue {
            values: vec![
                AnyValue {
                    value: Some(AnyValueKind::StringValue("a\"b".into())),
                },
                AnyValue {
                    value: Some(AnyValueKind::IntValue(1)),
                },
                AnyValue { value: None },
            ],
        });
        assert_eq!(s(arr), r#"["a\"b",1,null]"#);
        let kv = AnyValueKind::KvlistValue(KeyValueList {
            values: vec![
                component::otlp::kv_str("k", "v"),
                KeyValue {
                    key: "n".into(),
                    key_strindex: 0,
                    value: Some(AnyValue {
                        value: Some(AnyValueKind::BoolValue(false)),
                    }),
                },
            ],
        });
        assert_eq!(s(kv), r#"{"k":"v","n":false}"#);
    }
}
