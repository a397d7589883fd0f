//! Text encodings more than one crate needs, implemented once: decoding a query component
//! (`application/x-www-form-urlencoded`: `+` is a space, `%XX` a byte) and escaping a
//! Prometheus label value (text exposition format 0.0.4).

use std::borrow::Cow;
use std::fmt;

/// Why a query component did not decode under [`form_decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormDecodeError {
    /// A `%` not followed by two hex digits.
    Escape,
    /// The decoded bytes are not UTF-8.
    Utf8,
}

impl fmt::Display for FormDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FormDecodeError::Escape => "malformed percent escape",
            FormDecodeError::Utf8 => "percent-decoded bytes are not UTF-8",
        })
    }
}

impl std::error::Error for FormDecodeError {}

/// Whether anything in `s` decodes to something else.
fn has_escapes(s: &str) -> bool {
    s.bytes().any(|b| b == b'%' || b == b'+')
}

/// Whether some `%` is not followed by two hex digits.
fn has_malformed_escape(b: &[u8]) -> bool {
    b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// `+` to space, then `%XX` to its byte; a malformed escape stays as written.
fn decode_bytes(s: &str) -> Vec<u8> {
    let spaced: Cow<'_, [u8]> = if s.contains('+') {
        Cow::Owned(
            s.bytes()
                .map(|b| if b == b'+' { b' ' } else { b })
                .collect(),
        )
    } else {
        Cow::Borrowed(s.as_bytes())
    };
    percent_encoding::percent_decode(&spaced).collect()
}

/// Decode one query component strictly: a malformed `%` escape or bytes that are not UTF-8
/// are an error, never a guess (so two different raw values cannot decode to the same
/// string). Borrows when there is nothing to decode.
pub fn form_decode(s: &str) -> Result<Cow<'_, str>, FormDecodeError> {
    if !has_escapes(s) {
        return Ok(Cow::Borrowed(s));
    }
    if has_malformed_escape(s.as_bytes()) {
        return Err(FormDecodeError::Escape);
    }
    String::from_utf8(decode_bytes(s))
        .map(Cow::Owned)
        .map_err(|_| FormDecodeError::Utf8)
}

/// Decode one query component leniently: a malformed `%` escape is kept as written and
/// bytes that are not UTF-8 become U+FFFD. Borrows when there is nothing to decode.
pub fn form_decode_lossy(s: &str) -> Cow<'_, str> {
    if !has_escapes(s) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(String::from_utf8_lossy(&decode_bytes(s)).into_owned())
}

/// Whether a byte of a label value is written differently: `\`, `"` and newline are
/// escaped; the other ASCII control characters (CR, TAB, NUL, ..., DEL) are replaced.
fn is_special(b: u8) -> bool {
    matches!(b, b'\\' | b'"' | b'\n') || b < 0x20 || b == 0x7f
}

/// Whether a Prometheus label value needs escaping (it holds `\`, `"`, a newline or another
/// ASCII control character).
pub fn label_value_needs_escape(s: &str) -> bool {
    s.bytes().any(is_special)
}

/// Write a label value as the text exposition format requires: `\` -> `\\`, `"` -> `\"`,
/// newline -> `\n`. The format has no escape for the other ASCII control characters, and a
/// raw CR, NUL or TAB in a label value breaks or misleads scrapers and terminals, so each is
/// written as U+FFFD. Everything else (any other UTF-8) is written as is.
fn write_label_value<W: fmt::Write>(s: &str, out: &mut W) -> fmt::Result {
    if !label_value_needs_escape(s) {
        return out.write_str(s);
    }
    let mut rest = s;
    while let Some(i) = rest.bytes().position(is_special) {
        out.write_str(&rest[..i])?;
        out.write_str(match rest.as_bytes()[i] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            b'\n' => "\\n",
            _ => "\u{FFFD}",
        })?;
        rest = &rest[i + 1..];
    }
    out.write_str(rest)
}

/// Append a label value escaped (see [`LabelValue`] for the rules).
pub fn escape_label_value(s: &str, out: &mut String) {
    // Writing into a String cannot fail.
    let _ = write_label_value(s, out);
}

/// A label value that displays escaped: `format!("{k}=\"{}\"", LabelValue(v))`. Escapes
/// `\` as `\\`, `"` as `\"` and a newline as `\n`, as the text exposition format requires,
/// and writes the other ASCII control characters as U+FFFD.
#[derive(Debug, Clone, Copy)]
pub struct LabelValue<'a>(pub &'a str);

impl fmt::Display for LabelValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_label_value(self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plus_is_a_space_and_escapes_are_bytes() {
        assert_eq!(form_decode("a+b%2Bc").unwrap(), "a b+c");
        assert_eq!(form_decode("prod%2Da").unwrap(), "prod-a");
        assert_eq!(form_decode("%0d%0A").unwrap(), "\r\n");
        // Decoded once: %25 is a literal percent sign, not the start of another escape.
        assert_eq!(form_decode("%2541").unwrap(), "%41");
        assert_eq!(form_decode_lossy("a+b%2Bc"), "a b+c");
    }

    #[test]
    fn nothing_to_decode_borrows() {
        assert!(matches!(form_decode("plain-id_1.x~"), Ok(Cow::Borrowed(_))));
        assert!(matches!(form_decode_lossy("plain"), Cow::Borrowed(_)));
        assert!(matches!(form_decode(""), Ok(Cow::Borrowed(""))));
    }

    #[test]
    fn malformed_escapes_are_an_error_strictly_and_kept_leniently() {
        for (raw, lossy) in [
            ("%", "%"),
            ("%4", "%4"),
            ("%zz", "%zz"),
            ("a%zz%4", "a%zz%4"),
            ("%41%", "A%"),
            ("%%41", "%A"),
            ("%g1", "%g1"),
        ] {
            assert_eq!(form_decode(raw), Err(FormDecodeError::Escape), "{raw:?}");
            assert_eq!(form_decode_lossy(raw), lossy, "{raw:?}");
        }
    }

    #[test]
    fn multibyte_utf8_decodes_and_invalid_utf8_is_refused_or_replaced() {
        // "ü" is C3 BC; "ク" is E3 82 AF; both escaped and raw forms give the same string.
        assert_eq!(form_decode("%C3%BC").unwrap(), "ü");
        assert_eq!(form_decode("%e3%82%af+x").unwrap(), "ク x");
        assert_eq!(form_decode("ü+%C3%BC").unwrap(), "ü ü");
        // A lone continuation byte, a truncated sequence, an overlong encoding of '/'.
        for raw in ["%BC", "%C3", "%E3%82", "%C0%AF"] {
            assert_eq!(form_decode(raw), Err(FormDecodeError::Utf8), "{raw:?}");
            assert!(form_decode_lossy(raw).contains('\u{FFFD}'), "{raw:?}");
        }
        assert_eq!(form_decode_lossy("a%FFb"), "a\u{FFFD}b");
        assert_eq!(
            FormDecodeError::Utf8.to_string(),
            "percent-decoded bytes are not UTF-8"
        );
    }

    #[test]
    fn label_values_escape_backslash_quote_newline_and_replace_controls() {
        let cases = [
            ("plain", "plain"),
            ("", ""),
            ("a\\b", "a\\\\b"),
            ("say \"hi\"", "say \\\"hi\\\""),
            ("two\nlines", "two\\nlines"),
            ("\\\"\n", "\\\\\\\"\\n"),
            // Other control characters have no escape: they become U+FFFD. Non-ASCII text
            // is written as is.
            ("tab\tcr\r ü ク", "tab\u{FFFD}cr\u{FFFD} ü ク"),
            ("nul\0del\x7f", "nul\u{FFFD}del\u{FFFD}"),
            ("ü ク", "ü ク"),
            ("end\\", "end\\\\"),
        ];
        for (raw, want) in cases {
            let mut s = String::from("x=");
            escape_label_value(raw, &mut s);
            assert_eq!(s, format!("x={want}"), "{raw:?}");
            assert_eq!(LabelValue(raw).to_string(), want, "{raw:?}");
            assert_eq!(label_value_needs_escape(raw), raw != want, "{raw:?}");
        }
    }
}
