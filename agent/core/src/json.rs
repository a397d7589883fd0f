//! The spec's OTLP/JSON shape (section 1.2), rendered from the prost types.
//!
//! lowerCamelCase keys in the Go agent's field order; `timeUnixNano` as a decimal string;
//! `asInt` / `intValue` as JSON numbers; `aggregationTemporality` as the integer; data-point
//! `attributes` omitted when empty; no `startTimeUnixNano`.

use component::otlp::{
    AnyValueKind, ExportMetricsServiceRequest, KeyValue, MetricKind, NumberDataPoint, NumberValue,
};
use serde::Serialize;

#[derive(Serialize)]
struct Request<'a> {
    #[serde(rename = "resourceMetrics")]
    resource_metrics: Vec<ResourceMetrics<'a>>,
}

#[derive(Serialize)]
struct ResourceMetrics<'a> {
    resource: Resource<'a>,
    #[serde(rename = "scopeMetrics")]
    scope_metrics: Vec<ScopeMetrics<'a>>,
}

#[derive(Serialize)]
struct Resource<'a> {
    attributes: Vec<Attr<'a>>,
}

#[derive(Serialize)]
struct ScopeMetrics<'a> {
    scope: Scope<'a>,
    metrics: Vec<Metric<'a>>,
}

#[derive(Serialize)]
struct Scope<'a> {
    name: &'a str,
    version: &'a str,
}

#[derive(Serialize)]
struct Metric<'a> {
    name: &'a str,
    unit: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    gauge: Option<Points<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum: Option<SumData<'a>>,
}

#[derive(Serialize)]
struct Points<'a> {
    #[serde(rename = "dataPoints")]
    data_points: Vec<Point<'a>>,
}

#[derive(Serialize)]
struct SumData<'a> {
    #[serde(rename = "dataPoints")]
    data_points: Vec<Point<'a>>,
    #[serde(rename = "aggregationTemporality")]
    aggregation_temporality: i32,
    #[serde(rename = "isMonotonic")]
    is_monotonic: bool,
}

#[derive(Serialize)]
struct Point<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    attributes: Vec<Attr<'a>>,
    #[serde(rename = "timeUnixNano")]
    time_unix_nano: String,
    #[serde(rename = "asDouble", skip_serializing_if = "Option::is_none")]
    as_double: Option<f64>,
    #[serde(rename = "asInt", skip_serializing_if = "Option::is_none")]
    as_int: Option<i64>,
}

#[derive(Serialize)]
struct Attr<'a> {
    key: &'a str,
    value: Value<'a>,
}

#[derive(Serialize)]
enum Value<'a> {
    #[serde(rename = "stringValue")]
    Str(&'a str),
    #[serde(rename = "intValue")]
    Int(i64),
    #[serde(rename = "doubleValue")]
    Double(f64),
    #[serde(rename = "boolValue")]
    Bool(bool),
}

fn attrs(kvs: &[KeyValue]) -> Vec<Attr<'_>> {
    kvs.iter()
        .filter_map(|kv| {
            let v = match kv.value.as_ref()?.value.as_ref()? {
                AnyValueKind::StringValue(s) => Value::Str(s),
                AnyValueKind::IntValue(i) => Value::Int(*i),
                AnyValueKind::DoubleValue(d) => Value::Double(*d),
                AnyValueKind::BoolValue(b) => Value::Bool(*b),
                // The agent never builds other kinds.
                _ => return None,
            };
            Some(Attr {
                key: &kv.key,
                value: v,
            })
        })
        .collect()
}

fn points(dps: &[NumberDataPoint]) -> Vec<Point<'_>> {
    dps.iter()
        .map(|p| Point {
            attributes: attrs(&p.attributes),
            time_unix_nano: p.time_unix_nano.to_string(),
            as_double: match p.value {
                Some(NumberValue::AsDouble(d)) => Some(d),
                _ => None,
            },
            as_int: match p.value {
                Some(NumberValue::AsInt(i)) => Some(i),
                _ => None,
            },
        })
        .collect()
}

/// Render a request as the spec's JSON.
pub fn encode(req: &ExportMetricsServiceRequest) -> Result<Vec<u8>, serde_json::Error> {
    let r = Request {
        resource_metrics: req
            .resource_metrics
            .iter()
            .map(|rm| ResourceMetrics {
                resource: Resource {
                    attributes: rm
                        .resource
                        .as_ref()
                        .map(|r| attrs(&r.attributes))
                        .unwrap_or_default(),
                },
                scope_metrics: rm
                    .scope_metrics
                    .iter()
                    .map(|sm| ScopeMetrics {
                        scope: Scope {
                            name: sm.scope.as_ref().map_or("", |s| s.name.as_str()),
                            version: sm.scope.as_ref().map_or("", |s| s.version.as_str()),
                        },
                        metrics: sm
                            .metrics
                            .iter()
                            .map(|m| {
                                let (gauge, sum) = match &m.data {
                                    Some(MetricKind::Gauge(g)) => (
                                        Some(Points {
                                            data_points: points(&g.data_points),
                                        }),
                                        None,
                                    ),
                                    Some(MetricKind::Sum(s)) => (
                                        None,
                                        Some(SumData {
                                            data_points: points(&s.data_points),
                                            aggregation_temporality: s.aggregation_temporality,
                                            is_monotonic: s.is_monotonic,
                                        }),
                                    ),
                                    _ => (None, None),
                                };
                                Metric {
                                    name: &m.name,
                                    unit: &m.unit,
                                    gauge,
                                    sum,
                                }
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    };
    serde_json::to_vec(&r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::core::StragglerEmission;
    use crate::health::mode::DetectionMode;
    use crate::health::state::NodeState;
    use crate::payload::{CgroupSeries, HealthContext, health_request, straggler_request};
    use component::Timestamp;

    /// Golden file: the exact bytes of a health push with every optional part present.
    #[test]
    fn health_push_json_matches_golden() {
        let id = crate::payload::tests::identity();
        let cg = [CgroupSeries {
            cgroup_path_hash: "0123456789abcdef".into(),
            kernel_launches: 12,
            cpu_stall_nanos: 34,
            memcpy_bytes: vec![("h2d", 56)],
        }];
        let gpu = crate::payload::GpuInfo {
            model: "NVIDIA H100 80GB HBM3".into(),
            count: 8,
        };
        let ctx = HealthContext {
            identity: &id,
            provider: Some("aws"),
            gpu: Some(&gpu),
            per_cgroup: &cg,
            now: Timestamp::from_nanos(1_779_185_472_000_000_001),
        };
        let req = health_request(&crate::payload::tests::report(NodeState::Active), &ctx).unwrap();
        let got = String::from_utf8(encode(&req).unwrap()).unwrap();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/golden/health_push.json"
        );
        if std::env::var("INGERO_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
            std::fs::write(path, format!("{got}\n")).unwrap();
        }
        let golden = std::fs::read_to_string(path).unwrap();
        assert_eq!(got, golden.trim());
    }

    #[test]
    fn straggler_push_json_shape() {
        let e = StragglerEmission {
            straggler: false,
            edge: true,
            score: 0.95,
            threshold: 0.88,
            mode: DetectionMode::Fleet,
            dominant_signal: "unknown",
        };
        let mut id = crate::payload::tests::identity();
        id.world_size = 0;
        let req = straggler_request(&id, &e, "9b2c", None, Timestamp::from_secs(1));
        let v: serde_json::Value = serde_json::from_slice(&encode(&req).unwrap()).unwrap();
        let p = &v["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][0];
        assert_eq!(p["timeUnixNano"], "1000000000");
        assert_eq!(p["asInt"], 0);
        assert_eq!(p["attributes"][1]["value"]["doubleValue"], 0.88);
        assert_eq!(p["attributes"][4]["key"], "ingero.event.id");
        assert_eq!(
            v["resourceMetrics"][0]["scopeMetrics"][0]["scope"]["version"],
            "0.10.0"
        );
        assert_eq!(
            v["resourceMetrics"][0]["resource"]["attributes"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }
}
