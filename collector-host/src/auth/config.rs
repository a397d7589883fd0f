//! Configuration of the `ingero_auth` extension.
//!
//! ```yaml
//! extensions:
//!   ingero_auth:
//!     tokens_file: /etc/ingero-fleet/tokens.yaml   # or tokens_env: FLEET_TOKENS (content)
//!     grace_period: 5m        # removed tokens keep working this long
//!     reload_interval: 2s     # token file poll (SIGHUP reloads at once)
//!     audit_log: stderr       # "", "stderr" or a file path (JSON lines)
//!     audit_allowed: true     # also log allowed requests (denials are always logged)
//!     rate_limit: { requests_per_second: 0, burst: 0 }   # per token; 0 = unlimited
//! ```
//!
//! Token values never appear here: they live in the tokens file (or in environment
//! variables it names), so `print-config` has nothing secret to show.

use std::time::Duration;

use component::config::{ComponentConfig, ConfigErrors, duration};
use serde::{Deserialize, Serialize};

pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(300);
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(2);
/// Audit lines queued for the writer; beyond it lines are dropped and counted.
pub const AUDIT_QUEUE: usize = 8192;

/// A token bucket: `requests_per_second` refill, `burst` capacity; `0` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    pub requests_per_second: f64,
    /// Requests allowed at once after an idle period (default: one second's worth, at
    /// least 1).
    pub burst: u32,
}

impl RateLimitConfig {
    pub fn is_unlimited(&self) -> bool {
        self.requests_per_second <= 0.0
    }

    /// Capacity of the bucket.
    pub fn capacity(&self) -> f64 {
        if self.burst > 0 {
            f64::from(self.burst)
        } else {
            self.requests_per_second.ceil().max(1.0)
        }
    }

    pub fn check(&self, errs: &mut ConfigErrors, path: &str) {
        if !self.requests_per_second.is_finite() || self.requests_per_second < 0.0 {
            errs.push(
                format!("{path}.requests_per_second"),
                "must be a finite number >= 0 (0 = unlimited)",
            );
        }
        if self.requests_per_second == 0.0 && self.burst > 0 {
            errs.push(format!("{path}.burst"), "needs requests_per_second > 0");
        }
    }
}

/// `extensions.ingero_auth`
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Path of the tokens file (YAML list, see the README).
    pub tokens_file: String,
    /// Name of an environment variable holding the tokens file's content (instead of
    /// `tokens_file`; re-read on SIGHUP, not polled).
    pub tokens_env: String,
    #[serde(with = "duration")]
    pub grace_period: Duration,
    #[serde(with = "duration")]
    pub reload_interval: Duration,
    /// `""` (off), `"stderr"`, or a file path appended to.
    pub audit_log: String,
    pub audit_allowed: bool,
    pub rate_limit: RateLimitConfig,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens_file: String::new(),
            tokens_env: String::new(),
            grace_period: DEFAULT_GRACE_PERIOD,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            audit_log: "stderr".into(),
            audit_allowed: true,
            rate_limit: RateLimitConfig::default(),
        }
    }
}

impl ComponentConfig for AuthConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut e = ConfigErrors::new();
        match (self.tokens_file.is_empty(), self.tokens_env.is_empty()) {
            (true, true) => e.push("tokens_file", "is required (or tokens_env)"),
            (false, false) => e.push("tokens_env", "give tokens_file or tokens_env, not both"),
            _ => {}
        }
        if !self.tokens_env.is_empty()
            && !self
                .tokens_env
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            e.push(
                "tokens_env",
                "must be an environment variable name ([A-Za-z0-9_])",
            );
        }
        if self.reload_interval < Duration::from_millis(100) {
            e.push("reload_interval", "must be at least 100ms");
        }
        self.rate_limit.check(&mut e, "rate_limit");
        e.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::config::{decode, parse_yaml};

    #[test]
    fn every_bad_key_is_reported_with_its_path() {
        let v = parse_yaml(
            b"reload_interval: 10ms\nrate_limit: {requests_per_second: -1}\ntokens_env: 'A B'\n",
        )
        .unwrap();
        let e = decode::<AuthConfig>(&v).unwrap_err();
        let paths: Vec<_> = e.iter().map(|e| e.path.clone()).collect();
        assert_eq!(
            paths,
            [
                "tokens_env",
                "reload_interval",
                "rate_limit.requests_per_second"
            ]
        );
        let v = parse_yaml(b"{}").unwrap();
        let e = decode::<AuthConfig>(&v).unwrap_err();
        assert_eq!(
            e.iter().next().unwrap().to_string(),
            "tokens_file: is required (or tokens_env)"
        );
        let v = parse_yaml(b"tokens_file: x\ntoken: secret\n").unwrap();
        assert!(decode::<AuthConfig>(&v).is_err(), "unknown key accepted");
    }

    #[test]
    fn defaults() {
        let v = parse_yaml(b"tokens_file: /t.yaml\n").unwrap();
        let c = decode::<AuthConfig>(&v).unwrap();
        assert_eq!(c.grace_period, Duration::from_secs(300));
        assert!(c.rate_limit.is_unlimited());
        assert_eq!(c.audit_log, "stderr");
    }
}
