//! Small helpers over the OTLP prost types: attribute lookup and construction, and
//! numeric data-point values. Everything here is allocation-free on the read side.

pub use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
pub use opentelemetry_proto::tonic::common::v1::{
    AnyValue, InstrumentationScope, KeyValue, any_value::Value as AnyValueKind,
};
pub use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, MetricsData, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data as MetricKind, number_data_point::Value as NumberValue,
};
pub use opentelemetry_proto::tonic::resource::v1::Resource;

/// The first attribute with this key, if any.
pub fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValueKind> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

/// A string attribute. Non-string values are not coerced.
pub fn get_str<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match find(attrs, key)? {
        AnyValueKind::StringValue(s) => Some(s.as_str()),
        _ => None,
    }
}

/// An integer attribute; also accepts a double with an integral value and a decimal string,
/// since JSON producers differ on how they spell integers.
pub fn get_i64(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match find(attrs, key)? {
        AnyValueKind::IntValue(i) => Some(*i),
        AnyValueKind::DoubleValue(d) if d.fract() == 0.0 && d.is_finite() && d.abs() < 9.0e15 => {
            Some(*d as i64)
        }
        AnyValueKind::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A floating-point attribute; integers are widened.
pub fn get_f64(attrs: &[KeyValue], key: &str) -> Option<f64> {
    match find(attrs, key)? {
        AnyValueKind::DoubleValue(d) => Some(*d),
        AnyValueKind::IntValue(i) => Some(*i as f64),
        AnyValueKind::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Resource attributes of a `ResourceMetrics` (empty when the resource is absent).
pub fn resource_attrs(rm: &ResourceMetrics) -> &[KeyValue] {
    rm.resource
        .as_ref()
        .map(|r| r.attributes.as_slice())
        .unwrap_or(&[])
}

/// The numeric value of a data point as f64 (`asDouble` or `asInt`), if set.
pub fn point_value(dp: &NumberDataPoint) -> Option<f64> {
    match dp.value? {
        NumberValue::AsDouble(d) => Some(d),
        NumberValue::AsInt(i) => Some(i as f64),
    }
}

/// The number data points of a gauge or sum metric (empty for other kinds).
pub fn number_points(m: &Metric) -> &[NumberDataPoint] {
    match &m.data {
        Some(MetricKind::Gauge(g)) => &g.data_points,
        Some(MetricKind::Sum(s)) => &s.data_points,
        _ => &[],
    }
}

/// Count of data points of every kind in a batch (what otelcol calls "metric points").
pub fn count_points(rms: &[ResourceMetrics]) -> u64 {
    let mut n = 0u64;
    for rm in rms {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                n += match &m.data {
                    Some(MetricKind::Gauge(g)) => g.data_points.len(),
                    Some(MetricKind::Sum(s)) => s.data_points.len(),
                    Some(MetricKind::Histogram(h)) => h.data_points.len(),
                    Some(MetricKind::ExponentialHistogram(h)) => h.data_points.len(),
                    Some(MetricKind::Summary(s)) => s.data_points.len(),
                    None => 0,
                } as u64;
            }
        }
    }
    n
}

/// Build a string attribute.
pub fn kv_str(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(AnyValueKind::StringValue(value.into())),
        }),
    }
}

/// Build an integer attribute.
pub fn kv_i64(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(AnyValueKind::IntValue(value)),
        }),
    }
}

/// Build a double attribute.
pub fn kv_f64(key: &str, value: f64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(AnyValueKind::DoubleValue(value)),
        }),
    }
}

/// Set (replace or append) a string attribute in place.
pub fn set_str(attrs: &mut Vec<KeyValue>, key: &str, value: &str) {
    if let Some(kv) = attrs.iter_mut().find(|kv| kv.key == key) {
        kv.value = Some(AnyValue {
            value: Some(AnyValueKind::StringValue(value.to_string())),
        });
    } else {
        attrs.push(kv_str(key, value));
    }
}

/// A gauge metric with double points.
pub fn gauge_f64(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        data: Some(MetricKind::Gauge(Gauge {
            data_points: points,
        })),
        ..Default::default()
    }
}

/// A double data point.
pub fn point_f64(attrs: Vec<KeyValue>, time_unix_nano: u64, value: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        time_unix_nano,
        value: Some(NumberValue::AsDouble(value)),
        ..Default::default()
    }
}

/// Wrap metrics under one resource and one scope.
pub fn resource_metrics(
    resource_attrs: Vec<KeyValue>,
    scope_name: &str,
    metrics: Vec<Metric>,
) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: resource_attrs,
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: Some(InstrumentationScope {
                name: scope_name.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                ..Default::default()
            }),
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_getters_coerce_only_what_producers_really_send() {
        let attrs = vec![
            kv_str("s", "x"),
            kv_i64("i", 7),
            kv_f64("d", 2.0),
            kv_f64("frac", 2.5),
            kv_str("istr", " 42 "),
        ];
        assert_eq!(get_str(&attrs, "s"), Some("x"));
        assert_eq!(get_str(&attrs, "i"), None);
        assert_eq!(get_i64(&attrs, "i"), Some(7));
        assert_eq!(get_i64(&attrs, "d"), Some(2));
        assert_eq!(get_i64(&attrs, "frac"), None);
        assert_eq!(get_i64(&attrs, "istr"), Some(42));
        assert_eq!(get_f64(&attrs, "i"), Some(7.0));
        assert_eq!(get_f64(&attrs, "missing"), None);
    }

    #[test]
    fn set_str_replaces_or_appends() {
        let mut attrs = vec![kv_str("a", "1")];
        set_str(&mut attrs, "a", "2");
        set_str(&mut attrs, "b", "3");
        assert_eq!(attrs.len(), 2);
        assert_eq!(get_str(&attrs, "a"), Some("2"));
        assert_eq!(get_str(&attrs, "b"), Some("3"));
    }

    #[test]
    fn counts_points_of_every_kind() {
        let rm = resource_metrics(
            vec![],
            "t",
            vec![
                gauge_f64(
                    "a",
                    "1",
                    vec![point_f64(vec![], 1, 0.5), point_f64(vec![], 2, 0.6)],
                ),
                gauge_f64("b", "1", vec![point_f64(vec![], 1, 0.5)]),
            ],
        );
        assert_eq!(count_points(&[rm.clone(), rm]), 6);
    }
}
