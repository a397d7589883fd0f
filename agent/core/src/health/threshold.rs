//! The Fleet threshold as the agent holds it (spec 2.1, 2.2): strict parsing of the
//! piggyback response headers and of the GET fallback body, and the cache both write into.
//!
//! Rejected values never overwrite a good one: the previous value keeps its old timestamp
//! and ages out on its own.

use std::collections::HashMap;
use std::time::Duration;

use component::Timestamp;
use ingero_wire::{THRESHOLD_MAX, THRESHOLD_MIN};

/// Minimum spacing of WARN lines per rejection reason.
pub const WARN_INTERVAL: Duration = Duration::from_secs(300);

/// Why a header pair or body was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    MalformedThreshold,
    MalformedQuorum,
    OutOfBounds,
}

impl RejectReason {
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectReason::MalformedThreshold => "malformed threshold",
            RejectReason::MalformedQuorum => "malformed quorum_met",
            RejectReason::OutOfBounds => "threshold out of sanity bounds",
        }
    }
}

/// The outcome of reading `X-Ingero-Threshold` / `X-Ingero-Quorum-Met`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HeaderParse {
    /// Neither header, or only one of them.
    Absent,
    Rejected(RejectReason),
    Valid {
        value: f64,
        quorum_met: bool,
    },
}

/// `true` / `false`, case-insensitive, surrounding spaces ignored; nothing else.
pub fn parse_bool_strict(s: &str) -> Option<bool> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// A finite value within [0.1, 0.99].
fn check_bounds(value: f64) -> Result<f64, RejectReason> {
    if !value.is_finite() {
        return Err(RejectReason::MalformedThreshold);
    }
    if !(THRESHOLD_MIN..=THRESHOLD_MAX).contains(&value) {
        return Err(RejectReason::OutOfBounds);
    }
    Ok(value)
}

/// Classify a header pair (values as received, `None` when the header is missing).
pub fn parse_headers(threshold: Option<&str>, quorum: Option<&str>) -> HeaderParse {
    let t = threshold.map(str::trim).unwrap_or("");
    let q = quorum.map(str::trim).unwrap_or("");
    if t.is_empty() || q.is_empty() {
        return HeaderParse::Absent;
    }
    let value = match t.parse::<f64>() {
        Ok(v) if v.is_finite() => v,
        _ => return HeaderParse::Rejected(RejectReason::MalformedThreshold),
    };
    let Some(quorum_met) = parse_bool_strict(q) else {
        return HeaderParse::Rejected(RejectReason::MalformedQuorum);
    };
    match check_bounds(value) {
        Ok(value) => HeaderParse::Valid { value, quorum_met },
        Err(r) => HeaderParse::Rejected(r),
    }
}

/// A decoded GET fallback body `{"threshold": f, "quorum_met": b}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdBody {
    pub threshold: f64,
    pub quorum_met: bool,
}

/// What a GET body means for the cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BodyParse {
    /// `{"threshold":0,"quorum_met":false}`: Fleet has nothing yet; cached as-is.
    ColdStart,
    Rejected(RejectReason),
    Valid {
        value: f64,
        quorum_met: bool,
    },
}

pub fn classify_body(b: ThresholdBody) -> BodyParse {
    if b.threshold == 0.0 && !b.quorum_met {
        return BodyParse::ColdStart;
    }
    match check_bounds(b.threshold) {
        Ok(value) => BodyParse::Valid {
            value,
            quorum_met: b.quorum_met,
        },
        Err(r) => BodyParse::Rejected(r),
    }
}

/// Decode a GET body the way Go's `encoding/json` does for this shape: keys matched
/// case-insensitively, unknown keys ignored, missing keys default to 0 / false, values of
/// the wrong type are an error.
pub fn decode_body(bytes: &[u8]) -> Result<ThresholdBody, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or_else(|| "body is not a JSON object".to_string())?;
    let mut out = ThresholdBody {
        threshold: 0.0,
        quorum_met: false,
    };
    for (k, val) in obj {
        if k.eq_ignore_ascii_case("threshold") {
            out.threshold = match val {
                serde_json::Value::Null => 0.0,
                serde_json::Value::Number(n) => n.as_f64().ok_or("threshold out of range")?,
                _ => return Err("threshold is not a number".into()),
            };
        } else if k.eq_ignore_ascii_case("quorum_met") {
            out.quorum_met = match val {
                serde_json::Value::Null => false,
                serde_json::Value::Bool(b) => *b,
                _ => return Err("quorum_met is not a boolean".into()),
            };
        }
    }
    Ok(out)
}

/// A threshold the agent holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachedThreshold {
    pub value: f64,
    pub quorum_met: bool,
    pub received_at: Timestamp,
}

/// Counters of what the cache saw (exported as agent self-metrics and in the status view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub accepted: u64,
    pub absent: u64,
    pub rejected: u64,
}

/// The threshold cache shared by the push client and the GET poller.
#[derive(Debug, Default)]
pub struct ThresholdCache {
    current: Option<CachedThreshold>,
    piggyback_available: bool,
    stats: CacheStats,
    last_warn: HashMap<RejectReason, Timestamp>,
}

impl ThresholdCache {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self) -> Option<CachedThreshold> {
        self.current
    }

    /// True when the last push response carried the headers (even rejected ones) or the last
    /// GET succeeded: the poller stays suspended while this holds.
    pub fn piggyback_available(&self) -> bool {
        self.piggyback_available
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Apply a header parse from a push response received at `now`. Returns a reason that
    /// should be logged now (rate limited to one per [`WARN_INTERVAL`] per reason).
    pub fn apply_headers(&mut self, p: HeaderParse, now: Timestamp) -> Option<RejectReason> {
        match p {
            HeaderParse::Absent => {
                self.piggyback_available = false;
                self.stats.absent += 1;
                None
            }
            HeaderParse::Rejected(r) => self.reject(r, now),
            HeaderParse::Valid { value, quorum_met } => {
                self.accept(value, quorum_met, now);
                None
            }
        }
    }

    /// Apply a successful GET body.
    pub fn apply_body(&mut self, p: BodyParse, now: Timestamp) -> Option<RejectReason> {
        match p {
            BodyParse::ColdStart => {
                self.accept(0.0, false, now);
                None
            }
            BodyParse::Rejected(r) => self.reject(r, now),
            BodyParse::Valid { value, quorum_met } => {
                self.accept(value, quorum_met, now);
                None
            }
        }
    }

    fn accept(&mut self, value: f64, quorum_met: bool, now: Timestamp) {
        self.current = Some(CachedThreshold {
            value,
            quorum_met,
            received_at: now,
        });
        self.piggyback_available = true;
        self.stats.accepted += 1;
    }

    fn reject(&mut self, r: RejectReason, now: Timestamp) -> Option<RejectReason> {
        self.piggyback_available = true;
        self.stats.rejected += 1;
        match self.last_warn.get(&r) {
            Some(last) if now.since(*last) < WARN_INTERVAL => None,
            _ => {
                self.last_warn.insert(r, now);
                Some(r)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_header_pairs() {
        assert_eq!(
            parse_headers(Some(" 0.82 "), Some("true")),
            HeaderParse::Valid {
                value: 0.82,
                quorum_met: true
            }
        );
        assert_eq!(
            parse_headers(Some("0.1"), Some(" FALSE ")),
            HeaderParse::Valid {
                value: 0.1,
                quorum_met: false
            }
        );
        assert_eq!(
            parse_headers(Some("0.99"), Some("True")),
            HeaderParse::Valid {
                value: 0.99,
                quorum_met: true
            }
        );
    }

    #[test]
    fn missing_or_lonely_headers_are_absent() {
        assert_eq!(parse_headers(None, None), HeaderParse::Absent);
        assert_eq!(parse_headers(Some("0.8"), None), HeaderParse::Absent);
        assert_eq!(parse_headers(None, Some("true")), HeaderParse::Absent);
        assert_eq!(parse_headers(Some("  "), Some("true")), HeaderParse::Absent);
    }

    #[test]
    fn rejected_values_match_the_spec_examples() {
        use RejectReason::*;
        for (t, q, want) in [
            ("abc", "true", MalformedThreshold),
            ("NaN", "true", MalformedThreshold),
            ("inf", "true", MalformedThreshold),
            ("1e400", "true", MalformedThreshold),
            ("0.8", "1", MalformedQuorum),
            ("0.8", "yes", MalformedQuorum),
            ("0", "true", OutOfBounds),
            ("1.0", "true", OutOfBounds),
            ("0.05", "false", OutOfBounds),
            ("0.999", "true", OutOfBounds),
            ("-0.5", "true", OutOfBounds),
        ] {
            assert_eq!(
                parse_headers(Some(t), Some(q)),
                HeaderParse::Rejected(want),
                "{t} {q}"
            );
        }
    }

    #[test]
    fn a_rejected_value_keeps_the_old_value_and_its_timestamp() {
        let mut c = ThresholdCache::new();
        let t0 = Timestamp::from_secs(100);
        c.apply_headers(parse_headers(Some("0.88"), Some("true")), t0);
        let first = c.get().unwrap();
        let warn = c.apply_headers(
            parse_headers(Some("0"), Some("true")),
            Timestamp::from_secs(110),
        );
        assert_eq!(warn, Some(RejectReason::OutOfBounds));
        assert_eq!(c.get(), Some(first));
        assert!(
            c.piggyback_available(),
            "rejected headers still suspend the poller"
        );
        // Second rejection within 5 minutes: counted, not logged.
        assert_eq!(
            c.apply_headers(
                parse_headers(Some("0"), Some("true")),
                Timestamp::from_secs(120)
            ),
            None
        );
        assert_eq!(
            c.apply_headers(
                parse_headers(Some("0"), Some("true")),
                Timestamp::from_secs(410)
            ),
            Some(RejectReason::OutOfBounds)
        );
        c.apply_headers(HeaderParse::Absent, Timestamp::from_secs(130));
        assert!(!c.piggyback_available());
        assert_eq!(c.get(), Some(first));
        assert_eq!(
            c.stats(),
            CacheStats {
                accepted: 1,
                absent: 1,
                rejected: 3
            }
        );
    }

    #[test]
    fn get_bodies_decode_like_go() {
        assert_eq!(
            decode_body(br#"{"Threshold": 0.87, "QUORUM_MET": true, "extra": [1]}"#),
            Ok(ThresholdBody {
                threshold: 0.87,
                quorum_met: true
            })
        );
        assert_eq!(
            decode_body(b"{}"),
            Ok(ThresholdBody {
                threshold: 0.0,
                quorum_met: false
            })
        );
        assert!(decode_body(br#"{"threshold":"0.8","quorum_met":true}"#).is_err());
        assert!(decode_body(br#"{"threshold":0.8,"quorum_met":"true"}"#).is_err());
        assert!(decode_body(b"[1]").is_err());
        assert!(decode_body(b"not json").is_err());
    }

    #[test]
    fn cold_start_body_is_cached_with_threshold_zero() {
        let mut c = ThresholdCache::new();
        let p = classify_body(ThresholdBody {
            threshold: 0.0,
            quorum_met: false,
        });
        assert_eq!(p, BodyParse::ColdStart);
        c.apply_body(p, Timestamp::from_secs(5));
        assert_eq!(
            c.get(),
            Some(CachedThreshold {
                value: 0.0,
                quorum_met: false,
                received_at: Timestamp::from_secs(5)
            })
        );
        assert_eq!(
            classify_body(ThresholdBody {
                threshold: 0.0,
                quorum_met: true
            }),
            BodyParse::Rejected(RejectReason::OutOfBounds)
        );
        assert_eq!(
            classify_body(ThresholdBody {
                threshold: 0.9,
                quorum_met: true
            }),
            BodyParse::Valid {
                value: 0.9,
                quorum_met: true
            }
        );
    }
}
