//! The live cluster view: a page on the admin listener (`/view/`, assets embedded in the
//! binary) and its data, `GET /api/v1/view?cluster_id=ID`.
//!
//! - **History** ([`ViewHistory`]): each publish appends one point per cluster (threshold,
//!   median, MAD, active nodes, stragglers, panic, quorum) to a ring of [`HISTORY_POINTS`],
//!   and records since when each straggler has been one (the first publish that flagged
//!   it). Rings exist for at most [`MAX_HISTORY_CLUSTERS`] clusters; a cluster that drops
//!   out of a publish loses its ring. Written under the store's publish lock, read by the
//!   view route; the push path never touches it.
//! - **Sources** ([`SourceBoard`]): the NCCL and provider processors register read-only
//!   [`ClusterViewSource`]s at start ([`ingero_wire::view`]); the route asks them for the
//!   cluster's peer-lag heat map and the cost of waiting, only when a view is requested.
//! - **Body**: the diagnostics summary of the cluster (the same fields as a
//!   `/api/v1/diagnostics` page entry), its nodes with `straggler_since_unix_nano`, its
//!   cohorts, the history, `peer_lag` and `waiting_cost`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use component::Timestamp;
use component::api::ApiResponse;
use ingero_wire::threshold::{ClusterReport, CohortDiagnostics};
use ingero_wire::view::{
    ClusterViewSource, PeerLagStream, StragglerCause, ViewBoard, WaitingCostView,
};
use parking_lot::RwLock;
use serde::Serialize;

/// Points kept per cluster: one per publish (`push_interval`), 30 minutes at the default 10s.
pub const HISTORY_POINTS: usize = 180;
/// Clusters with a history ring; the rest are shown without one (counted).
pub const MAX_HISTORY_CLUSTERS: usize = 1024;
/// Sources a board accepts (one per processor instance; more is a configuration mistake).
pub const MAX_SOURCES: usize = 64;

/// One publish of one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HistoryPoint {
    pub t_unix_nano: u64,
    pub threshold: Option<f64>,
    pub median: Option<f64>,
    pub mad: Option<f64>,
    pub active_nodes: u64,
    pub straggler_count: u64,
    pub panic_mode: bool,
    pub quorum_met: bool,
}

impl HistoryPoint {
    fn of(r: &ClusterReport, at: Timestamp) -> Self {
        let d = &r.diagnostics;
        HistoryPoint {
            t_unix_nano: at.as_nanos(),
            threshold: r.value.map(|v| v.threshold()),
            median: d.median,
            mad: d.mad,
            active_nodes: d.active_nodes,
            straggler_count: d.straggler_count,
            panic_mode: d.panic_mode,
            quorum_met: r.value.is_some_and(|v| v.quorum_met()),
        }
    }
}

#[derive(Debug, Default)]
struct ClusterHistory {
    points: VecDeque<HistoryPoint>,
    /// Node id -> first publish (Unix ns) of its current straggler streak.
    straggler_since: HashMap<Arc<str>, u64>,
}

/// The history rings of the published clusters.
#[derive(Debug, Default)]
pub(crate) struct ViewHistory {
    clusters: HashMap<Arc<str>, ClusterHistory>,
    /// Clusters of the last publish left without a ring by [`MAX_HISTORY_CLUSTERS`].
    over_cap: u64,
}

impl ViewHistory {
    /// Record one publish: `reports` are the clusters the store kept.
    pub(crate) fn record<'a>(
        &mut self,
        reports: impl Iterator<Item = &'a ClusterReport>,
        at: Timestamp,
    ) {
        let mut old = std::mem::take(&mut self.clusters);
        self.over_cap = 0;
        let now = at.as_nanos();
        // Clusters that already have a ring keep it first; new ones take what is left.
        let (known, new): (Vec<&ClusterReport>, Vec<&ClusterReport>) =
            reports.partition(|r| old.contains_key(&*r.cluster_id));
        for r in known.into_iter().chain(new) {
            if self.clusters.len() >= MAX_HISTORY_CLUSTERS {
                self.over_cap += 1;
                continue;
            }
            let mut h = old.remove(&*r.cluster_id).unwrap_or_default();
            let point = HistoryPoint::of(r, at);
            match h.points.back_mut() {
                // A second publish at the same instant replaces the point.
                Some(last) if last.t_unix_nano == point.t_unix_nano => *last = point,
                _ => {
                    if h.points.len() >= HISTORY_POINTS {
                        h.points.pop_front();
                    }
                    h.points.push_back(point);
                }
            }
            let mut since = HashMap::with_capacity(r.diagnostics.straggler_count as usize);
            for n in r.diagnostics.nodes.iter().filter(|n| n.straggler) {
                let t = h.straggler_since.get(&n.node_id).copied().unwrap_or(now);
                since.insert(Arc::clone(&n.node_id), t);
            }
            h.straggler_since = since;
            self.clusters.insert(Arc::clone(&r.cluster_id), h);
        }
    }

    fn points(&self, cluster: &str) -> Option<Vec<HistoryPoint>> {
        self.clusters
            .get(cluster)
            .map(|h| h.points.iter().copied().collect())
    }

    fn since(&self, cluster: &str) -> HashMap<Arc<str>, u64> {
        self.clusters
            .get(cluster)
            .map(|h| h.straggler_since.clone())
            .unwrap_or_default()
    }

    pub(crate) fn over_cap(&self) -> u64 {
        self.over_cap
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.clusters.len()
    }
}

/// The view sources processors registered.
#[derive(Default)]
pub struct SourceBoard {
    sources: RwLock<Vec<Arc<dyn ClusterViewSource>>>,
}

impl std::fmt::Debug for SourceBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceBoard")
            .field("sources", &self.sources.read().len())
            .finish()
    }
}

fn same_source(a: &Arc<dyn ClusterViewSource>, b: &Arc<dyn ClusterViewSource>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl ViewBoard for SourceBoard {
    fn register(&self, source: Arc<dyn ClusterViewSource>) {
        let mut s = self.sources.write();
        if s.iter().any(|x| same_source(x, &source)) {
            return;
        }
        if s.len() >= MAX_SOURCES {
            tracing::warn!(
                max = MAX_SOURCES,
                "live view: too many view sources registered; this one is not shown"
            );
            return;
        }
        s.push(source);
    }
}

impl SourceBoard {
    /// Sources registered so far.
    pub fn len(&self) -> usize {
        self.sources.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn collect(&self, cluster: &str) -> Collected {
        let sources = self.sources.read().clone();
        let mut streams = Vec::new();
        let mut left_out = 0;
        let mut cost = Vec::new();
        let mut causes = HashMap::new();
        for s in &sources {
            for c in s.straggler_causes(cluster) {
                causes.insert(c.node_id.clone(), c);
            }
            if let Some(p) = s.peer_lag(cluster) {
                streams.extend(p.streams);
                left_out += p.streams_left_out;
            }
            if let Some(c) = s.waiting_cost(cluster) {
                cost.push(c);
            }
        }
        (streams, left_out, cost, causes)
    }
}

/// What the sources say of one cluster: peer-lag streams and those left out, waiting cost,
/// and the known cause per straggler node.
type Collected = (
    Vec<PeerLagStream>,
    usize,
    Vec<WaitingCostView>,
    HashMap<Arc<str>, StragglerCause>,
);

/// One node in the view.
#[derive(Serialize)]
struct ViewNode<'a> {
    node_id: &'a str,
    cohort: &'a str,
    state: &'static str,
    score: f64,
    straggler: bool,
    /// First publish of the current straggler streak; `null` for a healthy node.
    straggler_since_unix_nano: Option<u64>,
    last_seen_unix_nano: u64,
    /// The top causal chain the node's agent sent with its straggler event; `null` when
    /// none is known (always, for the Go agent).
    cause: Option<NodeCause>,
}

/// [`StragglerCause`] without the node id its row already shows.
#[derive(Serialize)]
struct NodeCause {
    causal_chain_id: Arc<str>,
    severity: Arc<str>,
    summary: Arc<str>,
    root_cause: Arc<str>,
    chains: u32,
    received_at_unix_nano: u64,
}

/// The body of `GET /api/v1/view?cluster_id=ID`.
#[derive(Serialize)]
struct ClusterView<'a> {
    #[serde(flatten)]
    summary: crate::routes::ClusterSummary<'a>,
    published_at_unix_nano: Option<u64>,
    generation: u64,
    nodes: Vec<ViewNode<'a>>,
    cohorts: &'a [CohortDiagnostics],
    /// Oldest first; `null` when the cluster has no ring ([`MAX_HISTORY_CLUSTERS`]).
    history: Option<Vec<HistoryPoint>>,
    peer_lag: Vec<PeerLagStream>,
    peer_lag_streams_left_out: usize,
    waiting_cost: Vec<WaitingCostView>,
}

/// The view body of a published cluster.
pub(crate) fn cluster_view(
    report: &ClusterReport,
    published_at: Option<Timestamp>,
    generation: u64,
    history: &RwLock<ViewHistory>,
    board: &SourceBoard,
) -> ApiResponse {
    let (points, since) = {
        let h = history.read();
        (h.points(&report.cluster_id), h.since(&report.cluster_id))
    };
    let d = &report.diagnostics;
    let (peer_lag, peer_lag_streams_left_out, waiting_cost, mut causes) =
        board.collect(&report.cluster_id);
    let nodes = d
        .nodes
        .iter()
        .map(|n| ViewNode {
            node_id: &n.node_id,
            cohort: &n.cohort,
            state: n.state,
            score: n.score,
            straggler: n.straggler,
            straggler_since_unix_nano: if n.straggler {
                since.get(&n.node_id).copied()
            } else {
                None
            },
            last_seen_unix_nano: n.last_seen_unix_nano,
            cause: causes.remove(&n.node_id).map(|c| NodeCause {
                causal_chain_id: c.causal_chain_id,
                severity: c.severity,
                summary: c.summary,
                root_cause: c.root_cause,
                chains: c.chains,
                received_at_unix_nano: c.received_at_unix_nano,
            }),
        })
        .collect();
    let body = ClusterView {
        summary: crate::routes::ClusterSummary::of(report),
        published_at_unix_nano: published_at.map(|t| t.as_nanos()),
        generation,
        nodes,
        cohorts: &d.cohorts,
        history: points,
        peer_lag,
        peer_lag_streams_left_out,
        waiting_cost,
    };
    match serde_json::to_vec(&body) {
        Ok(bytes) => ApiResponse::json(200, bytes),
        Err(_) => ApiResponse::json_error(500, "internal error"),
    }
}

/// The page's files, embedded: `(path, content type, body)`.
const ASSETS: [(&str, &str, &str); 4] = [
    (
        "/view",
        "text/html; charset=utf-8",
        include_str!("../assets/view/index.html"),
    ),
    (
        "/view/",
        "text/html; charset=utf-8",
        include_str!("../assets/view/index.html"),
    ),
    (
        "/view/view.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/view/view.js"),
    ),
    (
        "/view/view.css",
        "text/css; charset=utf-8",
        include_str!("../assets/view/view.css"),
    ),
];

/// Prefix of the page's paths; served without a token (the files hold no data).
pub const VIEW_PREFIX: &str = "/view";
/// The view's data path.
pub const VIEW_API_PATH: &str = "/api/v1/view";

/// Only this origin's script, style and data; never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// One of the page's files, `None` for any other path.
pub(crate) fn asset(path: &str) -> Option<ApiResponse> {
    let (_, content_type, body) = ASSETS.iter().find(|(p, _, _)| *p == path)?;
    let mut r = ApiResponse {
        status: 200,
        content_type,
        headers: Vec::new(),
        body: body.as_bytes().to_vec(),
    };
    r.headers.push(("Content-Security-Policy", CSP.to_string()));
    r.headers
        .push(("Referrer-Policy", "no-referrer".to_string()));
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::report;
    use ingero_wire::threshold::NodeDiagnostics;

    fn with_stragglers(id: &str, stragglers: &[&str]) -> ClusterReport {
        let mut r = report(id, Some((0.9, true)));
        let mut d = (*r.diagnostics).clone();
        d.nodes = ["a", "b", "c"]
            .iter()
            .map(|n| NodeDiagnostics {
                node_id: (*n).into(),
                cohort: "".into(),
                state: "active",
                score: if stragglers.contains(n) { 0.5 } else { 0.95 },
                last_seen_unix_nano: 1,
                straggler: stragglers.contains(n),
            })
            .collect();
        d.straggler_count = stragglers.len() as u64;
        r.diagnostics = Arc::new(d);
        r
    }

    #[test]
    fn straggler_since_is_the_first_publish_of_the_streak() {
        let mut h = ViewHistory::default();
        let t = Timestamp::from_secs;
        h.record([with_stragglers("c", &["b"])].iter(), t(10));
        h.record([with_stragglers("c", &["b", "c"])].iter(), t(20));
        let s = h.since("c");
        assert_eq!(s.get("b"), Some(&t(10).as_nanos()));
        assert_eq!(s.get("c"), Some(&t(20).as_nanos()));
        // b recovers, then falls behind again: a new streak.
        h.record([with_stragglers("c", &["c"])].iter(), t(30));
        h.record([with_stragglers("c", &["b", "c"])].iter(), t(40));
        let s = h.since("c");
        assert_eq!(s.get("b"), Some(&t(40).as_nanos()));
        assert_eq!(s.get("c"), Some(&t(20).as_nanos()));
        assert_eq!(s.get("a"), None);
        let pts = h.points("c").unwrap();
        assert_eq!(pts.len(), 4);
        assert_eq!(
            pts.iter().map(|p| p.straggler_count).collect::<Vec<_>>(),
            [1, 2, 1, 2]
        );
    }

    #[test]
    fn rings_are_bounded_and_follow_the_published_clusters() {
        let mut h = ViewHistory::default();
        for i in 0..(HISTORY_POINTS as u64 + 25) {
            h.record(
                [report("x", Some((0.9, true))), report("y", None)].iter(),
                Timestamp::from_secs(i + 1),
            );
        }
        let pts = h.points("x").unwrap();
        assert_eq!(pts.len(), HISTORY_POINTS);
        assert_eq!(pts[0].t_unix_nano, Timestamp::from_secs(26).as_nanos());
        assert_eq!(pts[0].threshold, Some(0.9));
        assert_eq!(h.points("y").unwrap()[0].threshold, None);
        // Same instant twice: replaced, not appended.
        let last = Timestamp::from_secs(HISTORY_POINTS as u64 + 25);
        h.record([report("x", Some((0.8, true)))].iter(), last);
        let pts = h.points("x").unwrap();
        assert_eq!(pts.len(), HISTORY_POINTS);
        assert_eq!(pts.last().unwrap().threshold, Some(0.8));
        // y was not in the last publish: its ring is gone.
        assert!(h.points("y").is_none());
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn clusters_past_the_cap_get_no_ring_and_are_counted() {
        let mut h = ViewHistory::default();
        let reports: Vec<ClusterReport> = (0..MAX_HISTORY_CLUSTERS + 3)
            .map(|i| report(&format!("c{i:05}"), None))
            .collect();
        h.record(reports.iter(), Timestamp::from_secs(1));
        assert_eq!(h.len(), MAX_HISTORY_CLUSTERS);
        assert_eq!(h.over_cap(), 3);
        // Existing rings keep their place when the set shrinks.
        h.record(reports[..10].iter(), Timestamp::from_secs(2));
        assert_eq!(h.len(), 10);
        assert_eq!(h.over_cap(), 0);
        assert_eq!(h.points("c00003").unwrap().len(), 2);
    }

    struct Fixed;
    impl ClusterViewSource for Fixed {
        fn waiting_cost(&self, cluster: &str) -> Option<WaitingCostView> {
            (cluster == "x").then(|| WaitingCostView {
                currency: "USD".into(),
                barrier_per_hour: 1.0,
                barrier_idle_gpus: 0.5,
                stragglers_per_hour: 2.0,
                stragglers: Vec::new(),
                computed_at_unix_nano: 7,
            })
        }
    }

    #[test]
    fn a_source_registered_twice_is_asked_once() {
        let b = SourceBoard::default();
        let s: Arc<dyn ClusterViewSource> = Arc::new(Fixed);
        b.register(Arc::clone(&s));
        b.register(s);
        b.register(Arc::new(Fixed));
        assert_eq!(b.len(), 2);
        let (streams, left, cost, causes) = b.collect("x");
        assert!(causes.is_empty());
        assert!(streams.is_empty());
        assert_eq!(left, 0);
        assert_eq!(cost.len(), 2);
        assert!(b.collect("y").2.is_empty());
    }

    #[test]
    fn assets_are_embedded_with_a_strict_policy() {
        for p in ["/view", "/view/", "/view/view.js", "/view/view.css"] {
            let a = asset(p).unwrap();
            assert_eq!(a.status, 200);
            assert!(!a.body.is_empty());
            let csp = a
                .headers
                .iter()
                .find(|(k, _)| *k == "Content-Security-Policy")
                .unwrap();
            assert!(csp.1.contains("script-src 'self'"));
        }
        assert!(asset("/view/../etc/passwd").is_none());
        assert!(asset("/view/index.html").is_none());
        let html = String::from_utf8(asset("/view/").unwrap().body).unwrap();
        // No CDN: every script and style comes from this listener.
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(html.contains("/view/view.js"));
    }
}
