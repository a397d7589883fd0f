//! Prometheus text exposition format 0.0.4 primitives: value formatting and escaping.

use std::fmt::Write;

/// `Content-Type` of the page [`crate::PrometheusExporter::render`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Append a sample value: `NaN`, `+Inf`, `-Inf`, or the shortest decimal that round-trips
/// (exponent form for very large or very small magnitudes, as Go does).
pub fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 1e15 && !(v == 0.0 && v.is_sign_negative()) {
        // Integral values (counters, 0/1 flags) skip the float formatter.
        write_int(out, v as i64);
    } else {
        let a = v.abs();
        if a != 0.0 && !(1e-6..1e21).contains(&a) {
            let _ = write!(out, "{v:e}");
        } else {
            let _ = write!(out, "{v}");
        }
    }
}

fn write_int(out: &mut String, v: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        out.push('-');
    }
    for &b in &buf[i..] {
        out.push(char::from(b));
    }
}

// Label-value escaping is shared with the host's self-telemetry page.
pub use component::text::{escape_label_value, label_value_needs_escape as needs_escape};

/// Append HELP text escaped: `\` -> `\\`, newline -> `\n`.
pub fn escape_help(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `# HELP name text\n# TYPE name kind\n`
pub fn write_header(out: &mut String, name: &str, help: &str, kind: &str) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    escape_help(help, out);
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64) -> String {
        let mut s = String::new();
        write_float(&mut s, v);
        s
    }

    #[test]
    fn floats() {
        assert_eq!(f(1.0), "1");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(-2.5), "-2.5");
        assert_eq!(f(0.93), "0.93");
        assert_eq!(f(1e-7), "1e-7");
        assert_eq!(f(1.5e300), "1.5e300");
        assert_eq!(f(123456789.0), "123456789");
        assert_eq!(f(-42.0), "-42");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(f(999_999_999_999_999.0), "999999999999999");
        assert_eq!(f(1e15), "1000000000000000");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(f64::INFINITY), "+Inf");
        assert_eq!(f(f64::NEG_INFINITY), "-Inf");
        // Every finite output parses back to the same value.
        for v in [
            0.1,
            1.0 / 3.0,
            1e-6,
            9.99e20,
            1e21,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            assert_eq!(f(v).parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn label_values_escape_backslash_quote_newline_and_replace_controls() {
        let mut s = String::new();
        escape_label_value("a\\b\"c\nd\te", &mut s);
        assert_eq!(s, "a\\\\b\\\"c\\nd\u{FFFD}e");
        let mut plain = String::new();
        escape_label_value("plain", &mut plain);
        assert_eq!(plain, "plain");
    }

    #[test]
    fn help_escapes_backslash_and_newline_only() {
        let mut s = String::new();
        escape_help("x \"q\" \\ \n y", &mut s);
        assert_eq!(s, "x \"q\" \\\\ \\n y");
    }
}
