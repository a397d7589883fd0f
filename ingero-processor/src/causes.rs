//! The latest known cause of each straggler, for the live view.
//!
//! This project's agent attaches the causal chains of a straggler episode to its straggler
//! event (`ingero.node.straggler_event` value 1, attributes `ingero.causal_chain_id` and
//! `ingero.causal_chains`; the Go agent sends neither). The board keeps the top chain of
//! each node's newest such event (severity, summary, root cause, episode id), and offers
//! them to the view as a [`ClusterViewSource`]. The batch itself is never changed: the
//! whole chains travel on to the exporters as the agent sent them.
//!
//! - A recovery event (value 0) clears the node's entry; so does [`CauseBoard::expire`]
//!   once the node has sent no event with a cause for the node TTL.
//! - An event without chains leaves the entry alone (the first events of an episode go
//!   before the agent's explain run has answered).
//! - Text is cut to [`MAX_TEXT_BYTES`] per field; at most [`MAX_CAUSES`] nodes are held
//!   (new nodes past it are counted, not stored); a chains value that is not the agreed
//!   JSON is counted and changes nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use component::otlp::{self, MetricKind, ResourceMetrics};
use ingero_wire::view::{ClusterViewSource, StragglerCause};
use ingero_wire::{attr, metric, resource};
use parking_lot::Mutex;
use serde::Deserialize;

use crate::ingest::MAX_ID_BYTES;
use component::{BatchContext, Timestamp};

/// Most nodes with a cause held across clusters.
pub const MAX_CAUSES: usize = 4096;
/// Longest summary, root cause or severity kept, in bytes (cut at a character boundary).
pub const MAX_TEXT_BYTES: usize = 512;

/// One element of `ingero.causal_chains`, as far as the view needs it.
#[derive(Debug, Deserialize)]
struct WireChain {
    #[serde(default)]
    severity: String,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    root_cause: String,
}

#[derive(Debug, Default)]
struct Inner {
    by_cluster: HashMap<Arc<str>, HashMap<Arc<str>, StragglerCause>>,
    held: usize,
}

/// Counters of the board (self-metrics and tests).
#[derive(Debug, Default)]
pub struct CauseCounters {
    /// Events whose chains were stored.
    pub stored: AtomicU64,
    /// Chains values that were not a JSON array of chains.
    pub malformed: AtomicU64,
    /// New nodes refused by [`MAX_CAUSES`].
    pub dropped_cap: AtomicU64,
}

impl CauseCounters {
    /// `[stored, malformed, dropped_cap]`, the order of
    /// [`crate::telemetry::CAUSE_OUTCOMES`].
    pub fn snapshot(&self) -> [u64; 3] {
        [
            self.stored.load(Ordering::Relaxed),
            self.malformed.load(Ordering::Relaxed),
            self.dropped_cap.load(Ordering::Relaxed),
        ]
    }
}

/// The latest cause per straggler node, shared by the push path, the tick and the view.
#[derive(Debug, Default)]
pub struct CauseBoard {
    inner: Mutex<Inner>,
    counters: CauseCounters,
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

fn cut(s: &str) -> Arc<str> {
    let mut i = s.len().min(MAX_TEXT_BYTES);
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    Arc::from(s.get(..i).unwrap_or(""))
}

impl CauseBoard {
    pub fn counters(&self) -> &CauseCounters {
        &self.counters
    }

    /// Nodes with a cause held.
    pub fn len(&self) -> usize {
        self.inner.lock().held
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Read the straggler events of one resource. The cluster is the resource's
    /// `ingero.cluster.id`, else the request's; ids that break the id rules are skipped
    /// (the push path rejects their health points).
    pub fn observe(&self, rm: &ResourceMetrics, ctx: &BatchContext) {
        let received_at = ctx.received_at;
        let events = rm
            .scope_metrics
            .iter()
            .flat_map(|sm| sm.metrics.iter())
            .filter(|m| m.name == metric::STRAGGLER_EVENT)
            .filter(|m| matches!(m.data, Some(MetricKind::Gauge(_))));
        let res = rm.resource.as_ref().map(|r| r.attributes.as_slice());
        let res = res.unwrap_or(&[]);
        let mut events = events.peekable();
        if events.peek().is_none() {
            return;
        }
        let cluster = non_empty(otlp::get_str(res, resource::CLUSTER_ID))
            .or_else(|| non_empty(ctx.cluster_id.as_deref()));
        let node = non_empty(otlp::get_str(res, resource::NODE_ID));
        let (Some(cluster), Some(node)) = (cluster, node) else {
            return;
        };
        if cluster.len() > MAX_ID_BYTES
            || node.len() > MAX_ID_BYTES
            || ingero_wire::cluster_id::validate_cluster_id(cluster).is_err()
            || ingero_wire::cluster_id::validate_node_id(node).is_err()
        {
            return;
        }
        for m in events {
            // The newest point of the metric decides (an agent sends one per event).
            let Some(p) = otlp::number_points(m)
                .iter()
                .max_by_key(|p| p.time_unix_nano)
            else {
                continue;
            };
            match otlp::point_value(p) {
                Some(0.0) => self.clear(cluster, node),
                Some(_) => {
                    let id = otlp::get_str(&p.attributes, attr::CAUSAL_CHAIN_ID);
                    let chains = otlp::get_str(&p.attributes, attr::CAUSAL_CHAINS);
                    if let (Some(id), Some(chains)) = (id, chains) {
                        self.store(cluster, node, id, chains, received_at);
                    }
                }
                None => {}
            }
        }
    }

    fn clear(&self, cluster: &str, node: &str) {
        let mut g = self.inner.lock();
        let Some(nodes) = g.by_cluster.get_mut(cluster) else {
            return;
        };
        if nodes.remove(node).is_some() {
            let empty = nodes.is_empty();
            g.held -= 1;
            if empty {
                g.by_cluster.remove(cluster);
            }
        }
    }

    fn store(&self, cluster: &str, node: &str, id: &str, chains: &str, at: Timestamp) {
        let parsed: Vec<WireChain> = match serde_json::from_str(chains) {
            Ok(v) => v,
            Err(_) => {
                self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let Some(top) = parsed.first() else {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let cause = StragglerCause {
            node_id: Arc::from(node),
            causal_chain_id: cut(id),
            severity: cut(&top.severity),
            summary: cut(&top.summary),
            root_cause: cut(&top.root_cause),
            chains: u32::try_from(parsed.len()).unwrap_or(u32::MAX),
            received_at_unix_nano: at.as_nanos(),
        };
        let mut g = self.inner.lock();
        let known = g
            .by_cluster
            .get(cluster)
            .is_some_and(|n| n.contains_key(node));
        if !known {
            if g.held >= MAX_CAUSES {
                self.counters.dropped_cap.fetch_add(1, Ordering::Relaxed);
                return;
            }
            g.held += 1;
        }
        g.by_cluster
            .entry(Arc::from(cluster))
            .or_default()
            .insert(Arc::from(node), cause);
        self.counters.stored.fetch_add(1, Ordering::Relaxed);
    }

    /// Forget causes not refreshed within `ttl_nanos` of `now`.
    pub fn expire(&self, now: Timestamp, ttl_nanos: u64) {
        let mut g = self.inner.lock();
        let mut removed = 0;
        g.by_cluster.retain(|_, nodes| {
            let before = nodes.len();
            nodes
                .retain(|_, c| now.as_nanos().saturating_sub(c.received_at_unix_nano) <= ttl_nanos);
            removed += before - nodes.len();
            !nodes.is_empty()
        });
        g.held -= removed;
    }
}

impl ClusterViewSource for CauseBoard {
    fn straggler_causes(&self, cluster: &str) -> Vec<StragglerCause> {
        let g = self.inner.lock();
        let mut v: Vec<StragglerCause> = g
            .by_cluster
            .get(cluster)
            .map(|n| n.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{
        AnyValue, AnyValueKind, Gauge, KeyValue, Metric, NumberDataPoint, NumberValue, Resource,
        ScopeMetrics,
    };

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(AnyValueKind::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    fn event(node: &str, value: i64, cause: Option<(&str, &str)>) -> ResourceMetrics {
        let mut attrs = vec![kv(attr::EVENT_ID, "e")];
        if let Some((id, chains)) = cause {
            attrs.push(kv(attr::CAUSAL_CHAIN_ID, id));
            attrs.push(kv(attr::CAUSAL_CHAINS, chains));
        }
        ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv(resource::NODE_ID, node), kv(resource::CLUSTER_ID, "c")],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: metric::STRAGGLER_EVENT.into(),
                    data: Some(MetricKind::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            attributes: attrs,
                            time_unix_nano: 1,
                            value: Some(NumberValue::AsInt(value)),
                            ..Default::default()
                        }],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn at(secs: u64) -> BatchContext {
        BatchContext {
            cluster_id: None,
            received_at: Timestamp::from_secs(secs),
            tenant: None,
        }
    }

    const CHAINS: &str = r#"[{"id":"n1:cpu-cudaStreamSynchronize","severity":"HIGH","causes":["cpu_contention"],"summary":"sync slower","root_cause":"CPU contention","recommendations":[],"cuda_op":"cudaStreamSynchronize","cuda_p99_us":900,"tail_ratio":9.5},{"id":"x","severity":"LOW","summary":"other","root_cause":"r"}]"#;

    #[test]
    fn the_top_chain_is_kept_until_the_recovery_event() {
        let b = CauseBoard::default();
        let t = &at(100);
        // The Go agent's event, and the first events of an episode: nothing known.
        b.observe(&event("n1", 1, None), t);
        assert!(b.straggler_causes("c").is_empty());
        b.observe(&event("n1", 1, Some(("n1:5000", CHAINS))), t);
        let v = b.straggler_causes("c");
        assert_eq!(v.len(), 1);
        assert_eq!(&*v[0].causal_chain_id, "n1:5000");
        assert_eq!(&*v[0].severity, "HIGH");
        assert_eq!(&*v[0].summary, "sync slower");
        assert_eq!(&*v[0].root_cause, "CPU contention");
        assert_eq!(v[0].chains, 2);
        assert!(b.straggler_causes("other").is_empty());
        // A later event of the episode without chains keeps what is known.
        b.observe(&event("n1", 1, None), t);
        assert_eq!(b.len(), 1);
        b.observe(&event("n1", 0, None), t);
        assert!(b.straggler_causes("c").is_empty());
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn hostile_or_malformed_chains_change_nothing_and_text_is_bounded() {
        let b = CauseBoard::default();
        let t = &at(100);
        b.observe(&event("n1", 1, Some(("n1:1", CHAINS))), t);
        for bad in ["not json", "{}", "[]", r#"[{"severity": 3}]"#] {
            b.observe(&event("n1", 1, Some(("n1:2", bad))), t);
        }
        assert_eq!(b.counters().malformed.load(Ordering::Relaxed), 4);
        assert_eq!(&*b.straggler_causes("c")[0].causal_chain_id, "n1:1");
        let long = format!(
            r#"[{{"severity":"HIGH","summary":"{}","root_cause":"<script>alert(1)</script>"}}]"#,
            "é".repeat(1000)
        );
        b.observe(&event("n2", 1, Some(("n2:1", &long))), t);
        let v = b.straggler_causes("c");
        assert_eq!(v.len(), 2);
        assert!(v[1].summary.len() <= MAX_TEXT_BYTES && v[1].summary.starts_with('é'));
        // Kept as text: escaping is the page's job.
        assert_eq!(&*v[1].root_cause, "<script>alert(1)</script>");
    }

    #[test]
    fn causes_expire_and_the_node_cap_holds() {
        let b = CauseBoard::default();
        let t = &at(100);
        for i in 0..MAX_CAUSES + 3 {
            b.observe(&event(&format!("n{i}"), 1, Some(("id", CHAINS))), t);
        }
        assert_eq!(b.len(), MAX_CAUSES);
        assert_eq!(b.counters().dropped_cap.load(Ordering::Relaxed), 3);
        // A held node is still refreshed at the cap.
        b.observe(&event("n0", 1, Some(("id2", CHAINS))), &at(200));
        assert_eq!(b.counters().dropped_cap.load(Ordering::Relaxed), 3);
        b.expire(Timestamp::from_secs(250), 60_000_000_000);
        let v = b.straggler_causes("c");
        assert_eq!(v.len(), 1);
        assert_eq!(&*v[0].causal_chain_id, "id2");
        assert_eq!(b.len(), 1);
    }
}
