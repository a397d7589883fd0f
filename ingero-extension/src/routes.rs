//! The HTTP routes, socket-free: an [`ApiRequest`] in, an [`ApiResponse`] out. The host
//! binds them to the agent and admin listeners; tests drive them directly.
//!
//! Agent listener (spec section 2.2):
//! - `GET /api/v1/threshold?cluster_id=ID` -> `200 {"threshold":<f64>,"quorum_met":<bool>}`,
//!   the cold-start shape `{"threshold":0,"quorum_met":false}` when nothing is computed
//!   (an unknown cluster is "nothing computed", not an error);
//! - missing or malformed `cluster_id` -> `400 {"error":..}` (the message never echoes it);
//! - another method on that path -> `405` with `Allow: GET`; any other path -> `404`.
//!
//! Admin listener:
//! - `GET /api/v1/diagnostics[?limit=N&after=ID]` -> a page of cluster summaries (no node
//!   lists), ids in byte order, `next_after` naming the cursor of the next page;
//! - `GET /api/v1/diagnostics?cluster_id=ID` -> one cluster in full, `404` when unknown.
//!
//! Every response is JSON with `Cache-Control: no-store`; no route ever redirects.
//!
//! Cluster scoping ([`Visibility`]): a caller limited to some clusters (the host's bearer
//! tokens) gets, for any other cluster, exactly the answer of a cluster that does not exist
//! (threshold: the cold-start body; diagnostics: `404 unknown cluster`), so it cannot learn
//! whether that cluster exists. The diagnostics listing needs [`Visibility::All`] (403
//! otherwise): a page would reveal the cluster count and ids.

use std::sync::Arc;

pub use component::api::Visibility;
use component::api::{ApiRequest, ApiResponse};
use component::text::form_decode;
use ingero_wire::http::THRESHOLD_API_PATH;
use ingero_wire::threshold::{ClusterDiagnostics, ClusterReport};
use serde::Serialize;

use crate::cluster_id::{
    ClusterIdParam, Param, cluster_id_from_query, single_param, validate_cluster_id,
};
use crate::metrics::{ApiCounters, Endpoint};
use crate::store::ThresholdStore;
use crate::view::{SourceBoard, VIEW_API_PATH, asset, cluster_view};

/// Admin diagnostics path.
pub const DIAGNOSTICS_PATH: &str = "/api/v1/diagnostics";
/// Clusters per diagnostics page when `limit` is not given.
pub const DEFAULT_PAGE_LIMIT: usize = 100;
/// Largest `limit` a diagnostics page accepts.
pub const MAX_PAGE_LIMIT: usize = 1000;

const ALLOW: &str = "GET";

/// Body of the 403 a scoped caller gets for the diagnostics listing.
pub const LISTING_FORBIDDEN: &str =
    "listing clusters needs a token scoped to every cluster (\"*\")";

/// The routes of one extension instance over its store.
#[derive(Debug)]
pub(crate) struct Routes {
    store: Arc<ThresholdStore>,
    board: Arc<SourceBoard>,
    counters: ApiCounters,
}

impl Routes {
    #[cfg(test)]
    pub(crate) fn new(store: Arc<ThresholdStore>) -> Self {
        Routes::with_board(store, Arc::default())
    }

    pub(crate) fn with_board(store: Arc<ThresholdStore>, board: Arc<SourceBoard>) -> Self {
        Routes {
            store,
            board,
            counters: ApiCounters::default(),
        }
    }

    pub(crate) fn counters(&self) -> &ApiCounters {
        &self.counters
    }

    /// Requests to the agent listener.
    pub(crate) fn agent(&self, req: &ApiRequest<'_>) -> ApiResponse {
        self.agent_scoped(req, Visibility::All)
    }

    /// Requests to the agent listener from a caller that sees only `vis`.
    pub(crate) fn agent_scoped(&self, req: &ApiRequest<'_>, vis: Visibility<'_>) -> ApiResponse {
        let (endpoint, resp) = if req.path == THRESHOLD_API_PATH {
            (Endpoint::Threshold, self.threshold(req, vis))
        } else {
            (Endpoint::Other, ApiResponse::not_found())
        };
        self.finish(endpoint, resp)
    }

    /// Requests to the admin listener.
    pub(crate) fn admin(&self, req: &ApiRequest<'_>) -> ApiResponse {
        self.admin_scoped(req, Visibility::All)
    }

    /// Requests to the admin listener from a caller that sees only `vis`.
    pub(crate) fn admin_scoped(&self, req: &ApiRequest<'_>, vis: Visibility<'_>) -> ApiResponse {
        let (endpoint, resp) = if req.path == DIAGNOSTICS_PATH {
            (Endpoint::Diagnostics, self.diagnostics(req, vis))
        } else if req.path == VIEW_API_PATH {
            (Endpoint::View, self.view(req, vis))
        } else if let Some(page) = asset(req.path) {
            let resp = if req.method == "GET" {
                page
            } else {
                ApiResponse::method_not_allowed(ALLOW)
            };
            (Endpoint::ViewPage, resp)
        } else {
            (Endpoint::Other, ApiResponse::not_found())
        };
        self.finish(endpoint, resp)
    }

    fn finish(&self, endpoint: Endpoint, mut resp: ApiResponse) -> ApiResponse {
        self.counters.record(endpoint, resp.status);
        resp.headers.push(("Cache-Control", "no-store".to_string()));
        resp.headers
            .push(("X-Content-Type-Options", "nosniff".to_string()));
        resp
    }

    fn threshold(&self, req: &ApiRequest<'_>, vis: Visibility<'_>) -> ApiResponse {
        if req.method != "GET" {
            return ApiResponse::method_not_allowed(ALLOW);
        }
        match cluster_id_from_query(req.query) {
            ClusterIdParam::Missing => {
                ApiResponse::json_error(400, "missing query parameter cluster_id")
            }
            ClusterIdParam::Invalid(msg) => ApiResponse::json_error(400, msg),
            ClusterIdParam::Valid(id) if !vis.allows(&id) => {
                ApiResponse::json(200, crate::store::COLD_START_BODY.to_vec())
            }
            ClusterIdParam::Valid(id) => ApiResponse::json(200, self.store.threshold_body(&id)),
        }
    }

    fn diagnostics(&self, req: &ApiRequest<'_>, vis: Visibility<'_>) -> ApiResponse {
        if req.method != "GET" {
            return ApiResponse::method_not_allowed(ALLOW);
        }
        match cluster_id_from_query(req.query) {
            ClusterIdParam::Invalid(msg) => ApiResponse::json_error(400, msg),
            ClusterIdParam::Valid(id) if !vis.allows(&id) => {
                ApiResponse::json_error(404, "unknown cluster")
            }
            ClusterIdParam::Valid(id) => self.one_cluster(&id),
            ClusterIdParam::Missing if matches!(vis, Visibility::Only(_)) => {
                ApiResponse::json_error(403, LISTING_FORBIDDEN)
            }
            ClusterIdParam::Missing => match page_params(req.query) {
                Ok((limit, after)) => self.summary_page(limit, after.as_deref()),
                Err(msg) => ApiResponse::json_error(400, msg),
            },
        }
    }

    /// The live view's data for one cluster. Out-of-scope and unknown clusters answer the
    /// same `404`.
    fn view(&self, req: &ApiRequest<'_>, vis: Visibility<'_>) -> ApiResponse {
        if req.method != "GET" {
            return ApiResponse::method_not_allowed(ALLOW);
        }
        match cluster_id_from_query(req.query) {
            ClusterIdParam::Missing => {
                ApiResponse::json_error(400, "missing query parameter cluster_id")
            }
            ClusterIdParam::Invalid(msg) => ApiResponse::json_error(400, msg),
            ClusterIdParam::Valid(id) if !vis.allows(&id) => {
                ApiResponse::json_error(404, "unknown cluster")
            }
            ClusterIdParam::Valid(id) => {
                let snap = self.store.snapshot();
                match snap.report(&id) {
                    Some(report) => cluster_view(
                        report,
                        snap.published_at(),
                        snap.generation(),
                        self.store.history(),
                        &self.board,
                    ),
                    None => ApiResponse::json_error(404, "unknown cluster"),
                }
            }
        }
    }

    fn one_cluster(&self, id: &str) -> ApiResponse {
        let snap = self.store.snapshot();
        let Some(report) = snap.report(id) else {
            return ApiResponse::json_error(404, "unknown cluster");
        };
        let body = ClusterDetail {
            cluster_id: &report.cluster_id,
            threshold: report.value.map(|v| v.threshold()),
            quorum_met: report.value.is_some_and(|v| v.quorum_met()),
            published_at_unix_nano: snap.published_at().map(|t| t.as_nanos()),
            diagnostics: &report.diagnostics,
        };
        to_json(&body)
    }

    fn summary_page(&self, limit: usize, after: Option<&str>) -> ApiResponse {
        let snap = self.store.snapshot();
        let (page, more) = snap.page(after, limit);
        let next_after = if more {
            page.last().map(|r| &*r.cluster_id)
        } else {
            None
        };
        let body = SummaryPage {
            published_at_unix_nano: snap.published_at().map(|t| t.as_nanos()),
            generation: snap.generation(),
            cluster_count: snap.len(),
            returned: page.len(),
            next_after,
            clusters: page.into_iter().map(ClusterSummary::of).collect(),
        };
        to_json(&body)
    }
}

fn to_json<T: Serialize>(body: &T) -> ApiResponse {
    match serde_json::to_vec(body) {
        Ok(bytes) => ApiResponse::json(200, bytes),
        Err(_) => ApiResponse::json_error(500, "internal error"),
    }
}

/// `limit` and `after` of a summary page.
fn page_params(query: Option<&str>) -> Result<(usize, Option<String>), &'static str> {
    let limit = match single_param(query, "limit") {
        Param::Missing => DEFAULT_PAGE_LIMIT,
        Param::Repeated => return Err("query parameter limit given more than once"),
        Param::One(raw) => form_decode(raw)
            .ok()
            .filter(|s| !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|n| (1..=MAX_PAGE_LIMIT).contains(n))
            .ok_or("limit must be an integer from 1 to 1000")?,
    };
    let after = match single_param(query, "after") {
        Param::Missing => None,
        Param::Repeated => return Err("query parameter after given more than once"),
        Param::One(raw) => {
            let id = form_decode(raw).map_err(|_| "after must be a valid cluster id")?;
            validate_cluster_id(&id).map_err(|_| "after must be a valid cluster id")?;
            Some(id.into_owned())
        }
    };
    Ok((limit, after))
}

/// One cluster in full (admin).
#[derive(Serialize)]
struct ClusterDetail<'a> {
    cluster_id: &'a str,
    /// The delivered threshold; `null` when nothing is computed.
    threshold: Option<f64>,
    quorum_met: bool,
    published_at_unix_nano: Option<u64>,
    diagnostics: &'a ClusterDiagnostics,
}

/// One page of the admin summary.
#[derive(Serialize)]
struct SummaryPage<'a> {
    published_at_unix_nano: Option<u64>,
    generation: u64,
    cluster_count: usize,
    returned: usize,
    /// Pass as `after=` for the next page; `null` on the last page.
    next_after: Option<&'a str>,
    clusters: Vec<ClusterSummary<'a>>,
}

/// One cluster without its node list (admin summary; the live view flattens it in).
#[derive(Serialize)]
pub(crate) struct ClusterSummary<'a> {
    cluster_id: &'a str,
    threshold: Option<f64>,
    quorum_met: bool,
    median: Option<f64>,
    mad: Option<f64>,
    raw_threshold: Option<f64>,
    coverage: f64,
    coverage_low: bool,
    panic_mode: bool,
    active_nodes: u64,
    idle_nodes: u64,
    calibrating_nodes: u64,
    expected_nodes: u64,
    straggler_count: u64,
    cohort_count: usize,
    node_count: usize,
    computed_at_unix_nano: u64,
}

impl<'a> ClusterSummary<'a> {
    pub(crate) fn of(r: &'a ClusterReport) -> Self {
        let d = &r.diagnostics;
        ClusterSummary {
            cluster_id: &r.cluster_id,
            threshold: r.value.map(|v| v.threshold()),
            quorum_met: r.value.is_some_and(|v| v.quorum_met()),
            median: d.median,
            mad: d.mad,
            raw_threshold: d.raw_threshold,
            coverage: d.coverage,
            coverage_low: d.coverage_low,
            panic_mode: d.panic_mode,
            active_nodes: d.active_nodes,
            idle_nodes: d.idle_nodes,
            calibrating_nodes: d.calibrating_nodes,
            expected_nodes: d.expected_nodes,
            straggler_count: d.straggler_count,
            cohort_count: d.cohorts.len(),
            node_count: d.nodes.len(),
            computed_at_unix_nano: d.computed_at_unix_nano,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::COLD_START_BODY;
    use crate::store::tests::report;
    use component::Timestamp;
    use ingero_wire::ClusterReport;
    use ingero_wire::threshold::{NodeDiagnostics, ThresholdSink};
    use serde_json::{Value, json};

    fn routes() -> Routes {
        let store = Arc::new(ThresholdStore::new());
        let mut with_nodes = report("prod", Some((0.870348, true)));
        let mut d = (*with_nodes.diagnostics).clone();
        d.nodes = vec![
            NodeDiagnostics {
                node_id: "gpu-node-01".into(),
                cohort: "".into(),
                state: "active",
                score: 0.92,
                last_seen_unix_nano: 41_000_000_000,
                straggler: false,
            },
            NodeDiagnostics {
                node_id: "gpu-node-03".into(),
                cohort: "".into(),
                state: "active",
                score: 0.58,
                last_seen_unix_nano: 42_000_000_000,
                straggler: true,
            },
        ];
        d.straggler_count = 1;
        d.panic_mode = true;
        with_nodes.diagnostics = Arc::new(d);
        store.publish(
            vec![
                with_nodes,
                report("lost", Some((0.9, false))),
                report("cold", None),
            ],
            Timestamp::from_secs(50),
        );
        Routes::new(store)
    }

    fn get<'a>(path: &'a str, query: Option<&'a str>) -> ApiRequest<'a> {
        ApiRequest {
            method: "GET",
            path,
            query,
        }
    }

    fn header<'a>(r: &'a ApiResponse, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn body_json(r: &ApiResponse) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn threshold_bodies_are_exact() {
        let r = routes();
        let cases: [(&str, &[u8]); 4] = [
            (
                "cluster_id=prod",
                br#"{"threshold":0.870348,"quorum_met":true}"#,
            ),
            (
                "cluster_id=lost",
                br#"{"threshold":0.900000,"quorum_met":false}"#,
            ),
            ("cluster_id=cold", COLD_START_BODY),
            ("cluster_id=never-seen", COLD_START_BODY),
        ];
        for (q, want) in cases {
            let resp = r.agent(&get(THRESHOLD_API_PATH, Some(q)));
            assert_eq!(resp.status, 200, "{q}");
            assert_eq!(resp.content_type, "application/json");
            assert_eq!(resp.body, want, "{q}");
            assert_eq!(header(&resp, "Cache-Control"), Some("no-store"));
            assert!(header(&resp, "Location").is_none());
            assert!(resp.body.len() <= 41, "{}", resp.body.len());
        }
        assert_eq!(COLD_START_BODY, br#"{"threshold":0,"quorum_met":false}"#);
    }

    #[test]
    fn header_and_get_digits_match_for_the_same_state() {
        let r = routes();
        let h = r.store.push_headers("prod").unwrap();
        let body = r
            .agent(&get(THRESHOLD_API_PATH, Some("cluster_id=prod")))
            .body;
        let body = String::from_utf8(body).unwrap();
        let digits = h.threshold.to_str().unwrap();
        assert_eq!(
            body,
            format!(
                r#"{{"threshold":{digits},"quorum_met":{}}}"#,
                h.quorum_met.to_str().unwrap()
            )
        );
    }

    #[test]
    fn bad_cluster_ids_get_a_clear_400_without_echo() {
        let r = routes();
        let cases = [
            (None, "missing query parameter cluster_id"),
            (Some(""), "missing query parameter cluster_id"),
            (Some("cluster=prod"), "missing query parameter cluster_id"),
            (Some("cluster_id="), "cluster_id is empty"),
            (
                Some("cluster_id=prod&cluster_id=prod"),
                "query parameter cluster_id given more than once",
            ),
            (Some("cluster_id=%ff"), "cluster_id is not valid UTF-8"),
            (
                Some("cluster_id=%G1"),
                "cluster_id has a malformed percent-escape",
            ),
            (
                Some("cluster_id=prod%0D%0ASet-Cookie:%20x=1"),
                "cluster_id contains a control character or line break",
            ),
            (
                Some("cluster_id=prod%0AX-Ingero-Threshold:%200"),
                "cluster_id contains a control character or line break",
            ),
        ];
        for (q, msg) in cases {
            let resp = r.agent(&get(THRESHOLD_API_PATH, q));
            assert_eq!(resp.status, 400, "{q:?}");
            assert_eq!(body_json(&resp), json!({ "error": msg }), "{q:?}");
            let text = String::from_utf8(resp.body.clone()).unwrap();
            assert!(
                !text.contains("Set-Cookie") && !text.contains("prod"),
                "{text}"
            );
            assert_eq!(header(&resp, "Cache-Control"), Some("no-store"));
            assert!(resp.body.len() < 100);
        }
        let long = format!("cluster_id={}", "a".repeat(257));
        let resp = r.agent(&get(THRESHOLD_API_PATH, Some(&long)));
        assert_eq!(resp.status, 400);
        assert_eq!(
            body_json(&resp),
            json!({"error": "cluster_id is longer than 256 bytes"})
        );
    }

    #[test]
    fn other_methods_are_405_with_allow_and_other_paths_404() {
        let r = routes();
        for method in ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "get"] {
            let req = ApiRequest {
                method,
                path: THRESHOLD_API_PATH,
                query: Some("cluster_id=prod"),
            };
            let resp = r.agent(&req);
            assert_eq!(resp.status, 405, "{method}");
            assert_eq!(header(&resp, "Allow"), Some("GET"));
            let req = ApiRequest {
                path: DIAGNOSTICS_PATH,
                ..req
            };
            let resp = r.admin(&req);
            assert_eq!(resp.status, 405, "{method}");
            assert_eq!(header(&resp, "Allow"), Some("GET"));
        }
        for path in [
            "/api/v1/threshold/",
            "/api/v1/Threshold",
            "/api/v1",
            "/",
            "/v1/metrics",
            DIAGNOSTICS_PATH,
        ] {
            let resp = r.agent(&get(path, Some("cluster_id=prod")));
            assert_eq!(resp.status, 404, "{path}");
            assert_eq!(body_json(&resp), json!({"error": "not found"}));
        }
        // The admin listener does not serve the agent API, and vice versa.
        assert_eq!(
            r.admin(&get(THRESHOLD_API_PATH, Some("cluster_id=prod")))
                .status,
            404
        );
    }

    #[test]
    fn one_cluster_diagnostics_in_full() {
        let r = routes();
        let resp = r.admin(&get(DIAGNOSTICS_PATH, Some("cluster_id=prod")));
        assert_eq!(resp.status, 200);
        let v = body_json(&resp);
        assert_eq!(v["cluster_id"], "prod");
        assert_eq!(v["threshold"], 0.870348);
        assert_eq!(v["quorum_met"], true);
        assert_eq!(v["published_at_unix_nano"], 50_000_000_000u64);
        let d = &v["diagnostics"];
        assert_eq!(d["median"], 0.95);
        assert_eq!(d["mad"], 0.01);
        assert_eq!(d["panic_mode"], true);
        assert_eq!(d["coverage"], 5.0 / 6.0);
        assert_eq!(d["nodes"].as_array().unwrap().len(), 2);
        assert_eq!(
            d["nodes"][1],
            json!({
                "node_id": "gpu-node-03", "cohort": "", "state": "active", "score": 0.58,
                "last_seen_unix_nano": 42_000_000_000u64, "straggler": true
            })
        );
        let cold = body_json(&r.admin(&get(DIAGNOSTICS_PATH, Some("cluster_id=cold"))));
        assert_eq!(cold["threshold"], Value::Null);
        assert_eq!(cold["quorum_met"], false);

        let resp = r.admin(&get(DIAGNOSTICS_PATH, Some("cluster_id=nope")));
        assert_eq!(resp.status, 404);
        assert_eq!(body_json(&resp), json!({"error": "unknown cluster"}));
        let resp = r.admin(&get(DIAGNOSTICS_PATH, Some("cluster_id=a%0Ab")));
        assert_eq!(resp.status, 400);
    }

    #[test]
    fn summary_lists_clusters_without_nodes() {
        let r = routes();
        let resp = r.admin(&get(DIAGNOSTICS_PATH, None));
        assert_eq!(resp.status, 200);
        let v = body_json(&resp);
        assert_eq!(v["cluster_count"], 3);
        assert_eq!(v["returned"], 3);
        assert_eq!(v["generation"], 1);
        assert_eq!(v["next_after"], Value::Null);
        let ids: Vec<&str> = v["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["cluster_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["cold", "lost", "prod"]);
        let prod = &v["clusters"][2];
        assert_eq!(prod["threshold"], 0.870348);
        assert_eq!(prod["node_count"], 2);
        assert_eq!(prod["straggler_count"], 1);
        assert!(prod.get("nodes").is_none());
    }

    #[test]
    fn summary_pages_with_limit_and_after() {
        let store = Arc::new(ThresholdStore::new());
        let reports: Vec<ClusterReport> =
            (0..25).map(|i| report(&format!("c{i:02}"), None)).collect();
        store.publish(reports, Timestamp::from_secs(1));
        let r = Routes::new(store);
        let mut after: Option<String> = None;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let q = match &after {
                Some(a) => format!("limit=10&after={a}"),
                None => "limit=10".to_string(),
            };
            let v = body_json(&r.admin(&get(DIAGNOSTICS_PATH, Some(&q))));
            pages += 1;
            for c in v["clusters"].as_array().unwrap() {
                seen.push(c["cluster_id"].as_str().unwrap().to_string());
            }
            match v["next_after"].as_str() {
                Some(a) => after = Some(a.to_string()),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let want: Vec<String> = (0..25).map(|i| format!("c{i:02}")).collect();
        assert_eq!(seen, want);

        for (q, msg) in [
            ("limit=0", "limit must be an integer from 1 to 1000"),
            ("limit=1001", "limit must be an integer from 1 to 1000"),
            ("limit=-1", "limit must be an integer from 1 to 1000"),
            ("limit=ten", "limit must be an integer from 1 to 1000"),
            (
                "limit=99999999999999999999",
                "limit must be an integer from 1 to 1000",
            ),
            (
                "limit=1&limit=2",
                "query parameter limit given more than once",
            ),
            ("after=", "after must be a valid cluster id"),
            ("after=%0A", "after must be a valid cluster id"),
            (
                "after=a&after=b",
                "query parameter after given more than once",
            ),
        ] {
            let resp = r.admin(&get(DIAGNOSTICS_PATH, Some(q)));
            assert_eq!(resp.status, 400, "{q}");
            assert_eq!(body_json(&resp), json!({ "error": msg }), "{q}");
        }
        let v = body_json(&r.admin(&get(DIAGNOSTICS_PATH, Some("limit=1000"))));
        assert_eq!(v["returned"], 25);
    }

    #[test]
    fn out_of_scope_clusters_answer_exactly_as_unknown_ones() {
        let r = routes();
        let only_lost = |c: &str| c == "lost";
        let vis = Visibility::Only(&only_lost);
        let q = |c: &str| format!("cluster_id={c}");
        // prod exists, never-seen does not: a caller scoped to "lost" gets the same bytes.
        let a = r.agent_scoped(&get(THRESHOLD_API_PATH, Some(&q("prod"))), vis);
        let b = r.agent_scoped(&get(THRESHOLD_API_PATH, Some(&q("never-seen"))), vis);
        assert_eq!(
            (a.status, &a.body, &a.headers),
            (b.status, &b.body, &b.headers)
        );
        assert_eq!(a.body, COLD_START_BODY);
        let own = r.agent_scoped(&get(THRESHOLD_API_PATH, Some(&q("lost"))), vis);
        assert_eq!(own.body, br#"{"threshold":0.900000,"quorum_met":false}"#);
        let a = r.admin_scoped(&get(DIAGNOSTICS_PATH, Some(&q("prod"))), vis);
        let b = r.admin_scoped(&get(DIAGNOSTICS_PATH, Some(&q("never-seen"))), vis);
        assert_eq!(
            (a.status, &a.body, &a.headers),
            (b.status, &b.body, &b.headers)
        );
        assert_eq!(a.status, 404);
        assert_eq!(
            r.admin_scoped(&get(DIAGNOSTICS_PATH, Some(&q("lost"))), vis)
                .status,
            200
        );
        let list = r.admin_scoped(&get(DIAGNOSTICS_PATH, None), vis);
        assert_eq!(list.status, 403);
        assert_eq!(body_json(&list), json!({ "error": LISTING_FORBIDDEN }));
        assert_eq!(
            r.admin_scoped(&get(DIAGNOSTICS_PATH, None), Visibility::All)
                .status,
            200
        );
    }

    #[test]
    fn view_shows_one_cluster_in_scope_and_answers_others_as_unknown() {
        let r = routes();
        let resp = r.admin(&get(VIEW_API_PATH, Some("cluster_id=prod")));
        assert_eq!(resp.status, 200);
        assert_eq!(resp.content_type, "application/json");
        let v = body_json(&resp);
        assert_eq!(v["cluster_id"], "prod");
        assert_eq!(v["threshold"], 0.870348);
        assert_eq!(v["panic_mode"], true);
        assert_eq!(v["generation"], 1);
        // Published once at 50 s: gpu-node-03 has been a straggler since then.
        let nodes = v["nodes"].as_array().unwrap();
        assert_eq!(nodes[1]["node_id"], "gpu-node-03");
        assert_eq!(nodes[1]["straggler_since_unix_nano"], 50_000_000_000u64);
        assert_eq!(nodes[0]["straggler_since_unix_nano"], Value::Null);
        let h = v["history"].as_array().unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0]["t_unix_nano"], 50_000_000_000u64);
        assert_eq!(h[0]["straggler_count"], 1);
        assert_eq!(v["peer_lag"], json!([]));
        assert_eq!(v["waiting_cost"], json!([]));

        let only_lost = |c: &str| c == "lost";
        let vis = Visibility::Only(&only_lost);
        let a = r.admin_scoped(&get(VIEW_API_PATH, Some("cluster_id=prod")), vis);
        let b = r.admin_scoped(&get(VIEW_API_PATH, Some("cluster_id=never-seen")), vis);
        assert_eq!(
            (a.status, &a.body, &a.headers),
            (b.status, &b.body, &b.headers)
        );
        assert_eq!(a.status, 404);
        assert_eq!(
            r.admin_scoped(&get(VIEW_API_PATH, Some("cluster_id=lost")), vis)
                .status,
            200
        );
        // The page files see nothing, whoever asks.
        let page = r.admin_scoped(&get("/view/", None), component::api::NOTHING);
        assert_eq!(page.status, 200);
        assert_eq!(page.content_type, "text/html; charset=utf-8");
        let resp = r.admin(&get(VIEW_API_PATH, None));
        assert_eq!(resp.status, 400);
        assert_eq!(
            body_json(&resp),
            json!({"error": "missing query parameter cluster_id"})
        );
        // Not on the agent listener.
        assert_eq!(
            r.agent(&get(VIEW_API_PATH, Some("cluster_id=prod"))).status,
            404
        );
        assert_eq!(r.agent(&get("/view/", None)).status, 404);
        assert_eq!(r.counters().get(Endpoint::View, 200), 2);
        assert_eq!(r.counters().get(Endpoint::ViewPage, 200), 1);
    }

    #[test]
    fn requests_are_counted_by_endpoint_and_code() {
        let r = routes();
        r.agent(&get(THRESHOLD_API_PATH, Some("cluster_id=prod")));
        r.agent(&get(THRESHOLD_API_PATH, Some("cluster_id=")));
        r.agent(&get("/nope", None));
        r.admin(&get(DIAGNOSTICS_PATH, Some("cluster_id=nope")));
        let post = ApiRequest {
            method: "POST",
            path: DIAGNOSTICS_PATH,
            query: None,
        };
        r.admin(&post);
        let c = r.counters();
        assert_eq!(c.get(Endpoint::Threshold, 200), 1);
        assert_eq!(c.get(Endpoint::Threshold, 400), 1);
        assert_eq!(c.get(Endpoint::Other, 404), 1);
        assert_eq!(c.get(Endpoint::Diagnostics, 404), 1);
        assert_eq!(c.get(Endpoint::Diagnostics, 405), 1);
        assert_eq!(c.get(Endpoint::Diagnostics, 200), 0);
    }
}
