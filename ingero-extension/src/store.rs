//! The published thresholds and the push-response header policy.
//!
//! The processor publishes once per tick; the push path reads on every request. The whole
//! published state is one immutable `Snapshot` behind an [`ArcSwap`]: a publish builds a
//! new snapshot off to the side (header values and GET bodies formatted once, here) and swaps
//! it in; a read is an atomic load plus one hash lookup and never waits for a publish.
//!
//! Header policy (spec section 2.1 and 8.1 items 4 to 6):
//! - a cluster with a threshold gets both `X-Ingero-Threshold` and `X-Ingero-Quorum-Met`;
//! - an unknown cluster, or one with nothing computed yet, gets neither;
//! - the threshold is delivered with six decimals (`0.870348`, see
//!   [`threshold_text`]); the rounded value is what the store keeps,
//!   so header, GET body, [`ThresholdStore::get`] and the admin view agree digit for digit, and
//!   Go's `strconv.ParseFloat` reads back exactly that value. [`ThresholdValue`] guarantees it
//!   is finite and within [0.1, 0.99]: `0`, `NaN` or an out-of-range value cannot be sent;
//! - the header value is a static `Bytes`, so handing it out on the push path is a copy of
//!   two words, with no reference count to touch;
//! - the GET body is built from the same text, so header and body digits are identical.
//!
//! A snapshot that is swapped out is kept on a retired list and freed by a later publish once
//! no reader holds it, so a push request never pays for freeing a large map.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use bytes::Bytes;
use component::middleware::{ResponseMiddleware, Transport};
use component::{MetricFamily, Timestamp};
use foldhash::quality::RandomState;
use http::{HeaderMap, HeaderName, HeaderValue};
use ingero_wire::http::{
    GRPC_META_QUORUM_MET, GRPC_META_THRESHOLD, HEADER_QUORUM_MET, HEADER_THRESHOLD,
};
use ingero_wire::threshold::{ClusterReport, ThresholdSink, ThresholdValue};
use parking_lot::{Mutex, RwLock};

use crate::cluster_id::{ClusterIdParam, cluster_id_from_query, validate_cluster_id};
use crate::config::DEFAULT_MAX_CLUSTERS;
use crate::metrics;
use crate::threshold_text;
use crate::view::ViewHistory;

/// The GET body for a cluster with nothing computed (spec section 2.2, cold-start shape).
pub const COLD_START_BODY: &[u8] = br#"{"threshold":0,"quorum_met":false}"#;

/// [`HEADER_THRESHOLD`] as an `http` header name (lower case, as `http` stores names).
pub const THRESHOLD_HEADER: HeaderName = HeaderName::from_static("x-ingero-threshold");
/// [`HEADER_QUORUM_MET`] as an `http` header name.
pub const QUORUM_MET_HEADER: HeaderName = HeaderName::from_static("x-ingero-quorum-met");

const TRUE: HeaderValue = HeaderValue::from_static("true");
const FALSE: HeaderValue = HeaderValue::from_static("false");

/// The two push-response headers of one cluster. They only exist together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushHeaders {
    pub threshold: HeaderValue,
    pub quorum_met: HeaderValue,
}

impl PushHeaders {
    /// Headers for a value as delivered (see [`threshold_text`]).
    fn delivered(text: &'static str, quorum_met: bool) -> Option<PushHeaders> {
        let threshold = HeaderValue::from_maybe_shared(Bytes::from_static(text.as_bytes())).ok()?;
        let quorum_met = if quorum_met { TRUE } else { FALSE };
        Some(PushHeaders {
            threshold,
            quorum_met,
        })
    }

    /// HTTP response headers, names as the spec spells them.
    pub fn pairs(&self) -> [(&'static str, &HeaderValue); 2] {
        [
            (HEADER_THRESHOLD, &self.threshold),
            (HEADER_QUORUM_MET, &self.quorum_met),
        ]
    }

    /// gRPC response metadata (lower-case keys).
    pub fn grpc_pairs(&self) -> [(&'static str, &HeaderValue); 2] {
        [
            (GRPC_META_THRESHOLD, &self.threshold),
            (GRPC_META_QUORUM_MET, &self.quorum_met),
        ]
    }

    /// Make `map` carry exactly `headers`: both are removed first (whatever set them), then
    /// both are inserted when `headers` is `Some`. The both-or-neither rule holds for the
    /// response whatever it carried before.
    pub fn apply(headers: Option<&PushHeaders>, map: &mut HeaderMap) {
        map.remove(THRESHOLD_HEADER);
        map.remove(QUORUM_MET_HEADER);
        if let Some(h) = headers {
            map.insert(THRESHOLD_HEADER, h.threshold.clone());
            map.insert(QUORUM_MET_HEADER, h.quorum_met.clone());
        }
    }
}

/// One cluster as published.
#[derive(Debug)]
struct Entry {
    report: ClusterReport,
    headers: Option<PushHeaders>,
    /// The exact GET body (`{"threshold":..,"quorum_met":..}` or the cold-start shape).
    body: Box<[u8]>,
}

impl Entry {
    fn new(mut report: ClusterReport) -> Entry {
        let delivered = report.value.and_then(|v| {
            let (rounded, text) = threshold_text::delivered(v)?;
            Some((
                rounded,
                text,
                PushHeaders::delivered(text, rounded.quorum_met())?,
            ))
        });
        match delivered {
            Some((value, text, headers)) => {
                let body = format!(
                    r#"{{"threshold":{text},"quorum_met":{}}}"#,
                    value.quorum_met()
                );
                report.value = Some(value);
                Entry {
                    report,
                    headers: Some(headers),
                    body: body.into_bytes().into_boxed_slice(),
                }
            }
            None => {
                // Nothing computed (or, in theory, a value that cannot be delivered): the
                // cluster answers as cold start everywhere, never half of it.
                report.value = None;
                Entry {
                    report,
                    headers: None,
                    body: COLD_START_BODY.into(),
                }
            }
        }
    }
}

/// Cluster id -> entry. foldhash (seeded per map from a per-process random seed) instead of
/// SipHash: about 4x cheaper for short ids on the push path, and still keyed so that colliding
/// ids cannot be precomputed.
type ClusterMap = HashMap<Arc<str>, Entry, RandomState>;

/// The whole published state at one publish.
#[derive(Default)]
pub(crate) struct Snapshot {
    clusters: ClusterMap,
    /// Cluster ids in byte order, for paginated diagnostics.
    sorted_ids: Vec<Arc<str>>,
    published_at: Option<Timestamp>,
    generation: u64,
    with_threshold: usize,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("clusters", &self.clusters.len())
            .field("published_at", &self.published_at)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Snapshot {
    pub(crate) fn report(&self, cluster_id: &str) -> Option<&ClusterReport> {
        self.clusters.get(cluster_id).map(|e| &e.report)
    }

    pub(crate) fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Up to `limit` reports whose ids sort strictly after `after`, and whether more follow.
    pub(crate) fn page(&self, after: Option<&str>, limit: usize) -> (Vec<&ClusterReport>, bool) {
        let start = match after {
            Some(a) => self.sorted_ids.partition_point(|id| &**id <= a),
            None => 0,
        };
        let ids = self.sorted_ids.get(start..).unwrap_or_default();
        let page: Vec<&ClusterReport> = ids
            .iter()
            .take(limit)
            .filter_map(|id| self.report(id))
            .collect();
        (page, ids.len() > limit)
    }

    pub(crate) fn published_at(&self) -> Option<Timestamp> {
        self.published_at
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

/// A counter on its own cache line, so push-path threads bumping `set` do not slow down
/// threads bumping `absent`.
#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCounter(AtomicU64);

impl PaddedCounter {
    fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
struct StoreCounters {
    headers_set: PaddedCounter,
    headers_absent: PaddedCounter,
    headers_invalid: PaddedCounter,
    publishes: AtomicU64,
    dropped_invalid_id: AtomicU64,
    dropped_duplicate: AtomicU64,
    dropped_over_cap: AtomicU64,
}

/// What one publish left out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Dropped {
    invalid_id: u64,
    duplicate: u64,
    over_cap: u64,
}

/// The threshold store: written by the `ingero` processor through [`ThresholdSink`], read by
/// the push path ([`ThresholdStore::push_headers`]) and the routes.
pub struct ThresholdStore {
    current: ArcSwap<Snapshot>,
    /// Serialises publishers and holds swapped-out snapshots until no reader holds them.
    retired: Mutex<Vec<Arc<Snapshot>>>,
    max_clusters: usize,
    counters: StoreCounters,
    /// The live view's history rings, written by publishes (see [`crate::view`]).
    history: RwLock<ViewHistory>,
}

impl fmt::Debug for ThresholdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThresholdStore")
            .field("current", &*self.current.load())
            .field("max_clusters", &self.max_clusters)
            .finish()
    }
}

impl Default for ThresholdStore {
    fn default() -> Self {
        ThresholdStore::new()
    }
}

impl ThresholdStore {
    /// An empty store holding at most [`DEFAULT_MAX_CLUSTERS`] clusters.
    pub fn new() -> Self {
        ThresholdStore::with_max_clusters(DEFAULT_MAX_CLUSTERS)
    }

    /// An empty store holding at most `max_clusters` clusters per publish (at least 1).
    pub fn with_max_clusters(max_clusters: usize) -> Self {
        ThresholdStore {
            current: ArcSwap::from_pointee(Snapshot::default()),
            retired: Mutex::new(Vec::new()),
            max_clusters: max_clusters.max(1),
            counters: StoreCounters::default(),
            history: RwLock::new(ViewHistory::default()),
        }
    }

    /// The value as delivered to agents (rounded to six decimals); `None` when unknown or
    /// nothing was computed.
    pub fn get(&self, cluster_id: &str) -> Option<ThresholdValue> {
        self.current
            .load()
            .clusters
            .get(cluster_id)
            .and_then(|e| e.report.value)
    }

    /// The push-response headers for a cluster (both) or `None` (neither), counted as
    /// `outcome="set"` / `"absent"`. An id that fails
    /// [`validate_cluster_id`] is never stored, so it is always
    /// `None` here; the host still validates first to count it as `invalid`.
    pub fn push_headers(&self, cluster_id: &str) -> Option<PushHeaders> {
        let headers = self
            .current
            .load()
            .clusters
            .get(cluster_id)
            .and_then(|e| e.headers.clone());
        if headers.is_some() {
            self.counters.headers_set.inc();
        } else {
            self.counters.headers_absent.inc();
        }
        headers
    }

    /// The push path in one call: read `cluster_id` from a raw request query (strictly, see
    /// [`cluster_id_from_query`]) and look it up. No parameter:
    /// `None`, not counted. A malformed or repeated parameter: `None`, counted as
    /// `outcome="invalid"`.
    pub fn push_headers_for_query(&self, query: Option<&str>) -> Option<PushHeaders> {
        match cluster_id_from_query(query) {
            ClusterIdParam::Missing => None,
            ClusterIdParam::Invalid(_) => {
                self.counters.headers_invalid.inc();
                None
            }
            ClusterIdParam::Valid(id) => self.push_headers(&id),
        }
    }

    /// Count a push whose cluster id the host found malformed by other means (e.g. the
    /// `ingero.cluster.id` request header or gRPC metadata).
    pub fn record_invalid_lookup(&self) {
        self.counters.headers_invalid.inc();
    }

    /// The exact GET body for a (validated) cluster id.
    pub(crate) fn threshold_body(&self, cluster_id: &str) -> Vec<u8> {
        match self.current.load().clusters.get(cluster_id) {
            Some(e) => e.body.to_vec(),
            None => COLD_START_BODY.to_vec(),
        }
    }

    /// The current snapshot, owned (admin routes hold it while serialising).
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The live view's history rings.
    pub(crate) fn history(&self) -> &RwLock<ViewHistory> {
        &self.history
    }

    /// Clusters in the current published state.
    pub fn published_clusters(&self) -> usize {
        self.current.load().clusters.len()
    }

    /// `computed_at` of the last publish.
    pub fn last_publish(&self) -> Option<Timestamp> {
        self.current.load().published_at
    }

    /// Publishes so far (the generation of the current snapshot).
    pub fn generation(&self) -> u64 {
        self.current.load().generation
    }

    /// The most clusters one publish may store.
    pub fn max_clusters(&self) -> usize {
        self.max_clusters
    }

    fn publish_reports(&self, reports: Vec<ClusterReport>, computed_at: Timestamp) {
        let mut retired = self.retired.lock();
        let generation = self.current.load().generation.saturating_add(1);
        let mut dropped = Dropped::default();
        let mut clusters: ClusterMap = HashMap::with_capacity_and_hasher(
            reports.len().min(self.max_clusters),
            RandomState::default(),
        );
        let mut with_threshold = 0;
        for report in reports {
            if validate_cluster_id(&report.cluster_id).is_err() {
                dropped.invalid_id += 1;
            } else if clusters.contains_key(&*report.cluster_id) {
                dropped.duplicate += 1;
            } else if clusters.len() >= self.max_clusters {
                dropped.over_cap += 1;
            } else {
                let id = Arc::clone(&report.cluster_id);
                let entry = Entry::new(report);
                with_threshold += usize::from(entry.headers.is_some());
                clusters.insert(id, entry);
            }
        }
        self.history
            .write()
            .record(clusters.values().map(|e| &e.report), computed_at);
        let mut sorted_ids: Vec<Arc<str>> = clusters.keys().cloned().collect();
        sorted_ids.sort_unstable();
        let stored = clusters.len();
        let old = self.current.swap(Arc::new(Snapshot {
            clusters,
            sorted_ids,
            published_at: Some(computed_at),
            generation,
            with_threshold,
        }));
        // `swap` has settled every reader's borrow of `old` into a real reference, so a
        // count of 1 means nobody else holds it and freeing it here is the last use.
        retired.push(old);
        retired.retain(|s| Arc::strong_count(s) > 1);
        drop(retired);

        let c = &self.counters;
        c.publishes.fetch_add(1, Ordering::Relaxed);
        c.dropped_invalid_id
            .fetch_add(dropped.invalid_id, Ordering::Relaxed);
        c.dropped_duplicate
            .fetch_add(dropped.duplicate, Ordering::Relaxed);
        c.dropped_over_cap
            .fetch_add(dropped.over_cap, Ordering::Relaxed);
        if dropped != Dropped::default() {
            // At most one line per publish, i.e. per processor tick.
            tracing::warn!(
                generation,
                stored,
                invalid_cluster_id = dropped.invalid_id,
                duplicate = dropped.duplicate,
                over_cap = dropped.over_cap,
                max_clusters = self.max_clusters,
                "threshold publish dropped cluster reports"
            );
        }
    }

    /// Append the store's self-metrics.
    pub fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        let snap = self.current.load();
        let c = &self.counters;
        out.push(
            metrics::spec::PUBLISHED_CLUSTERS
                .family()
                .with(&[], snap.clusters.len() as f64),
        );
        out.push(
            metrics::spec::CLUSTERS_WITH_THRESHOLD
                .family()
                .with(&[], snap.with_threshold as f64),
        );
        out.push(
            metrics::spec::HEADERS_TOTAL
                .family()
                .with(
                    &[(metrics::LABEL_OUTCOME, "set")],
                    c.headers_set.get() as f64,
                )
                .with(
                    &[(metrics::LABEL_OUTCOME, "absent")],
                    c.headers_absent.get() as f64,
                )
                .with(
                    &[(metrics::LABEL_OUTCOME, "invalid")],
                    c.headers_invalid.get() as f64,
                ),
        );
        out.push(
            metrics::spec::LAST_PUBLISH_TIMESTAMP_SECONDS
                .family()
                .with(&[], snap.published_at.map_or(0.0, Timestamp::as_secs_f64)),
        );
        out.push(
            metrics::spec::VIEW_HISTORY_OVER_CAP
                .family()
                .with(&[], self.history.read().over_cap() as f64),
        );
        out.push(
            metrics::spec::PUBLISHES_TOTAL
                .family()
                .with(&[], c.publishes.load(Ordering::Relaxed) as f64),
        );
        out.push(
            metrics::spec::PUBLISH_DROPPED_TOTAL
                .family()
                .with(
                    &[(metrics::LABEL_REASON, "invalid_cluster_id")],
                    c.dropped_invalid_id.load(Ordering::Relaxed) as f64,
                )
                .with(
                    &[(metrics::LABEL_REASON, "duplicate")],
                    c.dropped_duplicate.load(Ordering::Relaxed) as f64,
                )
                .with(
                    &[(metrics::LABEL_REASON, "over_cap")],
                    c.dropped_over_cap.load(Ordering::Relaxed) as f64,
                ),
        );
    }
}

/// The threshold headers' names as the host inserts them, parsed once.
static HTTP_HEADER_NAMES: [(&str, HeaderName); 2] = [
    (
        ingero_wire::http::HEADER_THRESHOLD,
        HeaderName::from_static("x-ingero-threshold"),
    ),
    (
        ingero_wire::http::HEADER_QUORUM_MET,
        HeaderName::from_static("x-ingero-quorum-met"),
    ),
];

/// The threshold headers as a response middleware: what [`ThresholdStore::push_headers`]
/// returns, written into the response without a copy of the header pair.
impl ResponseMiddleware for ThresholdStore {
    fn http_header_names(&self) -> &'static [(&'static str, HeaderName)] {
        &HTTP_HEADER_NAMES
    }

    fn response_metadata(
        &self,
        transport: Transport,
        cluster: &str,
        out: &mut dyn FnMut(&'static str, &HeaderValue),
    ) {
        let snapshot = self.current.load();
        match snapshot
            .clusters
            .get(cluster)
            .and_then(|e| e.headers.as_ref())
        {
            Some(h) => {
                self.counters.headers_set.inc();
                let pairs = match transport {
                    Transport::Http => h.pairs(),
                    Transport::Grpc => h.grpc_pairs(),
                };
                for (name, value) in pairs {
                    out(name, value);
                }
            }
            None => self.counters.headers_absent.inc(),
        }
    }
}

impl ThresholdSink for ThresholdStore {
    fn publish(&self, reports: Vec<ClusterReport>, computed_at: Timestamp) {
        self.publish_reports(reports, computed_at);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ingero_wire::threshold::ClusterDiagnostics;

    #[test]
    fn parsed_header_names_are_the_wire_names() {
        let store = ThresholdStore::default();
        let names = ResponseMiddleware::http_header_names(&store);
        let wire = [
            ingero_wire::http::HEADER_THRESHOLD,
            ingero_wire::http::HEADER_QUORUM_MET,
        ];
        assert_eq!(names.len(), wire.len());
        for ((name, parsed), wire) in names.iter().zip(wire) {
            assert_eq!(*name, wire);
            assert_eq!(*parsed, HeaderName::from_bytes(wire.as_bytes()).unwrap());
        }
    }

    pub(crate) fn diagnostics(threshold: Option<f64>, quorum_met: bool) -> ClusterDiagnostics {
        ClusterDiagnostics {
            median: Some(0.95),
            mad: Some(0.01),
            raw_threshold: threshold,
            threshold,
            quorum_met,
            active_nodes: 5,
            idle_nodes: 1,
            calibrating_nodes: 0,
            expected_nodes: 6,
            coverage: 5.0 / 6.0,
            coverage_low: false,
            panic_mode: false,
            straggler_count: 0,
            cohorts: Vec::new(),
            nodes: Vec::new(),
            computed_at_unix_nano: 1_000,
        }
    }

    pub(crate) fn report(id: &str, value: Option<(f64, bool)>) -> ClusterReport {
        let value = value.map(|(t, q)| ThresholdValue::new(t, q).unwrap());
        ClusterReport {
            cluster_id: id.into(),
            value,
            diagnostics: Arc::new(diagnostics(
                value.map(|v| v.threshold()),
                value.is_some_and(|v| v.quorum_met()),
            )),
        }
    }

    fn header_strs(h: &PushHeaders) -> (String, String) {
        (
            h.threshold.to_str().unwrap().to_string(),
            h.quorum_met.to_str().unwrap().to_string(),
        )
    }

    fn family<'a>(fams: &'a [MetricFamily], name: &str) -> &'a MetricFamily {
        fams.iter().find(|f| f.name == name).unwrap()
    }

    fn sample(f: &MetricFamily, label: Option<(&str, &str)>) -> f64 {
        f.samples
            .iter()
            .find(|s| match label {
                None => s.labels.is_empty(),
                Some((k, v)) => s.labels == vec![(k.to_string(), v.to_string())],
            })
            .unwrap()
            .value
    }

    #[test]
    fn empty_store_answers_cold_start_everywhere() {
        let s = ThresholdStore::new();
        assert_eq!(s.get("prod"), None);
        assert_eq!(s.push_headers("prod"), None);
        assert_eq!(s.threshold_body("prod"), COLD_START_BODY);
        assert_eq!(s.last_publish(), None);
        assert_eq!(s.generation(), 0);
    }

    #[test]
    fn a_computed_cluster_gets_both_headers() {
        let s = ThresholdStore::new();
        s.publish(
            vec![report("prod", Some((0.87, true)))],
            Timestamp::from_secs(10),
        );
        let h = s.push_headers("prod").unwrap();
        assert_eq!(header_strs(&h), ("0.870000".into(), "true".into()));
        let pairs = h.pairs();
        assert_eq!(pairs[0].0, "X-Ingero-Threshold");
        assert_eq!(pairs[1].0, "X-Ingero-Quorum-Met");
        assert_eq!(pairs[0].1, &h.threshold);
        let grpc = h.grpc_pairs();
        assert_eq!(grpc[0].0, "ingero-threshold");
        assert_eq!(grpc[1].0, "ingero-quorum-met");
        assert_eq!(grpc[1].1, "true");
        assert_eq!(s.get("prod"), ThresholdValue::new(0.87, true));
        assert_eq!(s.last_publish(), Some(Timestamp::from_secs(10)));
    }

    #[test]
    fn cold_start_cluster_gets_neither_header_and_the_zero_body() {
        let s = ThresholdStore::new();
        s.publish(vec![report("new", None)], Timestamp::from_secs(1));
        assert_eq!(s.published_clusters(), 1);
        assert_eq!(s.push_headers("new"), None);
        assert_eq!(s.get("new"), None);
        assert_eq!(s.threshold_body("new"), COLD_START_BODY);
    }

    #[test]
    fn quorum_lost_keeps_the_value_with_false() {
        let s = ThresholdStore::new();
        s.publish(
            vec![report("c", Some((0.9, true)))],
            Timestamp::from_secs(1),
        );
        s.publish(
            vec![report("c", Some((0.9, false)))],
            Timestamp::from_secs(2),
        );
        let h = s.push_headers("c").unwrap();
        assert_eq!(header_strs(&h), ("0.900000".into(), "false".into()));
        assert_eq!(
            s.threshold_body("c"),
            br#"{"threshold":0.900000,"quorum_met":false}"#
        );
    }

    #[test]
    fn a_cluster_missing_from_a_publish_returns_to_cold_start() {
        let s = ThresholdStore::new();
        s.publish(
            vec![
                report("a", Some((0.8, true))),
                report("b", Some((0.7, true))),
            ],
            Timestamp::from_secs(1),
        );
        s.publish(
            vec![report("b", Some((0.75, true)))],
            Timestamp::from_secs(2),
        );
        assert_eq!(s.push_headers("a"), None);
        assert_eq!(s.threshold_body("a"), COLD_START_BODY);
        assert_eq!(s.get("b").unwrap().threshold(), 0.75);
        assert_eq!(s.generation(), 2);
    }

    #[test]
    fn header_body_and_get_agree_digit_for_digit() {
        let s = ThresholdStore::new();
        // Bounds, one ulp inside them, long shortest forms, a seed example, and a sweep.
        let mut values = vec![
            0.1,
            0.99,
            0.870348,
            0.1 + 0.2,
            2.0 / 3.0,
            0.123_456_789_012_345_68,
            f64::from_bits(0.1f64.to_bits() + 1),
            f64::from_bits(0.99f64.to_bits() - 1),
        ];
        values.extend(
            (0..=8900)
                .map(|i| 0.1 + f64::from(i) * 1e-4)
                .filter(|v| *v <= 0.99),
        );
        for (i, v) in values.iter().enumerate() {
            let id = format!("c{i}");
            s.publish(
                vec![report(&id, Some((*v, i % 2 == 0)))],
                Timestamp::from_secs(1),
            );
            let (text, quorum) = header_strs(&s.push_headers(&id).unwrap());
            let delivered = s.get(&id).unwrap();
            assert_eq!(text.len(), 8, "{v} formatted as {text}");
            assert!(text.starts_with("0."), "{text}");
            assert!(text[2..].bytes().all(|b| b.is_ascii_digit()), "{text}");
            assert_eq!(
                text.parse::<f64>().unwrap(),
                delivered.threshold(),
                "{text}"
            );
            assert!(
                (delivered.threshold() - v).abs() <= 0.5e-6 + 1e-15,
                "{v} -> {text}"
            );
            assert_eq!(quorum, delivered.quorum_met().to_string());
            assert_ne!(text, "0");
            let body = String::from_utf8(s.threshold_body(&id)).unwrap();
            assert_eq!(
                body,
                format!(r#"{{"threshold":{text},"quorum_met":{quorum}}}"#)
            );
            // Shape only: serde_json's default float parser is not exact (it reads
            // 0.9899999999999999 as 0.99); exactness is checked above with `str::parse`
            // and against Go's decoder in tests/go_agent_model.rs.
            let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert!(parsed["threshold"].is_f64());
            assert_eq!(parsed["quorum_met"].as_bool(), Some(i % 2 == 0));
        }
    }

    #[test]
    fn header_values_are_static_so_clones_share_nothing_refcounted() {
        let s = ThresholdStore::new();
        s.publish(
            vec![report("c", Some((0.5, true)))],
            Timestamp::from_secs(1),
        );
        let a = s.push_headers("c").unwrap();
        let b = s.push_headers("c").unwrap();
        // Both clones point at the same process-lifetime text.
        assert_eq!(
            a.threshold.as_bytes().as_ptr(),
            b.threshold.as_bytes().as_ptr()
        );
        s.publish(
            vec![report("d", Some((0.5, false)))],
            Timestamp::from_secs(2),
        );
        let c = s.push_headers("d").unwrap();
        assert_eq!(
            a.threshold.as_bytes().as_ptr(),
            c.threshold.as_bytes().as_ptr()
        );
    }

    #[test]
    fn apply_enforces_both_or_neither_on_a_response() {
        let s = ThresholdStore::new();
        s.publish(
            vec![report("c", Some((0.5, false)))],
            Timestamp::from_secs(1),
        );
        let mut map = HeaderMap::new();
        // Something upstream set one stale header: it must not survive alone.
        map.insert(THRESHOLD_HEADER, HeaderValue::from_static("0"));
        PushHeaders::apply(s.push_headers("unknown").as_ref(), &mut map);
        assert!(map.get(THRESHOLD_HEADER).is_none());
        assert!(map.get(QUORUM_MET_HEADER).is_none());
        PushHeaders::apply(s.push_headers("c").as_ref(), &mut map);
        assert_eq!(map.get("X-Ingero-Threshold").unwrap(), "0.500000");
        assert_eq!(map.get("x-ingero-quorum-met").unwrap(), "false");
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn pairs_insert_into_a_header_map_as_the_host_does() {
        let s = ThresholdStore::new();
        s.publish(
            vec![report("c", Some((0.42, true)))],
            Timestamp::from_secs(1),
        );
        let h = s.push_headers("c").unwrap();
        let mut map = HeaderMap::new();
        for (name, value) in h.pairs() {
            map.insert(name, value.clone());
        }
        assert_eq!(map.get(THRESHOLD_HEADER).unwrap(), "0.420000");
        assert_eq!(map.get(QUORUM_MET_HEADER).unwrap(), "true");
        let mut grpc = HeaderMap::new();
        for (name, value) in h.grpc_pairs() {
            grpc.insert(name, value.clone());
        }
        assert_eq!(grpc.get("ingero-threshold").unwrap(), "0.420000");
        assert_eq!(grpc.get("ingero-quorum-met").unwrap(), "true");
    }

    #[test]
    fn header_name_constants_match_the_wire_names() {
        assert_eq!(
            THRESHOLD_HEADER,
            HeaderName::from_bytes(HEADER_THRESHOLD.as_bytes()).unwrap()
        );
        assert_eq!(
            QUORUM_MET_HEADER,
            HeaderName::from_bytes(HEADER_QUORUM_MET.as_bytes()).unwrap()
        );
    }

    #[test]
    fn malformed_ids_never_produce_headers() {
        let s = ThresholdStore::new();
        let evil = "a\r\nX-Ingero-Threshold: 0";
        s.publish(
            vec![
                report(evil, Some((0.8, true))),
                report("", Some((0.8, true))),
            ],
            Timestamp::from_secs(1),
        );
        assert_eq!(s.published_clusters(), 0);
        assert_eq!(s.push_headers(evil), None);
        assert_eq!(
            s.push_headers_for_query(Some("cluster_id=a%0D%0AX-Ingero-Threshold:%200")),
            None
        );
        let mut fams = Vec::new();
        s.telemetry(&mut fams);
        let dropped = family(&fams, metrics::PUBLISH_DROPPED_TOTAL);
        assert_eq!(sample(dropped, Some(("reason", "invalid_cluster_id"))), 2.0);
        let headers = family(&fams, metrics::HEADERS_TOTAL);
        assert_eq!(sample(headers, Some(("outcome", "invalid"))), 1.0);
        assert_eq!(sample(headers, Some(("outcome", "absent"))), 1.0);
    }

    #[test]
    fn duplicates_keep_the_first_and_the_cap_keeps_the_first_n() {
        let s = ThresholdStore::with_max_clusters(2);
        s.publish(
            vec![
                report("a", Some((0.8, true))),
                report("a", Some((0.2, false))),
                report("b", None),
                report("c", Some((0.3, true))),
            ],
            Timestamp::from_secs(1),
        );
        assert_eq!(s.get("a"), ThresholdValue::new(0.8, true));
        assert_eq!(s.published_clusters(), 2);
        assert_eq!(s.push_headers("c"), None);
        let mut fams = Vec::new();
        s.telemetry(&mut fams);
        let dropped = family(&fams, metrics::PUBLISH_DROPPED_TOTAL);
        assert_eq!(sample(dropped, Some(("reason", "duplicate"))), 1.0);
        assert_eq!(sample(dropped, Some(("reason", "over_cap"))), 1.0);
        assert_eq!(sample(dropped, Some(("reason", "invalid_cluster_id"))), 0.0);
        assert_eq!(
            sample(family(&fams, metrics::CLUSTERS_WITH_THRESHOLD), None),
            1.0
        );
    }

    #[test]
    fn push_lookups_are_counted_by_outcome() {
        let s = ThresholdStore::new();
        s.publish(
            vec![report("a", Some((0.8, true))), report("cold", None)],
            Timestamp::from_secs(1_700_000_000),
        );
        assert!(s.push_headers_for_query(Some("cluster_id=a")).is_some());
        assert!(s.push_headers("a").is_some());
        assert!(s.push_headers("cold").is_none());
        assert!(s.push_headers_for_query(Some("cluster_id=zz")).is_none());
        assert!(s.push_headers_for_query(None).is_none());
        assert!(s.push_headers_for_query(Some("x=1")).is_none());
        assert!(
            s.push_headers_for_query(Some("cluster_id=a&cluster_id=a"))
                .is_none()
        );
        s.record_invalid_lookup();
        let mut fams = Vec::new();
        s.telemetry(&mut fams);
        let h = family(&fams, metrics::HEADERS_TOTAL);
        assert_eq!(sample(h, Some(("outcome", "set"))), 2.0);
        assert_eq!(sample(h, Some(("outcome", "absent"))), 2.0);
        assert_eq!(sample(h, Some(("outcome", "invalid"))), 2.0);
        assert_eq!(
            sample(family(&fams, metrics::LAST_PUBLISH_TIMESTAMP_SECONDS), None),
            1_700_000_000.0
        );
        assert_eq!(
            sample(family(&fams, metrics::PUBLISHED_CLUSTERS), None),
            2.0
        );
        assert_eq!(sample(family(&fams, metrics::PUBLISHES_TOTAL), None), 1.0);
    }

    #[test]
    fn swapped_out_snapshots_are_freed_by_the_publisher_once_unreferenced() {
        let s = ThresholdStore::new();
        s.publish(
            vec![report("a", Some((0.8, true)))],
            Timestamp::from_secs(1),
        );
        let held = s.snapshot();
        s.publish(
            vec![report("a", Some((0.7, true)))],
            Timestamp::from_secs(2),
        );
        // A reader still holds generation 1: it stays retired, not freed.
        assert_eq!(s.retired.lock().len(), 1);
        assert_eq!(held.generation(), 1);
        drop(held);
        s.publish(
            vec![report("a", Some((0.6, true)))],
            Timestamp::from_secs(3),
        );
        // Generation 1 (now unreferenced) and generation 2 are both freed here.
        assert_eq!(s.retired.lock().len(), 0);
        assert_eq!(s.get("a").unwrap().threshold(), 0.6);
    }

    #[test]
    fn pages_follow_byte_order_and_resume_after_a_cursor() {
        let s = ThresholdStore::new();
        s.publish(
            ["d", "a", "c", "b", "e"]
                .iter()
                .map(|id| report(id, None))
                .collect(),
            Timestamp::from_secs(1),
        );
        let snap = s.snapshot();
        let ids = |(page, more): (Vec<&ClusterReport>, bool)| {
            (
                page.iter()
                    .map(|r| r.cluster_id.to_string())
                    .collect::<Vec<_>>(),
                more,
            )
        };
        assert_eq!(
            ids(snap.page(None, 2)),
            (vec!["a".into(), "b".into()], true)
        );
        assert_eq!(
            ids(snap.page(Some("b"), 2)),
            (vec!["c".into(), "d".into()], true)
        );
        assert_eq!(
            ids(snap.page(Some("bb"), 5)),
            (vec!["c".into(), "d".into(), "e".into()], false)
        );
        assert_eq!(ids(snap.page(Some("e"), 5)), (vec![], false));
        assert!(!ids(snap.page(None, 5)).1);
    }
}
