//! Value ranges of config keys, declared once beside the config types they belong to.
//!
//! A range is a typed value ([`FloatRange`], [`IntRange`], [`DurationRange`],
//! [`NonNegative`]) that checks a number and words the error the way users read it
//! (`must be in (0, 10], got 12`). [`ranges!`](crate::ranges) attaches a table of them to a
//! config struct ([`Ranged`]), so that struct's `validate()` checks all of its plain ranges
//! with one call and keeps only the rules that relate keys to each other. A range may depend
//! on another key of the same struct (the table's binding names the struct being checked).
//!
//! Checks never stop at the first problem: every bad key adds one error with its path.

use std::time::Duration;

use crate::config::{ConfigErrors, format_duration};

/// Checks one value of type `T` against a range.
pub trait Bound<T> {
    /// Push one error for `path` when `v` is outside the range.
    fn check(&self, errs: &mut ConfigErrors, path: &str, v: T);
}

/// A config struct with a table of ranges for its plain keys (see [`ranges!`](crate::ranges)).
pub trait Ranged {
    /// Check every key in the table; error paths are `prefix.key` (`key` when `prefix` is
    /// empty).
    fn check_ranges(&self, errs: &mut ConfigErrors, prefix: &str);
}

/// `prefix.key`, or `key` for an empty prefix.
pub fn key_path(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A finite `f64` inside an interval, each end open or closed:
/// `must be in (0, 10], got 12` (a NaN or an infinity is always outside).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloatRange {
    lo: f64,
    hi: f64,
    lo_open: bool,
    hi_open: bool,
}

impl FloatRange {
    /// `[lo, hi]`.
    pub const fn closed(lo: f64, hi: f64) -> Self {
        FloatRange {
            lo,
            hi,
            lo_open: false,
            hi_open: false,
        }
    }

    /// `(lo, hi]`.
    pub const fn open_closed(lo: f64, hi: f64) -> Self {
        FloatRange {
            lo,
            hi,
            lo_open: true,
            hi_open: false,
        }
    }

    /// `[lo, hi)`.
    pub const fn closed_open(lo: f64, hi: f64) -> Self {
        FloatRange {
            lo,
            hi,
            lo_open: false,
            hi_open: true,
        }
    }

    pub fn contains(&self, v: f64) -> bool {
        let above = if self.lo_open {
            v > self.lo
        } else {
            v >= self.lo
        };
        let below = if self.hi_open {
            v < self.hi
        } else {
            v <= self.hi
        };
        v.is_finite() && above && below
    }
}

impl Bound<f64> for FloatRange {
    fn check(&self, errs: &mut ConfigErrors, path: &str, v: f64) {
        if !self.contains(v) {
            let l = if self.lo_open { "(" } else { "[" };
            let r = if self.hi_open { ")" } else { "]" };
            errs.push(
                path,
                format!("must be in {l}{}, {}{r}, got {v}", self.lo, self.hi),
            );
        }
    }
}

/// A finite `f64` at least 0: `must be a finite number >= 0, got -1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonNegative;

impl Bound<f64> for NonNegative {
    fn check(&self, errs: &mut ConfigErrors, path: &str, v: f64) {
        if !v.is_finite() || v < 0.0 {
            errs.push(path, format!("must be a finite number >= 0, got {v}"));
        }
    }
}

/// How an integer or duration range words its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wording {
    /// `must be in [lo, hi] (note), got v`.
    Interval,
    /// `must be between lo and hi, got v`.
    Between,
}

/// An integer in `[lo, hi]`, for `u32` and `u64` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntRange {
    lo: u64,
    hi: u64,
    wording: Wording,
    note: Option<&'static str>,
}

impl IntRange {
    /// `[lo, hi]`, worded `must be in [lo, hi], got v`.
    pub const fn closed(lo: u64, hi: u64) -> Self {
        IntRange {
            lo,
            hi,
            wording: Wording::Interval,
            note: None,
        }
    }

    /// `[lo, hi]`, worded `must be between lo and hi, got v`.
    pub const fn between(lo: u64, hi: u64) -> Self {
        IntRange {
            lo,
            hi,
            wording: Wording::Between,
            note: None,
        }
    }

    /// The same range with a reason after the interval: `must be in [3, 9] (why), got 2`.
    pub const fn because(mut self, note: &'static str) -> Self {
        self.note = Some(note);
        self
    }

    pub fn contains(&self, v: u64) -> bool {
        (self.lo..=self.hi).contains(&v)
    }
}

impl Bound<u64> for IntRange {
    fn check(&self, errs: &mut ConfigErrors, path: &str, v: u64) {
        if !self.contains(v) {
            let (lo, hi) = (self.lo, self.hi);
            errs.push(path, worded(self.wording, self.note, &lo, &hi, &v));
        }
    }
}

impl Bound<u32> for IntRange {
    fn check(&self, errs: &mut ConfigErrors, path: &str, v: u32) {
        Bound::<u64>::check(self, errs, path, u64::from(v));
    }
}

/// A duration in `[lo, hi]`, printed as config durations are written (`1ms`, `1h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationRange {
    lo: Duration,
    hi: Duration,
    wording: Wording,
    note: Option<&'static str>,
}

impl DurationRange {
    /// `[lo, hi]`, worded `must be in [1s, 1h], got 0s`.
    pub const fn closed(lo: Duration, hi: Duration) -> Self {
        DurationRange {
            lo,
            hi,
            wording: Wording::Interval,
            note: None,
        }
    }

    /// `[lo, hi]`, worded `must be between 1ms and 1h, got 0s`.
    pub const fn between(lo: Duration, hi: Duration) -> Self {
        DurationRange {
            lo,
            hi,
            wording: Wording::Between,
            note: None,
        }
    }

    /// The same range with a reason after the interval.
    pub const fn because(mut self, note: &'static str) -> Self {
        self.note = Some(note);
        self
    }

    pub fn contains(&self, d: Duration) -> bool {
        (self.lo..=self.hi).contains(&d)
    }
}

impl Bound<Duration> for DurationRange {
    fn check(&self, errs: &mut ConfigErrors, path: &str, d: Duration) {
        if !self.contains(d) {
            let (lo, hi, d) = (
                format_duration(self.lo),
                format_duration(self.hi),
                format_duration(d),
            );
            errs.push(path, worded(self.wording, self.note, &lo, &hi, &d));
        }
    }
}

fn worded(
    wording: Wording,
    note: Option<&str>,
    lo: &dyn std::fmt::Display,
    hi: &dyn std::fmt::Display,
    v: &dyn std::fmt::Display,
) -> String {
    let note = note.map(|n| format!(" ({n})")).unwrap_or_default();
    match wording {
        Wording::Interval => format!("must be in [{lo}, {hi}]{note}, got {v}"),
        Wording::Between => format!("must be between {lo} and {hi}{note}, got {v}"),
    }
}

/// Attach a table of ranges to a config struct: implements [`Ranged`] for it.
///
/// ```
/// use component::range::{FloatRange, IntRange, Ranged};
///
/// #[derive(Debug)]
/// struct Window {
///     steps: u32,
///     min_steps: u32,
///     fraction: f64,
/// }
///
/// component::ranges!(Window, |w| {
///     steps: IntRange::between(2, 1024),
///     // A range may depend on another key of the same struct.
///     min_steps: IntRange::between(1, u64::from(w.steps.clamp(1, 1024))),
///     fraction: FloatRange::open_closed(0.0, 1.0),
/// });
///
/// let mut errs = component::ConfigErrors::new();
/// Window { steps: 5, min_steps: 6, fraction: 0.0 }.check_ranges(&mut errs, "chronic");
/// let got: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
/// assert_eq!(
///     got,
///     [
///         "chronic.min_steps: must be between 1 and 5, got 6",
///         "chronic.fraction: must be in (0, 1], got 0",
///     ]
/// );
/// ```
#[macro_export]
macro_rules! ranges {
    ($ty:ty, |$this:ident| { $($field:ident : $range:expr),* $(,)? }) => {
        impl $crate::range::Ranged for $ty {
            fn check_ranges(&self, errs: &mut $crate::ConfigErrors, prefix: &str) {
                #[allow(unused_variables)]
                let $this = self;
                $(
                    $crate::range::Bound::check(
                        &$range,
                        errs,
                        &$crate::range::key_path(prefix, stringify!($field)),
                        self.$field,
                    );
                )*
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(f: impl FnOnce(&mut ConfigErrors)) -> Vec<String> {
        let mut e = ConfigErrors::new();
        f(&mut e);
        e.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn float_ranges_word_their_open_and_closed_ends_and_refuse_non_finite_numbers() {
        let got = messages(|e| {
            FloatRange::open_closed(0.0, 10.0).check(e, "k", 0.0);
            FloatRange::open_closed(0.0, 10.0).check(e, "k", 10.0);
            FloatRange::closed(0.0, 0.5).check(e, "f", 0.0);
            FloatRange::closed(0.0, 0.5).check(e, "f", 0.6);
            FloatRange::closed_open(0.0, 1.0).check(e, "s", 1.0);
            FloatRange::closed(0.0, 1.0).check(e, "n", f64::NAN);
            FloatRange::closed(0.0, 1.0).check(e, "i", f64::INFINITY);
            NonNegative.check(e, "m", -1.0);
            NonNegative.check(e, "m", 0.0);
        });
        assert_eq!(
            got,
            [
                "k: must be in (0, 10], got 0",
                "f: must be in [0, 0.5], got 0.6",
                "s: must be in [0, 1), got 1",
                "n: must be in [0, 1], got NaN",
                "i: must be in [0, 1], got inf",
                "m: must be a finite number >= 0, got -1",
            ]
        );
    }

    #[test]
    fn integer_and_duration_ranges_use_their_wording_and_note() {
        let s = Duration::from_secs;
        let got = messages(|e| {
            IntRange::closed(1, 1000).check(e, "a", 0u32);
            IntRange::closed(1, 1000).check(e, "a", 1000u32);
            IntRange::closed(3, 9).because("why").check(e, "b", 2u64);
            IntRange::between(2, 4).check(e, "c", 5u32);
            DurationRange::between(Duration::from_millis(1), s(3600)).check(e, "d", s(0));
            DurationRange::closed(s(1), s(3600))
                .because("note")
                .check(e, "p", s(7200));
            DurationRange::closed(s(1), s(3600)).check(e, "p", s(1));
        });
        assert_eq!(
            got,
            [
                "a: must be in [1, 1000], got 0",
                "b: must be in [3, 9] (why), got 2",
                "c: must be between 2 and 4, got 5",
                "d: must be between 1ms and 1h, got 0s",
                "p: must be in [1s, 1h] (note), got 2h",
            ]
        );
    }

    #[test]
    fn key_paths_join_with_a_dot_unless_the_prefix_is_empty() {
        assert_eq!(key_path("", "k"), "k");
        assert_eq!(key_path("threshold", "k"), "threshold.k");
    }
}
