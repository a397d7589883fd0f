//! The synthetic signal source: a scripted workload that drives the real scoring, push and
//! classification code without a GPU or root (demos, tests, load simulation).
//!
//! A script is a list of steps `offset:value`, offsets from the first tick, e.g.
//! `0s:1.0,60s:0.8,120s:1.0`. `value` is a factor applied to throughput and compute
//! (1.0 = the healthy base workload, 0 = no kernels, so the node goes idle), or `fail`
//! (events unreadable: the node goes stale). Steps are separated by commas or newlines;
//! `#` starts a comment.

use std::time::Duration;

use component::Timestamp;
use component::config::parse_duration;

use super::{CollectError, Sample, SignalSource};
use crate::health::SignalSet;

/// Compute, memory and CPU of the healthy synthetic workload.
pub const BASE_COMPUTE: f64 = 0.9;
pub const BASE_MEMORY: f64 = 0.9;
pub const BASE_CPU: f64 = 0.9;
/// Longest script file read.
pub const MAX_SCRIPT_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    Factor(f64),
    Fail,
}

/// A parsed script: steps sorted by strictly increasing offset.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticScript {
    steps: Vec<(Duration, Step)>,
}

impl SyntheticScript {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut steps: Vec<(Duration, Step)> = Vec::new();
        for raw in text.split([',', '\n']) {
            let item = raw.split('#').next().unwrap_or("").trim();
            if item.is_empty() {
                continue;
            }
            let (off, val) = item
                .split_once(':')
                .ok_or_else(|| format!("step {item:?}: expected offset:value (e.g. 60s:0.8)"))?;
            let off = parse_duration(off).map_err(|e| format!("step {item:?}: {e}"))?;
            let val = val.trim();
            let step = if val.eq_ignore_ascii_case("fail") {
                Step::Fail
            } else {
                let f: f64 = val
                    .parse()
                    .map_err(|_| format!("step {item:?}: {val:?} is not a number or `fail`"))?;
                if !f.is_finite() || !(0.0..=100.0).contains(&f) {
                    return Err(format!("step {item:?}: factor must be in [0, 100]"));
                }
                Step::Factor(f)
            };
            if let Some((last, _)) = steps.last()
                && off <= *last
            {
                return Err(format!("step {item:?}: offsets must increase"));
            }
            steps.push((off, step));
        }
        if steps.is_empty() {
            return Err("empty script".into());
        }
        Ok(SyntheticScript { steps })
    }

    /// `@path` reads the script from a file; anything else is the script itself.
    pub fn load(spec: &str) -> Result<Self, String> {
        match spec.strip_prefix('@') {
            Some(path) => {
                use std::io::Read;
                let mut text = String::new();
                std::fs::File::open(path)
                    .and_then(|f| f.take(MAX_SCRIPT_BYTES).read_to_string(&mut text))
                    .map_err(|e| format!("read {path}: {e}"))?;
                Self::parse(&text)
            }
            None => Self::parse(spec),
        }
    }

    /// The step in force `elapsed` after the start (factor 1.0 before the first step).
    pub fn at(&self, elapsed: Duration) -> Step {
        self.steps
            .iter()
            .rev()
            .find(|(off, _)| *off <= elapsed)
            .map_or(Step::Factor(1.0), |(_, s)| *s)
    }
}

/// The source itself. Time comes from the `now` of each tick, so a fake clock drives it.
#[derive(Debug, Clone)]
pub struct SyntheticSource {
    script: SyntheticScript,
    base_rate: f64,
    window: Duration,
    start: Option<Timestamp>,
}

impl SyntheticSource {
    /// `base_rate`: kernel launches per second at factor 1; `window`: the signal window
    /// the launch count covers.
    pub fn new(script: SyntheticScript, base_rate: f64, window: Duration) -> Self {
        SyntheticSource {
            script,
            base_rate,
            window,
            start: None,
        }
    }
}

impl SignalSource for SyntheticSource {
    fn collect(&mut self, now: Timestamp) -> Result<Sample, CollectError> {
        let start = *self.start.get_or_insert(now);
        match self.script.at(now.since(start)) {
            Step::Fail => Err(CollectError("synthetic script step `fail`".into())),
            Step::Factor(f) => {
                let rate = self.base_rate * f;
                Ok(Sample {
                    raw: SignalSet::new(rate, (BASE_COMPUTE * f).min(1.0), BASE_MEMORY, BASE_CPU),
                    kernel_launches: (rate * self.window.as_secs_f64()).round() as i64,
                    per_cgroup: Vec::new(),
                })
            }
        }
    }

    fn name(&self) -> &'static str {
        "synthetic"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_parse_and_step() {
        let s = SyntheticScript::parse("0s:1.0, 60s:0.8,\n2m:1 # back to normal\n3m:fail,4m:0")
            .unwrap();
        assert_eq!(s.at(Duration::ZERO), Step::Factor(1.0));
        assert_eq!(s.at(Duration::from_secs(59)), Step::Factor(1.0));
        assert_eq!(s.at(Duration::from_secs(60)), Step::Factor(0.8));
        assert_eq!(s.at(Duration::from_secs(150)), Step::Factor(1.0));
        assert_eq!(s.at(Duration::from_secs(200)), Step::Fail);
        assert_eq!(s.at(Duration::from_secs(10_000)), Step::Factor(0.0));
        // Before the first step: healthy.
        assert_eq!(
            SyntheticScript::parse("30s:0.5")
                .unwrap()
                .at(Duration::from_secs(1)),
            Step::Factor(1.0)
        );
    }

    #[test]
    fn bad_scripts_say_why() {
        for (bad, why) in [
            ("", "empty"),
            ("0s", "expected offset:value"),
            ("0s:x", "not a number"),
            ("0s:-1", "factor must be"),
            ("10s:1,5s:1", "offsets must increase"),
            ("10:1", "missing unit"),
        ] {
            let e = SyntheticScript::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn source_follows_the_clock_it_is_given() {
        let script = SyntheticScript::parse("0s:1.0,60s:0.5,120s:0,180s:fail").unwrap();
        let mut src = SyntheticSource::new(script, 1000.0, Duration::from_secs(60));
        let t0 = Timestamp::from_secs(500);
        let a = src.collect(t0).unwrap();
        assert_eq!(a.raw, SignalSet::new(1000.0, 0.9, 0.9, 0.9));
        assert_eq!(a.kernel_launches, 60_000);
        let b = src
            .collect(t0.saturating_add(Duration::from_secs(61)))
            .unwrap();
        assert_eq!(b.raw.throughput, 500.0);
        assert!((b.raw.compute - 0.45).abs() < 1e-12);
        let c = src
            .collect(t0.saturating_add(Duration::from_secs(121)))
            .unwrap();
        assert_eq!(c.kernel_launches, 0);
        assert!(
            src.collect(t0.saturating_add(Duration::from_secs(181)))
                .is_err()
        );
    }
}
