//! NDJSON messages of the remediation socket, contract version 1 (spec 4.2, 7.2).
//!
//! `type` comes first; `event_id`, `rank` and `world_size` are optional. Unlike the Go
//! agent, `rank` is sent whenever `world_size` > 0, including rank 0 (spec 8.3 item 11);
//! it is an optional field, so consumers of version 1 read it either way.
//!
//! This project's extension: a `straggler_state` message may end with `causal_chain_id`
//! (string) and `causal_chains` (a JSON array, the same chains as the straggler event's
//! `ingero.causal_chains` attribute) while the agent knows the episode's cause. Both are
//! left out otherwise, so the message is then the Go agent's, byte for byte.

use component::Timestamp;
use serde::Serialize;

use crate::timefmt;

pub const TYPE_STRAGGLER_STATE: &str = "straggler_state";
pub const TYPE_STRAGGLER_RESOLVED: &str = "straggler_resolved";
/// Every `type` of contract version 1; the sink counts others as `unknown`.
pub const KNOWN_TYPES: [&str; 6] = [
    "memory",
    "straggle",
    TYPE_STRAGGLER_STATE,
    TYPE_STRAGGLER_RESOLVED,
    "inference_outlier",
    "inference_sampler_degraded",
];

#[derive(Debug, Clone, Serialize)]
pub struct StragglerState<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub node_id: &'a str,
    pub cluster_id: &'a str,
    pub score: f64,
    pub threshold: f64,
    pub detection_mode: &'a str,
    pub dominant_signal: &'a str,
    pub timestamp: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub event_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub causal_chain_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub causal_chains: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StragglerResolved<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub node_id: &'a str,
    pub cluster_id: &'a str,
    pub timestamp: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub event_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
}

/// Rank and world size as stamped on messages: both only when `world_size` > 0.
pub fn rank_fields(world_size: u32, rank: u32) -> (Option<u32>, Option<u32>) {
    if world_size > 0 {
        (Some(rank), Some(world_size))
    } else {
        (None, None)
    }
}

/// `timestamp` field value: RFC 3339 UTC with nanoseconds, trailing zeros trimmed.
pub fn timestamp(t: Timestamp) -> String {
    timefmt::rfc3339_nanos(t)
}

/// One NDJSON line (compact JSON and `\n`).
pub fn line<T: Serialize>(msg: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut v = serde_json::to_vec(msg)?;
    v.push(b'\n');
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn straggler_state_field_order_and_optionals() {
        let (rank, world_size) = rank_fields(8, 0);
        let m = StragglerState {
            kind: TYPE_STRAGGLER_STATE,
            node_id: "n1",
            cluster_id: "c1",
            score: 0.5,
            threshold: 0.88,
            detection_mode: "fleet",
            dominant_signal: "throughput",
            timestamp: timestamp(Timestamp::from_nanos(1_779_185_472_250_000_000)),
            event_id: "e-1",
            rank,
            world_size,
            causal_chain_id: None,
            causal_chains: None,
        };
        assert_eq!(
            String::from_utf8(line(&m).unwrap()).unwrap(),
            "{\"type\":\"straggler_state\",\"node_id\":\"n1\",\"cluster_id\":\"c1\",\"score\":0.5,\"threshold\":0.88,\
             \"detection_mode\":\"fleet\",\"dominant_signal\":\"throughput\",\"timestamp\":\"2026-05-19T10:11:12.25Z\",\
             \"event_id\":\"e-1\",\"rank\":0,\"world_size\":8}\n"
        );
        let (rank, world_size) = rank_fields(0, 0);
        let r = StragglerResolved {
            kind: TYPE_STRAGGLER_RESOLVED,
            node_id: "n1",
            cluster_id: "c1",
            timestamp: timestamp(Timestamp::from_secs(1)),
            event_id: "",
            rank,
            world_size,
        };
        assert_eq!(
            String::from_utf8(line(&r).unwrap()).unwrap(),
            "{\"type\":\"straggler_resolved\",\"node_id\":\"n1\",\"cluster_id\":\"c1\",\"timestamp\":\"1970-01-01T00:00:01Z\"}\n"
        );
    }

    #[test]
    fn a_known_cause_ends_the_straggler_state_message() {
        let m = StragglerState {
            kind: TYPE_STRAGGLER_STATE,
            node_id: "n1",
            cluster_id: "c1",
            score: 0.5,
            threshold: 0.88,
            detection_mode: "fleet",
            dominant_signal: "cpu",
            timestamp: timestamp(Timestamp::from_secs(1)),
            event_id: "e-2",
            rank: None,
            world_size: None,
            causal_chain_id: Some("n1:1000"),
            causal_chains: serde_json::from_str(r#"[{"id":"c","severity":"HIGH"}]"#).ok(),
        };
        assert_eq!(
            String::from_utf8(line(&m).unwrap()).unwrap(),
            "{\"type\":\"straggler_state\",\"node_id\":\"n1\",\"cluster_id\":\"c1\",\"score\":0.5,\"threshold\":0.88,\
             \"detection_mode\":\"fleet\",\"dominant_signal\":\"cpu\",\"timestamp\":\"1970-01-01T00:00:01Z\",\
             \"event_id\":\"e-2\",\"causal_chain_id\":\"n1:1000\",\"causal_chains\":[{\"id\":\"c\",\"severity\":\"HIGH\"}]}\n"
        );
    }
}
