//! The payload screen of the ingest path: what every decoded export goes through before
//! auth checks its clusters and before any pipeline sees it.
//!
//! - **One scope per resource** ([`RequestScope::settle_resource`], the binary's request
//!   scope; Fleet's is the cluster): a resource whose scope attributes conflict, are not
//!   strings or break the id rule is dropped with all its points; agreeing duplicates and
//!   aliases collapse to one attribute under the scope's key; a point naming another scope
//!   than its resource is dropped ([`RequestScope::settle_point`]). Whether an attribute
//!   key is one of the scope's is checked inline against its [`ScopeKey`], in the same pass
//!   as the sizes.
//!
//! - **Sizes** ([`PayloadLimits`], `receivers.otlp.limits`): a resource with an over-long
//!   attribute key or value, or more attributes than a series may have, is dropped with its
//!   points; so is a metric with an over-long name, unit or description; a point whose
//!   attributes are too long or too many (with its resource's) is dropped; a resource
//!   with more metrics than `max_metrics_per_resource` is dropped whole.
//!
//! - **The scope's own checks** ([`RequestScope::check_metrics_resource`]; Fleet: a node
//!   id that is not a string or breaks the id rule): a resource refused there is dropped
//!   with its points.
//!
//! - **Charging**: a resource that names no scope gets the request's (its key added), so
//!   it counts against that scope's limits downstream.
//!
//! Dropped points are counted by reason and answered with OTLP partial success; the rest
//! of the batch goes on. Traces and logs go through the cluster-identity rule alone
//! ([`traces`], [`logs`]): a resource whose identity is refused is dropped with its spans
//! or log records, answered the same way (`rejected_spans`, `rejected_log_records`).

use component::otlp::{
    AnyValue, AnyValueKind, ExportMetricsServiceRequest, KeyValue, Metric, MetricKind,
};
use component::scope::{RequestScope, ScopeKey};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::config::model::PayloadLimits;

/// What the screen dropped from one export.
#[derive(Debug, Default)]
pub struct Screened {
    /// Data points (spans, log records) dropped.
    pub dropped: u64,
    /// Per reason (telemetry label), points dropped.
    pub by_reason: Vec<(&'static str, u64)>,
    /// The first refusal, for the partial-success message.
    pub first: Option<String>,
    /// Whether the screen may have changed the request (dropped, settled or added
    /// anything). `false` means it is, byte for byte, what was decoded.
    pub changed: bool,
}

impl Screened {
    fn drop(&mut self, reason: &'static str, n: u64, why: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        self.dropped += n;
        self.changed = true;
        match self.by_reason.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c += n,
            None => self.by_reason.push((reason, n)),
        }
        if self.first.is_none() {
            self.first = Some(why());
        }
    }

    /// The partial-success message: how many points the receiver refused and the first
    /// reason (`None` when nothing was dropped).
    pub fn message(&self) -> Option<String> {
        self.message_of("data point(s)")
    }

    /// [`Self::message`] naming what was dropped (`span(s)`, `log record(s)`).
    pub fn message_of(&self, items: &str) -> Option<String> {
        let first = self.first.as_deref()?;
        Some(format!(
            "{} {items} refused by the receiver; first: {first}",
            self.dropped
        ))
    }
}

/// The points of one metric, of whatever kind.
fn point_count(m: &Metric) -> u64 {
    (match &m.data {
        Some(MetricKind::Gauge(g)) => g.data_points.len(),
        Some(MetricKind::Sum(s)) => s.data_points.len(),
        Some(MetricKind::Histogram(h)) => h.data_points.len(),
        Some(MetricKind::ExponentialHistogram(h)) => h.data_points.len(),
        Some(MetricKind::Summary(s)) => s.data_points.len(),
        None => 0,
    }) as u64
}

/// Keep the points of `m` for which `keep` (given the point's attributes) is true; returns
/// how many were removed.
fn retain_points(m: &mut Metric, keep: &mut dyn FnMut(&mut Vec<KeyValue>) -> bool) -> u64 {
    macro_rules! retain {
        ($points:expr) => {{
            let before = $points.len();
            $points.retain_mut(|p| keep(&mut p.attributes));
            (before - $points.len()) as u64
        }};
    }
    match &mut m.data {
        Some(MetricKind::Gauge(g)) => retain!(g.data_points),
        Some(MetricKind::Sum(s)) => retain!(s.data_points),
        Some(MetricKind::Histogram(h)) => retain!(h.data_points),
        Some(MetricKind::ExponentialHistogram(h)) => retain!(h.data_points),
        Some(MetricKind::Summary(s)) => retain!(s.data_points),
        None => 0,
    }
}

/// Why a part of an export is over a [`PayloadLimits`] limit: the reason label and the
/// client message (which quotes at most the first 64 bytes of a key, never a value).
fn size_error(reason: &'static str, what: String) -> (&'static str, String) {
    (reason, what)
}

/// A key as quoted in a message: at most its first 64 bytes.
fn short(key: &str) -> &str {
    let mut end = key.len().min(64);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

/// Size of an attribute value as the limit counts it, stopping once past `max`.
#[inline]
fn value_size(v: Option<&AnyValue>, max: usize) -> usize {
    match v.and_then(|v| v.value.as_ref()) {
        None => 0,
        Some(AnyValueKind::StringValue(s)) => s.len(),
        Some(kind) => kind_size(kind, max),
    }
}

/// [`value_size`] of a value that is set (nested values count their members).
fn kind_size(kind: &AnyValueKind, max: usize) -> usize {
    match kind {
        AnyValueKind::StringValue(s) => s.len(),
        AnyValueKind::BytesValue(b) => b.len(),
        AnyValueKind::ArrayValue(a) => {
            let mut n = 0usize;
            for v in &a.values {
                n = n.saturating_add(value_size(Some(v), max));
                if n > max {
                    break;
                }
            }
            n
        }
        AnyValueKind::KvlistValue(l) => {
            let mut n = 0usize;
            for kv in &l.values {
                n = n
                    .saturating_add(kv.key.len())
                    .saturating_add(value_size(kv.value.as_ref(), max));
                if n > max {
                    break;
                }
            }
            n
        }
        _ => 8,
    }
}

/// Check one attribute list (`inherited`: attributes the series already has from its
/// resource). `Ok` says whether a key of the list is one of the scope's keys
/// ([`ScopeKey::matches`]), found in the same pass.
fn check_attrs(
    attrs: &[KeyValue],
    inherited: usize,
    l: &PayloadLimits,
    key: Option<&ScopeKey>,
) -> Result<bool, (&'static str, String)> {
    if attrs.len().saturating_add(inherited) > l.max_attributes_per_series {
        return Err(size_error(
            "too_many_attributes",
            format!(
                "{} attributes, more than limits.max_attributes_per_series = {}",
                attrs.len() + inherited,
                l.max_attributes_per_series
            ),
        ));
    }
    let mut cluster_key = false;
    for kv in attrs {
        if kv.key.len() > l.max_attribute_key_bytes {
            return Err(size_error(
                "attribute_key_too_long",
                format!(
                    "attribute key {:?}... is {} bytes, more than limits.max_attribute_key_bytes = {}",
                    short(&kv.key),
                    kv.key.len(),
                    l.max_attribute_key_bytes
                ),
            ));
        }
        let n = value_size(kv.value.as_ref(), l.max_attribute_value_bytes);
        if n > l.max_attribute_value_bytes {
            return Err(size_error(
                "attribute_value_too_long",
                format!(
                    "attribute {:?}: value over limits.max_attribute_value_bytes = {}",
                    short(&kv.key),
                    l.max_attribute_value_bytes
                ),
            ));
        }
        cluster_key |= key.is_some_and(|k| k.matches(&kv.key));
    }
    Ok(cluster_key)
}

/// Whether `attrs` passes [`check_attrs`] with no scope key: the same checks, without
/// building the refusal. A plain loop with early exits (this runs for every data point of
/// every push).
#[inline]
fn attrs_pass(
    attrs: &[KeyValue],
    inherited: usize,
    l: &PayloadLimits,
    key: Option<&ScopeKey>,
) -> bool {
    if attrs.len().saturating_add(inherited) > l.max_attributes_per_series {
        return false;
    }
    for kv in attrs {
        if kv.key.len() > l.max_attribute_key_bytes
            || value_size(kv.value.as_ref(), l.max_attribute_value_bytes)
                > l.max_attribute_value_bytes
        {
            return false;
        }
        if let Some(k) = key
            && k.matches(&kv.key)
        {
            return false;
        }
    }
    true
}

/// [`attrs_pass`] for every point of a metric (`attrs`: a point's attributes).
#[inline]
fn points_pass<P>(
    points: &[P],
    attrs: impl Fn(&P) -> &[KeyValue],
    inherited: usize,
    l: &PayloadLimits,
    key: Option<&ScopeKey>,
) -> bool {
    for p in points {
        if !attrs_pass(attrs(p), inherited, l, key) {
            return false;
        }
    }
    true
}

/// Whether every metric of `rm` passes [`check_metric`] and every data point
/// [`attrs_pass`] (`inherited`: the resource's attribute count): then the per-point pass
/// of [`metrics`] would keep everything and change nothing. The common case, checked
/// without that pass's bookkeeping, in nested loops that stop at the first failure.
fn metrics_pass(
    rm: &component::ResourceMetrics,
    inherited: usize,
    l: &PayloadLimits,
    key: Option<&ScopeKey>,
) -> bool {
    for sm in &rm.scope_metrics {
        for m in &sm.metrics {
            if m.name.len() > l.max_metric_name_bytes
                || m.unit.len() > l.max_metric_unit_bytes
                || m.description.len() > l.max_metric_description_bytes
            {
                return false;
            }
            let pass = match &m.data {
                Some(MetricKind::Gauge(g)) => {
                    points_pass(&g.data_points, |p| &p.attributes, inherited, l, key)
                }
                Some(MetricKind::Sum(s)) => {
                    points_pass(&s.data_points, |p| &p.attributes, inherited, l, key)
                }
                Some(MetricKind::Histogram(h)) => {
                    points_pass(&h.data_points, |p| &p.attributes, inherited, l, key)
                }
                Some(MetricKind::ExponentialHistogram(h)) => {
                    points_pass(&h.data_points, |p| &p.attributes, inherited, l, key)
                }
                Some(MetricKind::Summary(s)) => {
                    points_pass(&s.data_points, |p| &p.attributes, inherited, l, key)
                }
                None => true,
            };
            if !pass {
                return false;
            }
        }
    }
    true
}

/// Check a metric's name, unit and description.
fn check_metric(m: &Metric, l: &PayloadLimits) -> Result<(), (&'static str, String)> {
    if m.name.len() > l.max_metric_name_bytes {
        return Err(size_error(
            "metric_name_too_long",
            format!(
                "metric name {:?}... is {} bytes, more than limits.max_metric_name_bytes = {}",
                short(&m.name),
                m.name.len(),
                l.max_metric_name_bytes
            ),
        ));
    }
    if m.unit.len() > l.max_metric_unit_bytes {
        return Err(size_error(
            "metric_unit_too_long",
            format!(
                "metric {:?}: unit is {} bytes, more than limits.max_metric_unit_bytes = {}",
                short(&m.name),
                m.unit.len(),
                l.max_metric_unit_bytes
            ),
        ));
    }
    if m.description.len() > l.max_metric_description_bytes {
        return Err(size_error(
            "metric_description_too_long",
            format!(
                "metric {:?}: description is {} bytes, more than \
                 limits.max_metric_description_bytes = {}",
                short(&m.name),
                m.description.len(),
                l.max_metric_description_bytes
            ),
        ));
    }
    Ok(())
}

/// Screen a metrics export in place. `request_cluster` is the scope the request names
/// (query, header or metadata): the scope of resources that name none.
pub fn metrics(
    req: &mut ExportMetricsServiceRequest,
    request_cluster: Option<&str>,
    limits: &PayloadLimits,
    scope: &dyn RequestScope,
) -> Screened {
    let key = scope.key();
    let mut out = Screened::default();
    let mut index = 0usize;
    req.resource_metrics.retain_mut(|rm| {
        let i = index;
        index += 1;
        let resource_points = |rm: &component::ResourceMetrics| -> u64 {
            rm.scope_metrics
                .iter()
                .flat_map(|sm| &sm.metrics)
                .map(point_count)
                .sum()
        };
        let attrs = component::otlp::resource_attrs(rm);
        if let Err((reason, why)) = check_attrs(attrs, 0, limits, key) {
            out.drop(reason, resource_points(rm), || {
                format!("resource {i}: {why}")
            });
            return false;
        }
        let metrics: usize = rm.scope_metrics.iter().map(|sm| sm.metrics.len()).sum();
        if metrics > limits.max_metrics_per_resource {
            out.drop("too_many_metrics", resource_points(rm), || {
                format!(
                    "resource {i}: {metrics} metrics, more than \
                     limits.max_metrics_per_resource = {}",
                    limits.max_metrics_per_resource
                )
            });
            return false;
        }
        let settled = rm
            .resource
            .as_ref()
            .map_or(Some(false), |r| scope.resource_settled(&r.attributes));
        let names_cluster = match (settled, rm.resource.as_mut()) {
            (Some(named), _) => named,
            (None, Some(r)) => {
                out.changed = true;
                match scope.settle_resource(&mut r.attributes) {
                    Ok(named) => named,
                    Err(e) => {
                        out.drop(e.reason, resource_points(rm), || {
                            format!("resource {i}: {e}")
                        });
                        return false;
                    }
                }
            }
            (None, None) => false,
        };
        if let Err(e) = scope.check_metrics_resource(component::otlp::resource_attrs(rm)) {
            out.drop(e.reason, resource_points(rm), || {
                format!("resource {i}: {e}")
            });
            return false;
        }
        let inherited = component::otlp::resource_attrs(rm).len();
        // A resource that names no scope belongs to the request's: it says so from here
        // on, so every stage (and the exporter's per-cluster caps) charges it there.
        // (A resource that names one has exactly one attribute under the key, a string, now.)
        if !names_cluster
            && let Some(c) = request_cluster
            && let Some(k) = key
        {
            out.changed = true;
            rm.resource
                .get_or_insert_with(Default::default)
                .attributes
                .push(component::otlp::kv_str(k.key(), c));
        }
        let cluster = if names_cluster {
            key.and_then(|k| rm.resource.as_ref().and_then(|r| k.of(&r.attributes)))
        } else {
            request_cluster
        };
        if metrics_pass(rm, inherited, limits, key) {
            return true;
        }
        out.changed = true;
        for sm in &mut rm.scope_metrics {
            sm.metrics.retain_mut(|m| {
                if let Err((reason, why)) = check_metric(m, limits) {
                    out.drop(reason, point_count(m), || format!("resource {i}: {why}"));
                    return false;
                }
                let mut first: Option<(&'static str, String)> = None;
                let mut per_reason: Vec<(&'static str, u64)> = Vec::new();
                retain_points(m, &mut |attrs| {
                    // Sizes first; the cluster-id rule only for a point that has such a key.
                    let verdict =
                        check_attrs(attrs, inherited, limits, key).and_then(|cluster_key| {
                            if !cluster_key {
                                return Ok(());
                            }
                            scope
                                .settle_point(attrs, cluster)
                                .map_err(|e| (e.reason, format!("data point attribute: {e}")))
                        });
                    match verdict {
                        Ok(()) => true,
                        Err((reason, why)) => {
                            match per_reason.iter_mut().find(|(r, _)| *r == reason) {
                                Some((_, n)) => *n += 1,
                                None => per_reason.push((reason, 1)),
                            }
                            first.get_or_insert((reason, why));
                            false
                        }
                    }
                });
                for (reason, n) in per_reason {
                    out.drop(reason, n, || {
                        let why = first.as_ref().map(|f| f.1.as_str()).unwrap_or_default();
                        format!("resource {i}, metric {:?}: {why}", short(&m.name))
                    });
                }
                true
            });
        }
        true
    });
    out
}

/// Drop the resources whose scope is refused (with their `count` items) and settle the
/// others to one scope attribute, as [`metrics`] does.
fn resources<T>(
    list: &mut Vec<T>,
    resource: fn(&mut T) -> Option<&mut Resource>,
    count: fn(&T) -> u64,
    scope: &dyn RequestScope,
) -> Screened {
    let mut out = Screened::default();
    let mut index = 0usize;
    list.retain_mut(|r| {
        let i = index;
        index += 1;
        let Some(res) = resource(r) else {
            return true;
        };
        // Settling may change the attributes (traces and logs do not ask the read-only
        // check first: nothing reuses their requests).
        out.changed = true;
        match scope.settle_resource(&mut res.attributes) {
            Ok(_) => true,
            Err(e) => {
                out.drop(e.reason, count(r), || format!("resource {i}: {e}"));
                false
            }
        }
    });
    out
}

/// Screen a traces export in place: a resource whose cluster identity is refused is
/// dropped with its spans; the rest goes on.
pub fn traces(req: &mut ExportTraceServiceRequest, scope: &dyn RequestScope) -> Screened {
    resources(
        &mut req.resource_spans,
        |r| r.resource.as_mut(),
        |r| r.scope_spans.iter().map(|s| s.spans.len() as u64).sum(),
        scope,
    )
}

/// Screen a logs export in place: a resource whose cluster identity is refused is dropped
/// with its log records; the rest goes on.
pub fn logs(req: &mut ExportLogsServiceRequest, scope: &dyn RequestScope) -> Screened {
    resources(
        &mut req.resource_logs,
        |r| r.resource.as_mut(),
        |r| {
            r.scope_logs
                .iter()
                .map(|s| s.log_records.len() as u64)
                .sum()
        },
        scope,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{gauge_f64, get_str, kv_i64, kv_str, point_f64, resource_metrics};
    use ingero_wire::resource::{CLUSTER_ID, NODE_ID};
    use ingero_wire::scope::ClusterScope;

    // The screen under Fleet's scope (the cluster), as `ingero-fleet` registers it.
    const KEY: Option<&ScopeKey> = Some(&ingero_wire::cluster_identity::CLUSTER_KEY);

    fn metrics(
        req: &mut ExportMetricsServiceRequest,
        request_cluster: Option<&str>,
        limits: &PayloadLimits,
    ) -> Screened {
        super::metrics(req, request_cluster, limits, &ClusterScope)
    }

    fn traces(req: &mut ExportTraceServiceRequest) -> Screened {
        super::traces(req, &ClusterScope)
    }

    fn logs(req: &mut ExportLogsServiceRequest) -> Screened {
        super::logs(req, &ClusterScope)
    }

    fn check_attrs(
        attrs: &[KeyValue],
        inherited: usize,
        l: &PayloadLimits,
    ) -> Result<bool, (&'static str, String)> {
        super::check_attrs(attrs, inherited, l, KEY)
    }

    fn attrs_pass(attrs: &[KeyValue], inherited: usize, l: &PayloadLimits) -> bool {
        super::attrs_pass(attrs, inherited, l, KEY)
    }

    fn metrics_pass(rm: &component::ResourceMetrics, inherited: usize, l: &PayloadLimits) -> bool {
        super::metrics_pass(rm, inherited, l, KEY)
    }

    fn push(resource: Vec<KeyValue>, points: Vec<Vec<KeyValue>>) -> component::ResourceMetrics {
        let points = points.into_iter().map(|a| point_f64(a, 1, 0.5)).collect();
        resource_metrics(
            resource,
            "ingero.health",
            vec![gauge_f64("ingero.node.health_score", "1", points)],
        )
    }

    /// `changed` is false only for a request the screen left as it was: what lets the
    /// JSON decoder's batch go back to it as issued (see `component::recycle::Origin`).
    #[test]
    fn the_screen_says_whether_it_changed_the_request() {
        let l = PayloadLimits::default();
        let screen = |resources: Vec<component::ResourceMetrics>, request: Option<&str>| {
            let mut req = ExportMetricsServiceRequest {
                resource_metrics: resources,
            };
            let before = req.clone();
            let s = metrics(&mut req, request, &l);
            assert_eq!(s.changed, req != before, "{before:?}");
            s.changed
        };
        let named = vec![kv_str(CLUSTER_ID, "a"), kv_str(NODE_ID, "n1")];
        // Clean: named cluster, plain points; no cluster and no request cluster either.
        assert!(!screen(
            vec![push(named.clone(), vec![vec![], vec![]])],
            Some("a")
        ));
        assert!(!screen(
            vec![push(vec![kv_str(NODE_ID, "n1")], vec![vec![]])],
            None
        ));
        // The request's cluster added to a resource that names none.
        assert!(screen(
            vec![push(vec![kv_str(NODE_ID, "n1")], vec![vec![]])],
            Some("a")
        ));
        // An alias of the cluster key settled to the canonical key; a duplicate removed.
        assert!(screen(
            vec![push(vec![kv_str("ingero_cluster_id", "a")], vec![vec![]])],
            None
        ));
        assert!(screen(
            vec![push(
                vec![kv_str(CLUSTER_ID, "a"), kv_str(CLUSTER_ID, "a")],
                vec![vec![]]
            )],
            None
        ));
        // A point's copy of its resource's cluster removed; a conflicting one dropped.
        assert!(screen(
            vec![push(named.clone(), vec![vec![kv_str(CLUSTER_ID, "a")]])],
            None
        ));
        assert!(screen(
            vec![push(named, vec![vec![kv_str(CLUSTER_ID, "b")]])],
            None
        ));
        // A resource dropped.
        assert!(screen(
            vec![push(vec![kv_i64(CLUSTER_ID, 7)], vec![vec![]])],
            None
        ));
    }

    #[test]
    fn conflicting_resources_are_dropped_and_the_rest_kept() {
        let good = push(
            vec![kv_str(CLUSTER_ID, "a"), kv_str("ingero.node.id", "n1")],
            vec![vec![], vec![]],
        );
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![
                good.clone(),
                push(
                    vec![kv_str(CLUSTER_ID, "a"), kv_str(CLUSTER_ID, "b")],
                    vec![vec![], vec![], vec![]],
                ),
                push(vec![kv_i64(CLUSTER_ID, 7)], vec![vec![]]),
            ],
        };
        let s = metrics(&mut req, Some("a"), &PayloadLimits::default());
        assert_eq!(s.dropped, 4);
        assert_eq!(
            s.by_reason,
            [("cluster_id_conflict", 3), ("cluster_id_not_string", 1)]
        );
        assert_eq!(req.resource_metrics, [good]);
        let msg = s.message().unwrap();
        assert!(msg.starts_with("4 data point(s) refused"), "{msg}");
        assert!(msg.contains("resource 1"), "{msg}");
    }

    #[test]
    fn points_naming_another_cluster_are_dropped() {
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![push(
                vec![kv_str("ingero_cluster_id", "a")],
                vec![
                    vec![kv_str("ingero.cluster.id", "b")],
                    vec![kv_str("ingero.cluster.id", "a")],
                    vec![],
                ],
            )],
        };
        let s = metrics(&mut req, None, &PayloadLimits::default());
        assert_eq!(s.by_reason, [("cluster_id_conflict", 1)]);
        let rm = &req.resource_metrics[0];
        // The alias became the one canonical attribute.
        assert_eq!(
            get_str(&rm.resource.as_ref().unwrap().attributes, CLUSTER_ID),
            Some("a")
        );
        let pts = component::otlp::number_points(&rm.scope_metrics[0].metrics[0]);
        assert_eq!(pts.len(), 2);
        assert!(pts.iter().all(|p| p.attributes.is_empty()));
    }

    #[test]
    fn a_resource_without_cluster_takes_the_request_cluster_for_its_points() {
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![push(
                vec![],
                vec![vec![kv_str(CLUSTER_ID, "a")], vec![kv_str(CLUSTER_ID, "b")]],
            )],
        };
        let s = metrics(&mut req, Some("a"), &PayloadLimits::default());
        assert_eq!(s.dropped, 1);
        let mut req2 = ExportMetricsServiceRequest {
            resource_metrics: vec![push(vec![], vec![vec![kv_str(CLUSTER_ID, "a")]])],
        };
        assert_eq!(
            metrics(&mut req2, None, &PayloadLimits::default()).dropped,
            1
        );
    }

    #[test]
    fn over_limit_parts_are_dropped_at_their_level() {
        let l = PayloadLimits::default();
        let huge = "v".repeat(l.max_attribute_value_bytes + 1);
        let mut long_name = push(vec![kv_str(CLUSTER_ID, "a")], vec![vec![], vec![]]);
        long_name.scope_metrics[0].metrics[0].name = "m".repeat(l.max_metric_name_bytes + 1);
        let mut long_unit = push(vec![kv_str(CLUSTER_ID, "a")], vec![vec![]]);
        long_unit.scope_metrics[0].metrics[0].unit = "u".repeat(64);
        let many: Vec<KeyValue> = (0..l.max_attributes_per_series)
            .map(|k| kv_str(&format!("k{k}"), "v"))
            .collect();
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![
                // Resource value too long: the resource's 3 points.
                push(
                    vec![kv_str(CLUSTER_ID, "a"), kv_str("note", &huge)],
                    vec![vec![], vec![], vec![]],
                ),
                long_name,
                long_unit,
                // Point-level: one key too long, one point with too many attributes (the
                // resource's one plus 64), one fine.
                push(
                    vec![kv_str(CLUSTER_ID, "a")],
                    vec![vec![kv_str(&"k".repeat(257), "v")], many, vec![]],
                ),
            ],
        };
        let s = metrics(&mut req, None, &l);
        assert_eq!(
            s.by_reason,
            [
                ("attribute_value_too_long", 3),
                ("metric_name_too_long", 2),
                ("metric_unit_too_long", 1),
                ("attribute_key_too_long", 1),
                ("too_many_attributes", 1),
            ]
        );
        assert_eq!(s.dropped, 8);
        assert_eq!(component::otlp::count_points(&req.resource_metrics), 1);
        let msg = s.message().unwrap();
        assert!(msg.contains("max_attribute_value_bytes = 4096"), "{msg}");
        assert!(msg.len() < 300, "the message must not quote values: {msg}");
    }

    #[test]
    fn a_resource_with_too_many_metrics_is_dropped_whole() {
        let l = PayloadLimits {
            max_metrics_per_resource: 16,
            ..PayloadLimits::default()
        };
        let mut rm = push(vec![kv_str(CLUSTER_ID, "a")], vec![vec![]]);
        let m = rm.scope_metrics[0].metrics[0].clone();
        rm.scope_metrics[0].metrics = vec![m; 17];
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![rm],
        };
        let s = metrics(&mut req, None, &l);
        assert_eq!(s.by_reason, [("too_many_metrics", 17)]);
        assert!(req.resource_metrics.is_empty());
    }

    #[test]
    fn nested_values_count_their_members() {
        let l = PayloadLimits::default();
        let member = AnyValue {
            value: Some(AnyValueKind::StringValue("x".repeat(1000))),
        };
        let array = |n: usize| KeyValue {
            key: "arr".into(),
            value: Some(AnyValue {
                value: Some(AnyValueKind::ArrayValue(
                    opentelemetry_proto::tonic::common::v1::ArrayValue {
                        values: vec![member.clone(); n],
                    },
                )),
            }),
            ..Default::default()
        };
        assert!(check_attrs(&[array(4)], 0, &l).is_ok());
        assert_eq!(
            check_attrs(&[array(5)], 0, &l).unwrap_err().0,
            "attribute_value_too_long"
        );
    }

    /// The fast path's predicate says yes exactly when the full check passes without a
    /// cluster-id key, at every limit boundary.
    #[test]
    fn the_fast_attribute_check_agrees_with_the_full_one() {
        let l = PayloadLimits {
            max_attributes_per_series: 3,
            max_attribute_key_bytes: 8,
            max_attribute_value_bytes: 16,
            ..PayloadLimits::default()
        };
        let nested = |n: usize| KeyValue {
            key: "arr".into(),
            value: Some(AnyValue {
                value: Some(AnyValueKind::ArrayValue(
                    opentelemetry_proto::tonic::common::v1::ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(AnyValueKind::StringValue("x".repeat(n))),
                            };
                            2
                        ],
                    },
                )),
            }),
            ..Default::default()
        };
        let unset = KeyValue {
            key: "none".into(),
            value: None,
            ..Default::default()
        };
        let attrs: Vec<Vec<KeyValue>> = vec![
            vec![],
            vec![kv_str("k", "v")],
            vec![kv_str(&"k".repeat(8), "v")],
            vec![kv_str(&"k".repeat(9), "v")],
            vec![kv_str("k", "v".repeat(16))],
            vec![kv_str("k", "v".repeat(17))],
            vec![kv_i64("k", 1), unset.clone()],
            vec![nested(8)],
            vec![nested(9)],
            vec![kv_str("a", "1"), kv_str("b", "2"), kv_str("c", "3")],
            vec![
                kv_str("a", "1"),
                kv_str("b", "2"),
                kv_str("c", "3"),
                kv_str("d", "4"),
            ],
            vec![kv_str("k", "v"), kv_str(CLUSTER_ID, "a")],
        ];
        let l_long_keys = PayloadLimits {
            max_attribute_key_bytes: 64,
            ..l.clone()
        };
        for limits in [&l, &l_long_keys] {
            for a in &attrs {
                for inherited in 0..3 {
                    assert_eq!(
                        attrs_pass(a, inherited, limits),
                        matches!(check_attrs(a, inherited, limits), Ok(false)),
                        "{a:?} inherited {inherited}"
                    );
                }
            }
        }
    }

    /// A clean resource takes the fast path and comes out exactly as it went in; one bad
    /// point anywhere sends it through the full pass.
    #[test]
    fn clean_resources_pass_unchanged_and_one_bad_point_is_still_found() {
        let l = PayloadLimits::default();
        let clean = push(
            vec![kv_str(CLUSTER_ID, "a"), kv_str(NODE_ID, "n1")],
            vec![vec![kv_str("ingero.node.state", "active")], vec![]],
        );
        assert!(metrics_pass(&clean, 2, &l));
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![clean.clone()],
        };
        assert_eq!(metrics(&mut req, Some("a"), &l).dropped, 0);
        assert_eq!(req.resource_metrics, std::slice::from_ref(&clean));

        let mut bad = clean.clone();
        let mut m = bad.scope_metrics[0].metrics[0].clone();
        m.name = "second".into();
        if let Some(MetricKind::Gauge(g)) = &mut m.data {
            g.data_points[1]
                .attributes
                .push(kv_str("k", "v".repeat(l.max_attribute_value_bytes + 1)));
        }
        bad.scope_metrics[0].metrics.push(m);
        assert!(!metrics_pass(&bad, 2, &l));
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![bad],
        };
        let s = metrics(&mut req, Some("a"), &l);
        assert_eq!(s.by_reason, [("attribute_value_too_long", 1)]);
        assert_eq!(component::otlp::count_points(&req.resource_metrics), 3);
    }

    /// The per-resource fast check says yes exactly when every metric passes
    /// [`check_metric`] and every point of every kind passes [`check_attrs`] with no
    /// scope key, at each limit's edge, in any scope and metric position.
    #[test]
    fn the_fast_metric_check_agrees_with_the_full_checks_at_every_edge() {
        use opentelemetry_proto::tonic::metrics::v1::{
            ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
            HistogramDataPoint, Metric, NumberDataPoint, ScopeMetrics, Sum, Summary,
            SummaryDataPoint,
        };
        let l = PayloadLimits {
            max_attributes_per_series: 3,
            max_attribute_key_bytes: 8,
            max_attribute_value_bytes: 16,
            max_metric_name_bytes: 10,
            max_metric_unit_bytes: 4,
            max_metric_description_bytes: 12,
            ..PayloadLimits::default()
        };
        let attr_sets: Vec<Vec<KeyValue>> = vec![
            vec![],
            vec![kv_str(&"k".repeat(8), "v".repeat(16))],
            vec![kv_str(&"k".repeat(9), "v")],
            vec![kv_str("k", "v".repeat(17))],
            vec![kv_str("a", "1"), kv_str("b", "2")],
            vec![kv_str("a", "1"), kv_str("b", "2"), kv_str("c", "3")],
            vec![kv_str("k", "v"), kv_str(CLUSTER_ID, "a")],
            vec![kv_str("k", "v"), kv_str("ingero_cluster_id", "a")],
        ];
        let kinds = |attrs: &Vec<KeyValue>| -> Vec<MetricKind> {
            let a = || attrs.clone();
            vec![
                MetricKind::Gauge(Gauge {
                    data_points: vec![
                        NumberDataPoint::default(),
                        NumberDataPoint {
                            attributes: a(),
                            ..Default::default()
                        },
                    ],
                }),
                MetricKind::Sum(Sum {
                    data_points: vec![NumberDataPoint {
                        attributes: a(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                MetricKind::Histogram(Histogram {
                    data_points: vec![HistogramDataPoint {
                        attributes: a(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                MetricKind::ExponentialHistogram(ExponentialHistogram {
                    data_points: vec![ExponentialHistogramDataPoint {
                        attributes: a(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                MetricKind::Summary(Summary {
                    data_points: vec![SummaryDataPoint {
                        attributes: a(),
                        ..Default::default()
                    }],
                }),
            ]
        };
        let metric = |name: usize, unit: usize, desc: usize, data: Option<MetricKind>| Metric {
            name: "n".repeat(name),
            unit: "u".repeat(unit),
            description: "d".repeat(desc),
            data,
            ..Default::default()
        };
        let clean = || metric(3, 1, 0, Some(kinds(&vec![])[0].clone()));
        // What the full checks say of a resource's metrics.
        let full = |rm: &component::ResourceMetrics, inherited: usize| {
            rm.scope_metrics.iter().flat_map(|sm| &sm.metrics).all(|m| {
                let attrs: Vec<&Vec<KeyValue>> = match &m.data {
                    Some(MetricKind::Gauge(g)) => {
                        g.data_points.iter().map(|p| &p.attributes).collect()
                    }
                    Some(MetricKind::Sum(s)) => {
                        s.data_points.iter().map(|p| &p.attributes).collect()
                    }
                    Some(MetricKind::Histogram(h)) => {
                        h.data_points.iter().map(|p| &p.attributes).collect()
                    }
                    Some(MetricKind::ExponentialHistogram(h)) => {
                        h.data_points.iter().map(|p| &p.attributes).collect()
                    }
                    Some(MetricKind::Summary(s)) => {
                        s.data_points.iter().map(|p| &p.attributes).collect()
                    }
                    None => vec![],
                };
                check_metric(m, &l).is_ok()
                    && attrs
                        .iter()
                        .all(|a| matches!(check_attrs(a, inherited, &l), Ok(false)))
            })
        };
        let resource = |last: Metric| component::ResourceMetrics {
            scope_metrics: vec![
                ScopeMetrics {
                    metrics: vec![clean()],
                    ..Default::default()
                },
                ScopeMetrics {
                    metrics: vec![clean(), last],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut cases = vec![];
        for (name, unit, desc) in [(10, 4, 12), (11, 1, 0), (3, 5, 0), (3, 1, 13)] {
            cases.push(resource(metric(name, unit, desc, None)));
        }
        for attrs in &attr_sets {
            for kind in kinds(attrs) {
                cases.push(resource(metric(10, 4, 12, Some(kind))));
            }
        }
        let (mut yes, mut no) = (0, 0);
        for rm in &cases {
            for inherited in 0..=3 {
                let want = full(rm, inherited);
                assert_eq!(
                    metrics_pass(rm, inherited, &l),
                    want,
                    "{rm:?} inherited {inherited}"
                );
                if want { yes += 1 } else { no += 1 }
            }
        }
        // Both answers occur, for every kind.
        assert!(yes > 20 && no > 60, "{yes} {no}");
    }

    #[test]
    fn look_alike_and_control_node_ids_are_dropped() {
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![
                push(
                    vec![kv_str(CLUSTER_ID, "a"), kv_str(NODE_ID, "n1")],
                    vec![vec![]],
                ),
                push(
                    vec![kv_str(CLUSTER_ID, "a"), kv_str(NODE_ID, "n1\u{202E}")],
                    vec![vec![]],
                ),
                push(
                    vec![kv_str(CLUSTER_ID, "a"), kv_str(NODE_ID, "n\r1")],
                    vec![vec![]],
                ),
                push(
                    vec![kv_str(CLUSTER_ID, "a"), kv_i64(NODE_ID, 1)],
                    vec![vec![]],
                ),
                push(vec![kv_str(CLUSTER_ID, "a\u{200B}")], vec![vec![]]),
            ],
        };
        let s = metrics(&mut req, None, &PayloadLimits::default());
        assert_eq!(
            s.by_reason,
            [("node_id_invalid", 3), ("cluster_id_invalid", 1)]
        );
        assert_eq!(req.resource_metrics.len(), 1);
    }

    #[test]
    fn traces_and_logs_lose_only_their_refused_resources() {
        use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
        let res = |attrs: Vec<KeyValue>| {
            Some(Resource {
                attributes: attrs,
                ..Default::default()
            })
        };
        let ok = || res(vec![kv_str(CLUSTER_ID, "a")]);
        let alias = || res(vec![kv_str("ingero_cluster_id", "a")]);
        let conflict = || {
            res(vec![
                kv_str(CLUSTER_ID, "a"),
                kv_str("ingero_cluster_id", "b"),
            ])
        };
        let spans = |resource: Option<Resource>, n: usize| ResourceSpans {
            resource,
            scope_spans: vec![ScopeSpans {
                spans: vec![Span::default(); n],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut req = ExportTraceServiceRequest {
            resource_spans: vec![
                spans(ok(), 2),
                spans(conflict(), 3),
                spans(None, 1),
                spans(res(vec![kv_i64(CLUSTER_ID, 7)]), 4),
                spans(alias(), 1),
            ],
        };
        let s = traces(&mut req);
        assert_eq!(s.dropped, 7);
        assert_eq!(
            s.by_reason,
            [("cluster_id_conflict", 3), ("cluster_id_not_string", 4)]
        );
        let msg = s.message_of("span(s)").unwrap();
        assert!(msg.starts_with("7 span(s) refused"), "{msg}");
        assert!(msg.contains("resource 1"), "{msg}");
        assert_eq!(req.resource_spans.len(), 3);
        // The alias became the canonical attribute, as for metrics.
        let last = req.resource_spans[2].resource.as_ref().unwrap();
        assert_eq!(get_str(&last.attributes, CLUSTER_ID), Some("a"));

        let logs_of = |resource: Option<Resource>, n: usize| ResourceLogs {
            resource,
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord::default(); n],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut req = ExportLogsServiceRequest {
            resource_logs: vec![logs_of(conflict(), 2), logs_of(ok(), 5)],
        };
        let s = logs(&mut req);
        assert_eq!(s.dropped, 2);
        assert_eq!(s.by_reason, [("cluster_id_conflict", 2)]);
        assert_eq!(req.resource_logs.len(), 1);
        assert!(
            traces(&mut ExportTraceServiceRequest::default())
                .first
                .is_none()
        );
    }

    #[test]
    fn a_resource_without_a_cluster_is_charged_to_the_requests() {
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![
                push(vec![kv_str("ingero.node.id", "n1")], vec![vec![]]),
                push(vec![kv_str(CLUSTER_ID, "a")], vec![vec![]]),
            ],
        };
        let s = metrics(&mut req, Some("a"), &PayloadLimits::default());
        assert_eq!(s.dropped, 0);
        for rm in &req.resource_metrics {
            let ids: Vec<_> = component::otlp::resource_attrs(rm)
                .iter()
                .filter(|kv| kv.key == CLUSTER_ID)
                .collect();
            assert_eq!(ids.len(), 1, "{rm:?}");
            assert_eq!(
                get_str(component::otlp::resource_attrs(rm), CLUSTER_ID),
                Some("a")
            );
        }
        // Without a request cluster there is nothing to charge it to: left as it is.
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![push(vec![kv_str("ingero.node.id", "n1")], vec![vec![]])],
        };
        metrics(&mut req, None, &PayloadLimits::default());
        assert_eq!(
            get_str(
                component::otlp::resource_attrs(&req.resource_metrics[0]),
                CLUSTER_ID
            ),
            None
        );
    }

    /// A scope of the test's own, to show the screen takes its key and rules from the
    /// registered scope and from nothing else.
    struct TenantScope;

    const TENANT: ScopeKey = ScopeKey::new("acme.tenant", "acme_tenant");

    impl RequestScope for TenantScope {
        fn name(&self) -> &'static str {
            "tenant"
        }
        fn key(&self) -> Option<&ScopeKey> {
            Some(&TENANT)
        }
        fn request_scope<'a>(
            &self,
            _: component::scope::ScopeSource<'a>,
        ) -> Result<Option<std::borrow::Cow<'a, str>>, String> {
            Ok(None)
        }
        fn validate_id(&self, id: &str) -> Result<(), &'static str> {
            if id.is_empty() { Err("empty") } else { Ok(()) }
        }
        fn max_id_len(&self) -> usize {
            64
        }
        fn settle_resource(
            &self,
            attrs: &mut Vec<KeyValue>,
        ) -> Result<bool, component::scope::ScopeRefusal> {
            let n = attrs.iter().filter(|kv| TENANT.matches(&kv.key)).count();
            if n > 1 {
                return Err(component::scope::ScopeRefusal {
                    reason: "tenant_conflict",
                    message: "two tenants".into(),
                });
            }
            Ok(n == 1)
        }
        fn settle_point(
            &self,
            attrs: &mut Vec<KeyValue>,
            scope: Option<&str>,
        ) -> Result<(), component::scope::ScopeRefusal> {
            attrs.retain(|kv| {
                !TENANT.matches(&kv.key) || get_str(std::slice::from_ref(kv), &kv.key) == scope
            });
            Ok(())
        }
    }

    #[test]
    fn the_screen_follows_the_registered_scope() {
        let rm = |res: Vec<KeyValue>, pts: Vec<Vec<KeyValue>>| push(res, pts);
        // Fleet's cluster attributes mean nothing to this scope: kept, never refused.
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![
                rm(
                    vec![kv_str(CLUSTER_ID, "a"), kv_str(CLUSTER_ID, "b")],
                    vec![vec![kv_str(CLUSTER_ID, "c")]],
                ),
                rm(
                    vec![kv_str("acme.tenant", "t1"), kv_str("acme_tenant", "t2")],
                    vec![vec![]],
                ),
                rm(
                    vec![kv_i64(NODE_ID, 1)],
                    vec![vec![kv_str("acme-tenant", "x")]],
                ),
            ],
        };
        let s = super::metrics(
            &mut req,
            Some("t9"),
            &PayloadLimits::default(),
            &TenantScope,
        );
        assert_eq!(s.by_reason, [("tenant_conflict", 1)]);
        assert_eq!(s.first.as_deref(), Some("resource 1: two tenants"));
        assert_eq!(req.resource_metrics.len(), 2);
        let first = component::otlp::resource_attrs(&req.resource_metrics[0]);
        assert_eq!(
            first.len(),
            3,
            "untouched, and charged to the request's tenant"
        );
        assert_eq!(TENANT.of(first), Some("t9"));
        // The point's alias of another tenant was settled away by the scope.
        let last = &req.resource_metrics[1];
        let Some(MetricKind::Gauge(g)) = &last.scope_metrics[0].metrics[0].data else {
            panic!("{last:?}");
        };
        assert!(g.data_points[0].attributes.is_empty(), "{g:?}");

        // Without a scope nothing is settled, stamped or refused.
        let mut req = ExportMetricsServiceRequest {
            resource_metrics: vec![rm(
                vec![
                    kv_str(CLUSTER_ID, "a"),
                    kv_i64(CLUSTER_ID, 7),
                    kv_i64(NODE_ID, 1),
                ],
                vec![vec![kv_str(CLUSTER_ID, "z")]],
            )],
        };
        let before = req.clone();
        let s = super::metrics(
            &mut req,
            Some("a"),
            &PayloadLimits::default(),
            &component::scope::NoScope,
        );
        assert_eq!(s.dropped, 0);
        assert_eq!(req, before);
        let mut t = ExportTraceServiceRequest::default();
        assert_eq!(super::traces(&mut t, &component::scope::NoScope).dropped, 0);
    }
}
