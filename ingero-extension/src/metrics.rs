//! Names of everything this extension emits, and the atomic counters behind them.
//!
//! Every label set is fixed at compile time: no label value ever comes from outside data
//! (cluster ids appear in the admin JSON, never in metric labels).

use std::sync::atomic::{AtomicU64, Ordering};

use component::MetricFamily;

pub const LABEL_ENDPOINT: &str = "endpoint";
pub const LABEL_CODE: &str = "code";
pub const LABEL_OUTCOME: &str = "outcome";
pub const LABEL_REASON: &str = "reason";

// Self-metric families (Prometheus names), declared once: the name constants, their specs
// (`spec::*`: type, unit, help, labels) and `FAMILIES`, in exposition order (the store's,
// then the routes' request counter).
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    /// Clusters in the current published state (with or without a threshold).
    PUBLISHED_CLUSTERS: gauge "ingero_threshold_published_clusters", unit "1", labels [],
        help "Clusters in the current published threshold state.";
    /// Published clusters that have a deliverable threshold (push headers are set).
    CLUSTERS_WITH_THRESHOLD: gauge "ingero_threshold_clusters_with_threshold", unit "1",
        labels [],
        help "Published clusters with a deliverable threshold (push headers set).";
    /// Push-path header lookups (`outcome`: set, absent, invalid).
    HEADERS_TOTAL: counter "ingero_threshold_headers_total", unit "1", labels [LABEL_OUTCOME],
        help "Push-path threshold header lookups by outcome.";
    /// `computed_at` of the last publish, Unix seconds (0 before the first).
    LAST_PUBLISH_TIMESTAMP_SECONDS: gauge "ingero_threshold_last_publish_timestamp_seconds",
        unit "s", labels [],
        help "computed_at of the last threshold publish, Unix seconds (0 before the first).";
    /// Published clusters the live view keeps no history ring for (over
    /// [`crate::view::MAX_HISTORY_CLUSTERS`]).
    VIEW_HISTORY_OVER_CAP: gauge "ingero_threshold_view_history_over_cap", unit "1", labels [],
        help "Published clusters the live view keeps no history for (over its cluster cap).";
    /// Publishes received from the processor.
    PUBLISHES_TOTAL: counter "ingero_threshold_publishes_total", unit "1", labels [],
        help "Threshold publishes received from the processor.";
    /// Cluster reports a publish dropped instead of storing (`reason`: invalid_cluster_id,
    /// duplicate, over_cap).
    PUBLISH_DROPPED_TOTAL: counter "ingero_threshold_publish_dropped_total", unit "1",
        labels [LABEL_REASON],
        help "Cluster reports a publish dropped instead of storing, by reason.";
    /// Requests answered by the agent and admin routes.
    API_REQUESTS_TOTAL: counter "ingero_threshold_api_requests_total", unit "1",
        labels [LABEL_ENDPOINT, LABEL_CODE],
        help "Requests answered by the ingero_threshold routes, by endpoint and status code.";
}

/// The route a request was answered by (label `endpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Threshold,
    Diagnostics,
    /// The live view's data (`/api/v1/view`).
    View,
    /// The live view's page and its files (`/view/`).
    ViewPage,
    /// Any path neither listener serves.
    Other,
}

impl Endpoint {
    fn label(self) -> &'static str {
        match self {
            Endpoint::Threshold => "threshold",
            Endpoint::Diagnostics => "diagnostics",
            Endpoint::View => "view",
            Endpoint::ViewPage => "view_page",
            Endpoint::Other => "other",
        }
    }
}

/// Status codes the routes answer with (label `code`).
const CODES: [u16; 4] = [200, 400, 404, 405];
const ENDPOINTS: [Endpoint; 5] = [
    Endpoint::Threshold,
    Endpoint::Diagnostics,
    Endpoint::View,
    Endpoint::ViewPage,
    Endpoint::Other,
];

/// Request counters, one per (endpoint, code).
#[derive(Debug, Default)]
pub(crate) struct ApiCounters {
    counts: [[AtomicU64; CODES.len()]; ENDPOINTS.len()],
    /// A status outside [`CODES`] (none today; kept so a new status is never silently lost).
    other_code: AtomicU64,
}

impl ApiCounters {
    pub(crate) fn record(&self, endpoint: Endpoint, status: u16) {
        let e = ENDPOINTS.iter().position(|x| *x == endpoint).unwrap_or(0);
        let slot = CODES
            .iter()
            .position(|c| *c == status)
            .and_then(|c| self.counts.get(e).and_then(|row| row.get(c)));
        match slot {
            Some(counter) => counter.fetch_add(1, Ordering::Relaxed),
            None => self.other_code.fetch_add(1, Ordering::Relaxed),
        };
    }

    #[cfg(test)]
    pub(crate) fn get(&self, endpoint: Endpoint, status: u16) -> u64 {
        let e = ENDPOINTS.iter().position(|x| *x == endpoint).unwrap_or(0);
        CODES
            .iter()
            .position(|c| *c == status)
            .and_then(|c| self.counts.get(e).and_then(|row| row.get(c)))
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    pub(crate) fn family(&self) -> MetricFamily {
        let mut f = spec::API_REQUESTS_TOTAL.family();
        for (endpoint, row) in ENDPOINTS.iter().zip(&self.counts) {
            for (code, n) in CODES.iter().zip(row) {
                let code = code.to_string();
                f.push(
                    &[(LABEL_ENDPOINT, endpoint.label()), (LABEL_CODE, &code)],
                    n.load(Ordering::Relaxed) as f64,
                );
            }
        }
        let other = self.other_code.load(Ordering::Relaxed);
        if other > 0 {
            f.push(
                &[(LABEL_ENDPOINT, "other"), (LABEL_CODE, "other")],
                other as f64,
            );
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_code_pair_counts_separately() {
        let c = ApiCounters::default();
        c.record(Endpoint::Threshold, 200);
        c.record(Endpoint::Threshold, 200);
        c.record(Endpoint::Diagnostics, 404);
        c.record(Endpoint::Other, 500);
        assert_eq!(c.get(Endpoint::Threshold, 200), 2);
        assert_eq!(c.get(Endpoint::Diagnostics, 404), 1);
        assert_eq!(c.get(Endpoint::Threshold, 404), 0);
        let f = c.family();
        assert_eq!(f.samples.len(), ENDPOINTS.len() * CODES.len() + 1);
        let find = |e: &str, code: &str| {
            f.samples
                .iter()
                .find(|s| {
                    s.labels
                        == vec![
                            ("endpoint".to_string(), e.to_string()),
                            ("code".to_string(), code.to_string()),
                        ]
                })
                .map(|s| s.value)
        };
        assert_eq!(find("threshold", "200"), Some(2.0));
        assert_eq!(find("diagnostics", "404"), Some(1.0));
        assert_eq!(find("other", "other"), Some(1.0));
    }
}
