//! Fan-out: one request to many agents' query APIs at once, with their clocks measured while
//! the request runs.
//!
//! - Every node gets its request concurrently (at most [`MAX_IN_FLIGHT`] at a time); each
//!   answer or failure (connect, TLS, HTTP status with the agent's message, timeout, garbage)
//!   is kept per node, so a partial answer is a normal result.
//! - Clock offset, NTP-style: three `GET /api/v1/time` per node, beside the request, after
//!   one that opens the connection; per sample `offset = remote - (t_send + t_receive) / 2`,
//!   within half the round trip of the truth. The sample with the shortest round trip is
//!   used (NTP's clock filter); the median of the three is reported beside it. A node whose
//!   offset is over the threshold is warned about; where events of several nodes go on one
//!   timeline (`explain`, the Perfetto export) each node's times are moved by its offset onto
//!   this host's clock.

pub mod actions;
pub mod cli;
pub mod client;
pub mod merge;

#[cfg(test)]
pub(crate) mod e2e_tests;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use client::{FanoutClient, NodeAnswer, Skew};

/// Requests in flight at once.
pub const MAX_IN_FLIGHT: usize = 256;
/// Longest node list accepted.
pub const MAX_NODES: usize = 4096;
/// Clock samples per node.
pub const SKEW_SAMPLES: usize = 3;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_SKEW_THRESHOLD: Duration = Duration::from_millis(10);
/// Largest answer read from one node.
pub const MAX_ANSWER_BYTES: usize = 256 << 20;

/// How to reach the nodes (`fleet.query` in the config; the flags of the same names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FanoutConfig {
    /// CA (PEM) the agents' certificates chain to (a generated certificate is its own CA).
    pub ca_cert: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// Bearer token file sent to every node.
    pub token_file: Option<PathBuf>,
    /// Plain HTTP.
    pub no_tls: bool,
    /// Per node.
    #[serde(with = "component::config::duration")]
    pub timeout: Duration,
    /// Warn when a node's clock is off this host's by more.
    #[serde(with = "component::config::duration")]
    pub clock_skew_threshold: Duration,
}

impl Default for FanoutConfig {
    fn default() -> Self {
        FanoutConfig {
            ca_cert: None,
            client_cert: None,
            client_key: None,
            token_file: None,
            no_tls: false,
            timeout: DEFAULT_TIMEOUT,
            clock_skew_threshold: DEFAULT_SKEW_THRESHOLD,
        }
    }
}

impl FanoutConfig {
    pub fn validate_into(&self, errs: &mut component::config::ConfigErrors, prefix: &str) {
        if self.client_cert.is_some() != self.client_key.is_some() {
            errs.push(
                format!("{prefix}.client_cert"),
                "client_cert and client_key must be given together",
            );
        }
        if self.no_tls && (self.ca_cert.is_some() || self.client_cert.is_some()) {
            errs.push(
                format!("{prefix}.no_tls"),
                "cannot be combined with ca_cert or client_cert",
            );
        }
        if self.timeout < Duration::from_millis(10) {
            errs.push(format!("{prefix}.timeout"), "must be >= 10ms");
        }
    }
}

/// Split, trim and deduplicate a node list (`a:8080,b:8080`), refusing one over
/// [`MAX_NODES`]. Entries are checked when they are dialled, so one bad entry fails alone.
pub fn parse_nodes<S: AsRef<str>>(lists: &[S]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut total = 0usize;
    for l in lists {
        for n in l.as_ref().split(',') {
            let n = n.trim();
            if n.is_empty() {
                continue;
            }
            total += 1;
            if total > MAX_NODES {
                let all: usize = lists
                    .iter()
                    .map(|l| {
                        l.as_ref()
                            .split(',')
                            .filter(|s| !s.trim().is_empty())
                            .count()
                    })
                    .sum();
                return Err(format!(
                    "{all} nodes given; at most {MAX_NODES} per fan-out (split the list)"
                ));
            }
            if seen.insert(n.to_string()) {
                out.push(n.to_string());
            }
        }
    }
    if out.is_empty() {
        return Err("no nodes given".into());
    }
    Ok(out)
}

/// Warnings for nodes whose clock is off this host's by more than `threshold`.
pub fn skew_warnings<T>(answers: &[NodeAnswer<T>], threshold: Duration) -> Vec<String> {
    let th = i64::try_from(threshold.as_nanos()).unwrap_or(i64::MAX);
    let mut w = Vec::new();
    for a in answers {
        let Some(s) = &a.skew else { continue };
        if s.offset_ns.unsigned_abs() > th.unsigned_abs() {
            let dir = if s.offset_ns > 0 {
                "ahead of"
            } else {
                "behind"
            };
            let who = match &a.node_id {
                Some(id) if id != &a.node => format!("{} ({id})", a.node),
                _ => a.node.clone(),
            };
            w.push(format!(
                "WARNING: clock skew: {who} is {:.1} ms {dir} this host (RTT {:.1} ms); its times are shifted by {:.1} ms onto this host's clock",
                s.offset_ns.unsigned_abs() as f64 / 1e6,
                s.rtt_ns as f64 / 1e6,
                -(s.offset_ns as f64) / 1e6
            ));
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_are_split_deduplicated_and_bounded() {
        let n = parse_nodes(&["a:1, b:2,,a:1", "c:3"]).unwrap();
        assert_eq!(n, vec!["a:1", "b:2", "c:3"]);
        assert!(parse_nodes::<&str>(&[]).is_err());
        let big: Vec<String> = (0..10_000)
            .map(|i| format!("10.0.{}.{}:8080", i / 250, i % 250))
            .collect();
        let e = parse_nodes(&[big.join(",")]).unwrap_err();
        assert!(e.contains("10000 nodes given"), "{e}");
    }
}
