//! Config plumbing shared by every component and both hosts.
//!
//! A component's config is one serde struct (`deny_unknown_fields`, defaults for every key)
//! plus a `validate()` that returns *every* problem it finds. The config tree travels as a
//! [`ConfigValue`] (a JSON value): the Rust host parses YAML or TOML into it, the C ABI parses
//! YAML or JSON bytes into it, and [`decode`] turns it into the typed struct with the key
//! path of the first structural error. Both hosts therefore accept and reject the same configs.

use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serializer};

/// The config tree every host hands to components.
pub type ConfigValue = serde_json::Value;

/// One config problem, with the dotted key path it concerns
/// (`processors.ingero.threshold.k: must be > 0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error under a parent key (`threshold.k` -> `processors.ingero.threshold.k`).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        if prefix.is_empty() {
            return self;
        }
        self.path = if self.path.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.path)
        };
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in one config, in the order found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn new() -> Self {
        ConfigErrors(Vec::new())
    }

    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError::new(path, message));
    }

    pub fn extend_prefixed(&mut self, other: ConfigErrors, prefix: &str) {
        self.0
            .extend(other.0.into_iter().map(|e| e.prefixed(prefix)));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &ConfigError> {
        self.0.iter()
    }

    /// `Ok(())` when empty, otherwise `Err(self)`.
    pub fn into_result(self) -> Result<(), ConfigErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }

    pub fn prefixed(self, prefix: &str) -> Self {
        ConfigErrors(self.0.into_iter().map(|e| e.prefixed(prefix)).collect())
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A component config: serde for shape and defaults, `validate` for meaning.
pub trait ComponentConfig: DeserializeOwned + Default + fmt::Debug {
    /// Every semantic problem, with key paths relative to the component's own root.
    fn validate(&self) -> Result<(), ConfigErrors>;
}

/// Decode a component's config subtree and validate it. `null` (a bare `ingero:` key in
/// YAML) means "all defaults". Structural errors (unknown key, wrong type) carry the key
/// path; semantic errors come from `validate` and are all reported.
pub fn decode<T: ComponentConfig>(value: &ConfigValue) -> Result<T, ConfigErrors> {
    let cfg: T = if value.is_null() {
        T::default()
    } else {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            ConfigErrors::from(ConfigError::new(path, e.into_inner().to_string()))
        })?
    };
    cfg.validate()?;
    Ok(cfg)
}

/// Parse YAML (which includes JSON) bytes into a config tree.
pub fn parse_yaml(bytes: &[u8]) -> Result<ConfigValue, ConfigError> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(ConfigValue::Null);
    }
    serde_norway::from_slice::<ConfigValue>(bytes)
        .map_err(|e| ConfigError::new("", format!("invalid YAML/JSON: {e}")))
}

/// Format a duration the way Go's `time.Duration.String` would for the common cases
/// (`10s`, `1m30s`, `250ms`), so `print-config` round-trips.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos.is_multiple_of(1_000_000_000) {
        let mut secs = nanos / 1_000_000_000;
        let h = secs / 3600;
        secs %= 3600;
        let m = secs / 60;
        let s = secs % 60;
        let mut out = String::new();
        if h > 0 {
            out.push_str(&format!("{h}h"));
        }
        if m > 0 {
            out.push_str(&format!("{m}m"));
        }
        if s > 0 || out.is_empty() {
            out.push_str(&format!("{s}s"));
        }
        return out;
    }
    if nanos.is_multiple_of(1_000_000) {
        return format!("{}ms", nanos / 1_000_000);
    }
    if nanos.is_multiple_of(1_000) {
        return format!("{}us", nanos / 1_000);
    }
    format!("{nanos}ns")
}

/// Parse a Go-style duration: a sequence of `<number><unit>` with units
/// `ns`, `us`/`µs`, `ms`, `s`, `m`, `h` (`10s`, `1m30s`, `1.5s`, `250ms`). A bare `0` is allowed.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total: f64 = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("invalid duration {s:?}: expected a number"));
        }
        let num: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("invalid duration {s:?}: missing unit (e.g. 10s)")),
            other => return Err(format!("invalid duration {s:?}: unknown unit {other:?}")),
        };
        total += num * scale;
    }
    if !total.is_finite() || total > 1e12 {
        return Err(format!("invalid duration {s:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// serde adapter for durations written as strings (`push_interval: 10s`).
/// Use with `#[serde(with = "component::config::duration")]`.
/// `auth: { authenticator: <extension id> }` on a listener: otelcol's `configauth` shape.
/// The named extension (an `ingero_auth` instance) checks every request of that listener.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthRef {
    pub authenticator: String,
}

pub mod duration {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let raw = String::deserialize(d)?;
        parse_duration(&raw).map_err(serde::de::Error::custom)
    }
}

/// Helpers for `validate()` implementations.
pub mod check {
    use super::ConfigErrors;

    pub fn positive_finite(errs: &mut ConfigErrors, path: &str, v: f64) {
        if !v.is_finite() || v <= 0.0 {
            errs.push(path, format!("must be a finite number > 0, got {v}"));
        }
    }

    /// `lo < v <= hi` when `open_low`, else `lo <= v <= hi`.
    pub fn in_range(errs: &mut ConfigErrors, path: &str, v: f64, lo: f64, hi: f64, open_low: bool) {
        let ok = v.is_finite() && if open_low { v > lo } else { v >= lo } && v <= hi;
        if !ok {
            let lb = if open_low { "(" } else { "[" };
            errs.push(path, format!("must be in {lb}{lo}, {hi}], got {v}"));
        }
    }

    pub fn at_least_u64(errs: &mut ConfigErrors, path: &str, v: u64, min: u64) {
        if v < min {
            errs.push(path, format!("must be >= {min}, got {v}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Inner {
        k: f64,
        #[serde(with = "duration")]
        every: Duration,
    }

    impl Default for Inner {
        fn default() -> Self {
            Inner {
                k: 2.0,
                every: Duration::from_secs(10),
            }
        }
    }

    #[derive(Debug, Deserialize, Serialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Outer {
        inner: Inner,
        n: u32,
    }

    impl ComponentConfig for Outer {
        fn validate(&self) -> Result<(), ConfigErrors> {
            let mut e = ConfigErrors::new();
            check::positive_finite(&mut e, "inner.k", self.inner.k);
            check::at_least_u64(&mut e, "n", u64::from(self.n), 1);
            e.into_result()
        }
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("ten seconds").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn durations_format_round_trip() {
        for s in ["10s", "1m30s", "250ms", "2h", "1h1m1s", "5us", "7ns"] {
            let d = parse_duration(s).unwrap();
            assert_eq!(format_duration(d), s);
        }
    }

    #[test]
    fn unknown_key_reports_its_path() {
        let v = parse_yaml(b"inner:\n  k: 1.0\n  kk: 3\n").unwrap();
        let err = decode::<Outer>(&v).unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err.0[0].path, "inner.kk");
        assert!(err.0[0].message.contains("unknown field `kk`"), "{err}");
    }

    #[test]
    fn wrong_type_reports_its_path() {
        let v = parse_yaml(b"inner:\n  every: 10\n").unwrap();
        let err = decode::<Outer>(&v).unwrap_err();
        assert_eq!(err.0[0].path, "inner.every");
    }

    #[test]
    fn validation_reports_every_error_prefixed() {
        let v = parse_yaml(b"inner: {k: -1}\nn: 0\n").unwrap();
        let err = decode::<Outer>(&v).unwrap_err().prefixed("processors.x");
        let paths: Vec<_> = err.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["processors.x.inner.k", "processors.x.n"]);
        assert!(
            err.to_string()
                .contains("processors.x.inner.k: must be a finite number > 0")
        );
    }

    #[test]
    fn null_means_defaults() {
        let cfg = decode::<Outer>(&ConfigValue::Null);
        // n defaults to 0 which this test config rejects: defaults still go through validate.
        assert!(cfg.is_err());
        let v = parse_yaml(b"n: 3").unwrap();
        let cfg = decode::<Outer>(&v).unwrap();
        assert_eq!(cfg.inner, Inner::default());
    }

    #[test]
    fn json_is_accepted_as_yaml() {
        let v = parse_yaml(br#"{"inner": {"k": 3.5, "every": "1m"}, "n": 2}"#).unwrap();
        let cfg = decode::<Outer>(&v).unwrap();
        assert_eq!(cfg.inner.k, 3.5);
        assert_eq!(cfg.inner.every, Duration::from_secs(60));
    }
}
