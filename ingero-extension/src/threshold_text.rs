//! The text of a delivered threshold: six decimals, fixed width (`0.870348`, `0.900000`),
//! the form the seed's README shows in both the push header and the GET body.
//!
//! A threshold is rounded once, at publish time, to the nearest multiple of 1e-6. The rounded
//! value is what the store keeps and answers everywhere (header, GET body, `get`, admin), so
//! all of them agree digit for digit, and Go's `strconv.ParseFloat` on the text returns
//! exactly that value. [`ThresholdValue`] holds [0.1, 0.99], both multiples of 1e-6, so the
//! rounded value stays inside the agent's bounds. Half a micro-unit is far below anything the
//! agent can act on (its classifier hysteresis is 0.02).
//!
//! Six decimals in [0.1, 0.99] give exactly 890,001 possible texts. They are formatted lazily
//! in chunks of 1024 into process-lifetime (`'static`) strings, so a header value is a static
//! `Bytes`: cloning it on the push path touches no reference count. Worst case, every chunk
//! gets built: 870 chunks x 8 KiB = 6.8 MiB, once per process; a cluster whose threshold
//! drifts inside a 0.1-wide band needs about 100 chunks (0.8 MiB).

use std::fmt::Write as _;
use std::sync::OnceLock;

use ingero_wire::ThresholdValue;
use ingero_wire::{THRESHOLD_MAX, THRESHOLD_MIN};

/// Decimal places of a delivered threshold.
pub const THRESHOLD_DECIMALS: usize = 6;

const SCALE: f64 = 1e6;
/// Every text is `0.` plus six digits.
const TEXT_LEN: usize = 2 + THRESHOLD_DECIMALS;
const CHUNK: usize = 1024;
const MICROS_MIN: u32 = 100_000;
const MICROS_MAX: u32 = 990_000;
const CHUNKS: usize = ((MICROS_MAX - MICROS_MIN) as usize + 1).div_ceil(CHUNK);

static TEXT_CHUNKS: [OnceLock<&'static str>; CHUNKS] = [const { OnceLock::new() }; CHUNKS];

// The bounds the agent enforces are exactly the micro-unit range above.
const _: () = assert!(THRESHOLD_MIN * SCALE == MICROS_MIN as f64);
const _: () = assert!(THRESHOLD_MAX * SCALE == MICROS_MAX as f64);
// The last text of the last chunk still has six digits.
const _: () = assert!((MICROS_MIN as usize + CHUNKS * CHUNK) <= 1_000_000);

/// The value as delivered (rounded to six decimals) and its text, or `None` if the value
/// would leave the agent's bounds (impossible for a [`ThresholdValue`]; checked, not assumed).
pub(crate) fn delivered(value: ThresholdValue) -> Option<(ThresholdValue, &'static str)> {
    let micros = (value.threshold() * SCALE).round();
    if !(f64::from(MICROS_MIN)..=f64::from(MICROS_MAX)).contains(&micros) {
        return None;
    }
    let micros = micros as u32;
    let index = (micros - MICROS_MIN) as usize;
    let chunk = index / CHUNK;
    let texts = TEXT_CHUNKS.get(chunk)?.get_or_init(|| build_chunk(chunk));
    let start = (index % CHUNK) * TEXT_LEN;
    let text = texts.get(start..start + TEXT_LEN)?;
    let rounded = ThresholdValue::new(f64::from(micros) / SCALE, value.quorum_met())?;
    Some((rounded, text))
}

/// The texts of one chunk, back to back, kept for the life of the process.
fn build_chunk(chunk: usize) -> &'static str {
    let first = MICROS_MIN as usize + chunk * CHUNK;
    let mut s = String::with_capacity(CHUNK * TEXT_LEN);
    for micros in first..first + CHUNK {
        // Writing to a String cannot fail.
        let _ = write!(s, "0.{micros:06}");
    }
    s.leak()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(t: f64) -> (f64, &'static str) {
        let (v, text) = delivered(ThresholdValue::new(t, true).unwrap()).unwrap();
        (v.threshold(), text)
    }

    #[test]
    fn bounds_and_examples() {
        assert_eq!(text_of(0.1), (0.1, "0.100000"));
        assert_eq!(text_of(0.99), (0.99, "0.990000"));
        assert_eq!(text_of(0.870348), (0.870348, "0.870348"));
        assert_eq!(text_of(0.9), (0.9, "0.900000"));
        assert_eq!(text_of(0.8703484999), (0.870348, "0.870348"));
        assert_eq!(text_of(0.8703485001), (0.870349, "0.870349"));
        // One ulp inside the bounds rounds onto them, never past them.
        assert_eq!(text_of(f64::from_bits(0.1f64.to_bits() + 1)).1, "0.100000");
        assert_eq!(text_of(f64::from_bits(0.99f64.to_bits() - 1)).1, "0.990000");
        assert_eq!(CHUNKS, 870);
    }

    #[test]
    fn every_micro_value_has_its_own_exact_text() {
        // All 890,001 texts: each parses back to exactly the delivered value.
        for micros in MICROS_MIN..=MICROS_MAX {
            let t = f64::from(micros) / SCALE;
            let (v, text) = text_of(t);
            assert_eq!(v, t);
            assert_eq!(text.len(), TEXT_LEN);
            assert_eq!(text.parse::<f64>().unwrap(), v, "{text}");
            assert_eq!(&text[2..], format!("{micros:06}"));
        }
    }

    #[test]
    fn rounding_moves_a_value_by_at_most_half_a_micro_unit() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            // xorshift: spread values over the whole deliverable range.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = THRESHOLD_MIN + (x >> 11) as f64 / (1u64 << 53) as f64 * 0.89;
            let (v, text) = text_of(t);
            assert!((v - t).abs() <= 0.5e-6 + 1e-15, "{t} -> {v}");
            assert!((THRESHOLD_MIN..=THRESHOLD_MAX).contains(&v));
            assert_eq!(text.parse::<f64>().unwrap(), v);
        }
    }
}
