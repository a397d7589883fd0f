//! Hand-written fixtures for the OTLP/JSON metrics decoder, each checked against the
//! generic serde path (`old`) where the two must agree. Property tests against the same
//! path are in `collector-host/tests/it/otlp_json_differential.rs`.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyKind;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    Metric, NumberDataPoint, exemplar, metric::Data, number_data_point,
};

use super::{MAX_ANY_VALUE_DEPTH, decode_metrics};
use testkit::json_scalar_spans as scalar_spans;

fn new(body: &str) -> Result<ExportMetricsServiceRequest, String> {
    decode_metrics(body.as_bytes()).map_err(|e| e.to_string())
}

fn old(body: &str) -> Result<ExportMetricsServiceRequest, String> {
    serde_json::from_str(body).map_err(|e| e.to_string())
}

/// Both paths accept `body` and agree; returns the message.
fn same(body: &str) -> ExportMetricsServiceRequest {
    let n = new(body).unwrap_or_else(|e| panic!("new path refused {body}: {e}"));
    let o = old(body).unwrap_or_else(|e| panic!("old path refused {body}: {e}"));
    assert!(equal(&n, &o), "paths disagree on {body}:\n{n:?}\n{o:?}");
    n
}

/// Equal, with NaN equal to itself (same bits on the wire).
fn equal(a: &ExportMetricsServiceRequest, b: &ExportMetricsServiceRequest) -> bool {
    use prost::Message;
    a == b || a.encode_to_vec() == b.encode_to_vec()
}

/// A request with one metric holding `metric_json` (the members after `"name":"m"`).
fn one_metric(metric_json: &str) -> String {
    format!(
        r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{{"name":"m",{metric_json}}}]}}]}}]}}"#
    )
}

/// A request with one gauge point holding `point_json`.
fn one_point(point_json: &str) -> String {
    one_metric(&format!(r#""gauge":{{"dataPoints":[{{{point_json}}}]}}"#))
}

/// A request whose resource has one attribute with value `value_json`.
fn one_attr(value_json: &str) -> String {
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"k","value":{value_json}}}]}}}}]}}"#
    )
}

fn metric(req: &ExportMetricsServiceRequest) -> &Metric {
    &req.resource_metrics[0].scope_metrics[0].metrics[0]
}

fn point(req: &ExportMetricsServiceRequest) -> &NumberDataPoint {
    match &metric(req).data {
        Some(Data::Gauge(g)) => &g.data_points[0],
        other => panic!("not a gauge: {other:?}"),
    }
}

fn attr(req: &ExportMetricsServiceRequest) -> &KeyValue {
    &req.resource_metrics[0]
        .resource
        .as_ref()
        .expect("resource")
        .attributes[0]
}

#[test]
fn agent_pushes_decode_exactly_as_before() {
    let pushes = [
        testkit::AgentPush::new("prod", "gpu-node-01", 0.92).to_json(),
        testkit::AgentPush::new("prod", "gpu-node-01", 0.92)
            .gpu("NVIDIA H100 80GB HBM3", 8)
            .world(4, 1)
            .provider("aws")
            .state("calibrating")
            .to_json(),
        {
            let mut p = testkit::AgentPush::new("c", "n", 0.4);
            p.with_cgroup_sums = true;
            p.to_json()
        },
        testkit::AgentPush::new("c", "n", 0.4).straggler_event_json(1, 0.81, "0b9c6c1e"),
        testkit::nccl_export_json(
            Some("c"),
            "n",
            &[testkit::NcclPoint::all_reduce(
                "ab12",
                3,
                8,
                12.5,
                1_763_769_600_000_000_000,
            )],
        ),
    ];
    for body in &pushes {
        let req = same(body);
        assert_eq!(req.resource_metrics, testkit::json_to_proto(body), "{body}");
    }
}

#[test]
fn int64_as_strings_or_numbers() {
    let a = same(&one_point(
        r#""timeUnixNano":"1700000000000000000","asInt":"-42""#,
    ));
    let b = same(&one_point(
        r#""timeUnixNano":1700000000000000000,"asInt":-42"#,
    ));
    assert_eq!(a, b);
    assert_eq!(point(&a).time_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(point(&a).value, Some(number_data_point::Value::AsInt(-42)));
    let max = same(&one_point(
        r#""timeUnixNano":"18446744073709551615","startTimeUnixNano":18446744073709551615"#,
    ));
    assert_eq!(point(&max).time_unix_nano, u64::MAX);
    assert_eq!(point(&max).start_time_unix_nano, u64::MAX);
    // Rust's integer parser, like the old path: a leading '+' is fine.
    assert_eq!(
        point(&same(&one_point(r#""timeUnixNano":"+7""#))).time_unix_nano,
        7
    );
    let i = same(&one_attr(r#"{"intValue":"-9223372036854775808"}"#));
    assert_eq!(
        attr(&i).value,
        Some(AnyValue {
            value: Some(AnyKind::IntValue(i64::MIN))
        })
    );
}

#[test]
fn out_of_range_and_fractional_integers_are_errors() {
    for v in [
        r#""18446744073709551616""#,
        "18446744073709551616",
        "-1",
        r#""-1""#,
        "1.5",
        "1e3",
        r#""0x10""#,
        r#"" 5""#,
        "true",
        "[]",
    ] {
        let body = one_attr(&format!(r#"{{"intValue":{v}}}"#));
        // intValue is an i64: 18446744073709551616 and 1.5 fail, -1 passes.
        if v == "-1" || v == r#""-1""# {
            same(&body);
        } else {
            assert!(new(&body).is_err(), "intValue {v}");
            assert!(old(&body).is_err(), "old intValue {v}");
        }
        let body = one_point(&format!(r#""timeUnixNano":{v}"#));
        assert!(new(&body).is_err(), "timeUnixNano {v}");
    }
    let body = one_attr(r#"{"intValue":"9223372036854775808"}"#);
    assert!(new(&body).is_err() && old(&body).is_err());
}

#[test]
fn snake_case_names_are_the_same_fields() {
    let camel = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"a","value":{"stringValue":"x"}},
        {"key":"b","value":{"arrayValue":{"values":[{"intValue":"1"},{"kvlistValue":{"values":[{"key":"c","value":{"bytesValue":"AQI="}}]}}]}}}],
        "droppedAttributesCount":2},"schemaUrl":"s",
      "scopeMetrics":[{"scope":{"name":"sc","droppedAttributesCount":1},"schemaUrl":"t","metrics":[
        {"name":"g","gauge":{"dataPoints":[{"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":0.5,
          "exemplars":[{"filteredAttributes":[{"key":"e","value":{"boolValue":true}}],"timeUnixNano":"3","spanId":"0102030405060708","traceId":"0102030405060708090a0b0c0d0e0f10","asInt":"4"}]}]}},
        {"name":"s","sum":{"dataPoints":[{"timeUnixNano":"2","asInt":"5"}],"aggregationTemporality":2,"isMonotonic":true}},
        {"name":"h","histogram":{"dataPoints":[{"count":"3","sum":1.5,"bucketCounts":["1","2"],"explicitBounds":[1.0],"min":0.1,"max":2.0}],"aggregationTemporality":1}},
        {"name":"e","exponentialHistogram":{"dataPoints":[{"count":"3","scale":2,"zeroCount":"1","zeroThreshold":0.01,
          "positive":{"offset":-1,"bucketCounts":["1","1"]}}],"aggregationTemporality":2}},
        {"name":"q","summary":{"dataPoints":[{"count":"2","sum":3.0,"quantileValues":[{"quantile":0.5,"value":1.0}]}]}}]}]}]}"#;
    let snake = camel
        .replace("resourceMetrics", "resource_metrics")
        .replace("droppedAttributesCount", "dropped_attributes_count")
        .replace("schemaUrl", "schema_url")
        .replace("scopeMetrics", "scope_metrics")
        .replace("stringValue", "string_value")
        .replace("arrayValue", "array_value")
        .replace("intValue", "int_value")
        .replace("kvlistValue", "kvlist_value")
        .replace("bytesValue", "bytes_value")
        .replace("boolValue", "bool_value")
        .replace("dataPoints", "data_points")
        .replace("startTimeUnixNano", "start_time_unix_nano")
        .replace("timeUnixNano", "time_unix_nano")
        .replace("asDouble", "as_double")
        .replace("asInt", "as_int")
        .replace("filteredAttributes", "filtered_attributes")
        .replace("spanId", "span_id")
        .replace("traceId", "trace_id")
        .replace("aggregationTemporality", "aggregation_temporality")
        .replace("isMonotonic", "is_monotonic")
        .replace("bucketCounts", "bucket_counts")
        .replace("explicitBounds", "explicit_bounds")
        .replace("exponentialHistogram", "exponential_histogram")
        .replace("zeroCount", "zero_count")
        .replace("zeroThreshold", "zero_threshold")
        .replace("quantileValues", "quantile_values");
    assert!(!snake.contains("Value\""), "every camelCase name replaced");
    let want = same(camel);
    assert_eq!(want.resource_metrics[0].scope_metrics[0].metrics.len(), 5);
    assert_eq!(new(&snake).unwrap(), want);
    // The old path skipped the snake_case names as unknown fields.
    assert_eq!(old(&snake).unwrap(), ExportMetricsServiceRequest::default());
}

#[test]
fn both_spellings_of_one_field_is_a_duplicate() {
    let body = one_point(r#""timeUnixNano":"1","time_unix_nano":"2""#);
    let e = new(&body).unwrap_err();
    assert!(e.contains("duplicate field `timeUnixNano`"), "{e}");
    let e = new(r#"{"resourceMetrics":[],"resourceMetrics":[]}"#).unwrap_err();
    assert!(e.contains("duplicate field `resourceMetrics`"), "{e}");
    assert!(old(r#"{"resourceMetrics":[],"resourceMetrics":[]}"#).is_err());
    let e =
        new(&one_attr(r#"{"stringValue":"a"}"#).replace(r#""key":"k""#, r#""key":"k","key":"j""#))
            .unwrap_err();
    assert!(e.contains("duplicate field `key`"), "{e}");
}

#[test]
fn unknown_fields_are_skipped_everywhere() {
    let junk = r#""zz":{"a":[1,{"b":null}],"c":"\u0041"},"yy":[[]],"xx":-1.5e300"#;
    let body = format!(
        r#"{{{junk},"resourceMetrics":[{{{junk},"resource":{{{junk},"attributes":[{{{junk},"key":"k","value":{{{junk},"stringValue":"v"}}}}]}},
        "scopeMetrics":[{{{junk},"scope":{{{junk},"name":"s"}},"metrics":[{{{junk},"name":"m","gauge":{{{junk},"dataPoints":[{{{junk},"asDouble":1,
        "exemplars":[{{{junk},"asInt":2}}]}}]}}}},{{"name":"h","histogram":{{"dataPoints":[{{{junk},"count":1}}]}}}},
        {{"name":"q","summary":{{"dataPoints":[{{{junk},"quantileValues":[{{{junk},"value":1}}]}}]}}}},
        {{"name":"e","exponentialHistogram":{{"dataPoints":[{{{junk},"positive":{{{junk},"offset":1}}}}]}}}}]}}]}}]}}"#
    );
    let req = same(&body);
    let clean = same(&body.replace(&format!("{junk},"), ""));
    assert_eq!(req, clean);
    assert_eq!(
        point(&req).value,
        Some(number_data_point::Value::AsDouble(1.0))
    );
    assert_eq!(
        point(&req).exemplars[0].value,
        Some(exemplar::Value::AsInt(2))
    );
    // Escaped keys are matched after unescaping, as by the old path.
    let esc = same(&one_point(r#""time\u0055nixNano":"9""#));
    assert_eq!(point(&esc).time_unix_nano, 9);
}

#[test]
fn null_is_an_absent_field() {
    let nulls = r#"{"resourceMetrics":[{"resource":{"attributes":null,"droppedAttributesCount":null,"entityRefs":null},
        "schemaUrl":null,"scopeMetrics":[{"scope":{"name":null,"version":null,"attributes":null},"schemaUrl":null,"metrics":[
        {"name":null,"description":null,"unit":null,"metadata":null,"gauge":null,"sum":{"dataPoints":[{"attributes":[{"key":null,"value":null,"keyStrindex":null}],
          "startTimeUnixNano":null,"timeUnixNano":null,"exemplars":[{"spanId":null,"traceId":null,"timeUnixNano":null,"filteredAttributes":null,"asDouble":null,"asInt":3}],
          "flags":null,"asDouble":null,"asInt":"7"}],"aggregationTemporality":null,"isMonotonic":null}},
        {"name":"h","histogram":{"dataPoints":[{"count":null,"sum":null,"bucketCounts":null,"explicitBounds":null,"min":null,"max":null}]}},
        {"name":"e","exponentialHistogram":{"dataPoints":[{"scale":null,"zeroCount":null,"positive":null,"negative":null,"zeroThreshold":null}]}},
        {"name":"q","summary":{"dataPoints":[{"sum":null,"quantileValues":[{"quantile":null,"value":null}]}]}}]}]}]}"#;
    let req = new(nulls).unwrap();
    let without = r#"{"resourceMetrics":[{"resource":{},"scopeMetrics":[{"scope":{},"metrics":[
        {"sum":{"dataPoints":[{"attributes":[{"key":""}],"exemplars":[{"asInt":3}],"asInt":"7"}]}},
        {"name":"h","histogram":{"dataPoints":[{}]}},
        {"name":"e","exponentialHistogram":{"dataPoints":[{}]}},
        {"name":"q","summary":{"dataPoints":[{"quantileValues":[{}]}]}}]}]}]}"#;
    assert_eq!(req, same(without));
    // The old path refused most of these nulls.
    assert!(old(nulls).is_err());
    // `null` message fields and AnyValue members: both paths agree.
    let r = same(r#"{"resourceMetrics":[{"resource":null,"scopeMetrics":[{"scope":null}]}]}"#);
    assert_eq!(r.resource_metrics[0].resource, None);
    let a = same(&one_attr(
        r#"{"stringValue":"x","intValue":null,"boolValue":null,"arrayValue":null,"bytesValue":null}"#,
    ));
    assert_eq!(
        attr(&a).value.as_ref().and_then(|v| v.value.clone()),
        Some(AnyKind::StringValue("x".into()))
    );
    // null is not an element of a repeated field.
    for body in [
        r#"{"resourceMetrics":[null]}"#.to_string(),
        one_point(r#""attributes":[null]"#),
        one_metric(r#""histogram":{"dataPoints":[{"bucketCounts":[null]}]}"#),
        one_metric(r#""histogram":{"dataPoints":[{"explicitBounds":[null]}]}"#),
        one_attr(r#"{"arrayValue":{"values":[null]}}"#),
    ] {
        assert!(new(&body).is_err(), "{body}");
    }
    // Nor the request itself.
    assert!(new("null").is_err() && old("null").is_err());
}

#[test]
fn empty_objects_and_omitted_fields_default() {
    assert_eq!(same("{}"), ExportMetricsServiceRequest::default());
    assert_eq!(same(" {\n} \t"), ExportMetricsServiceRequest::default());
    let r = same(
        r#"{"resourceMetrics":[{},{"resource":{},"scopeMetrics":[{},{"scope":{},"metrics":[{}]}]}]}"#,
    );
    assert_eq!(r.resource_metrics.len(), 2);
    assert_eq!(
        r.resource_metrics[1].scope_metrics[1].metrics[0],
        Metric::default()
    );
    let g = same(&one_metric(r#""gauge":{}"#));
    assert!(matches!(&metric(&g).data, Some(Data::Gauge(g)) if g.data_points.is_empty()));
    let p = same(&one_point(""));
    assert_eq!(*point(&p), NumberDataPoint::default());
    let v = same(&one_attr("{}"));
    assert_eq!(attr(&v).value, Some(AnyValue { value: None }));
    // Omitted where the old path demanded the field: Go's protojson leaves out empty
    // values, so `{"arrayValue":{}}` is how it writes an empty array.
    let empty = new(&one_attr(r#"{"arrayValue":{}}"#)).unwrap();
    assert_eq!(
        attr(&empty).value,
        Some(AnyValue {
            value: Some(AnyKind::ArrayValue(ArrayValue { values: vec![] }))
        })
    );
    assert!(old(&one_attr(r#"{"arrayValue":{}}"#)).is_err());
    let nokey =
        new(r#"{"resourceMetrics":[{"resource":{"attributes":[{"value":{"boolValue":true}}]}}]}"#)
            .unwrap();
    assert_eq!(attr(&nokey).key, "");
    let er = new(r#"{"resourceMetrics":[{"resource":{"entityRefs":[{"type":"host"}]}}]}"#).unwrap();
    let refs = &er.resource_metrics[0]
        .resource
        .as_ref()
        .unwrap()
        .entity_refs;
    assert_eq!(refs[0].r#type, "host");
    assert!(refs[0].id_keys.is_empty());
}

#[test]
fn metric_oneof_first_member_wins() {
    let r = same(&one_metric(
        r#""sum":{"isMonotonic":true},"gauge":{"dataPoints":[{}]},"summary":"not even an object""#,
    ));
    assert!(matches!(&metric(&r).data, Some(Data::Sum(s)) if s.is_monotonic));
    // Without a member, no data.
    assert_eq!(metric(&same(&one_metric(r#""unit":"1""#))).data, None);
    // A null member is absent here (the old path dropped the metric's data instead).
    let n = new(&one_metric(r#""gauge":null,"sum":{"isMonotonic":true}"#)).unwrap();
    assert!(matches!(&metric(&n).data, Some(Data::Sum(_))));
}

#[test]
fn point_value_first_member_wins_and_bad_values_leave_it_unset() {
    let v = |p: &str| point(&same(&one_point(p))).value;
    use number_data_point::Value::{AsDouble, AsInt};
    assert_eq!(v(r#""asDouble":1.5,"asInt":"x""#), Some(AsDouble(1.5)));
    assert_eq!(v(r#""asInt":2,"asDouble":1.5"#), Some(AsInt(2)));
    assert_eq!(v(r#""asDouble":3"#), Some(AsDouble(3.0)));
    assert_eq!(v(r#""asDouble":-3"#), Some(AsDouble(-3.0)));
    // Wrong types: accepted, no value (the processors refuse such a point and report it
    // as partial success), exactly as the old path.
    for bad in [
        r#""asDouble":"NaN""#,
        r#""asDouble":"1.5""#,
        r#""asDouble":true"#,
        r#""asDouble":[1,[2]]"#,
        r#""asDouble":{"a":{"b":1}}"#,
        r#""asInt":1.5"#,
        r#""asInt":"1.5""#,
        r#""asInt":9223372036854775808"#,
        r#""asInt":{}"#,
        r#""asDouble":"NaN","asInt":1"#,
    ] {
        assert_eq!(v(bad), None, "{bad}");
    }
    // The same rule for exemplars.
    let e = same(&one_point(
        r#""exemplars":[{"asInt":"x","asDouble":1},{"asDouble":2,"asInt":3}]"#,
    ));
    let ex = &point(&e).exemplars;
    assert_eq!(ex[0].value, None);
    assert_eq!(ex[1].value, Some(exemplar::Value::AsDouble(2.0)));
}

#[test]
fn special_floats_only_where_the_old_path_takes_them() {
    let q = same(&one_metric(
        r#""summary":{"dataPoints":[{"quantileValues":[{"quantile":"NaN","value":"Infinity"},{"quantile":"-Infinity","value":"2.5"},{"quantile":1,"value":"inf"}]}]}"#,
    ));
    let Some(Data::Summary(s)) = &metric(&q).data else {
        panic!("summary")
    };
    let qv = &s.data_points[0].quantile_values;
    assert!(qv[0].quantile.is_nan());
    assert_eq!(qv[0].value, f64::INFINITY);
    assert_eq!((qv[1].quantile, qv[1].value), (f64::NEG_INFINITY, 2.5));
    assert_eq!((qv[2].quantile, qv[2].value), (1.0, f64::INFINITY));
    assert!(
        new(&one_metric(
            r#""summary":{"dataPoints":[{"quantileValues":[{"value":"x"}]}]}"#
        ))
        .is_err()
    );
    // Elsewhere a double is a JSON number.
    assert!(new(&one_attr(r#"{"doubleValue":"NaN"}"#)).is_err());
    assert!(old(&one_attr(r#"{"doubleValue":"NaN"}"#)).is_err());
    let d = same(&one_attr(r#"{"doubleValue":7}"#));
    assert_eq!(
        attr(&d).value.as_ref().and_then(|v| v.value.clone()),
        Some(AnyKind::DoubleValue(7.0))
    );
}

/// The old path swallowed any error inside a metric's data (serde flatten + Option) and
/// kept the metric without data; this decoder refuses the request instead.
#[test]
fn errors_inside_metric_data_are_errors_here_and_silent_loss_there() {
    for inner in [
        r#""sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_CUMULATIVE","dataPoints":[{"asInt":1}]}"#,
        r#""histogram":{"dataPoints":[{"sum":"NaN"}]}"#,
        r#""gauge":{"dataPoints":[{"exemplars":[{"traceId":"xyz"}]}]}"#,
        r#""gauge":{"dataPoints":[{"flags":-1}]}"#,
        r#""gauge":{"dataPoints":"none"}"#,
        r#""gauge":{"dataPoints":[{"timeUnixNano":"1","timeUnixNano":"2"}]}"#,
    ] {
        let body = one_metric(inner);
        let e = new(&body).unwrap_err();
        assert!(e.contains("line 1 column"), "{e}");
        let o = old(&body).unwrap();
        assert_eq!(
            metric(&o).data,
            None,
            "old path dropped the data of {inner}"
        );
        assert_eq!(metric(&o).name, "m");
    }
}

#[test]
fn any_value_kinds_and_last_member_wins() {
    let a = same(&one_attr(
        r#"{"arrayValue":{"values":[{"stringValue":"s"},{"boolValue":false},{"intValue":3},{"doubleValue":0.25},
            {"bytesValue":"aGk="},{"kvlistValue":{"values":[{"key":"x","value":{"arrayValue":{"values":[]}}}]}},{}]}}"#,
    ));
    let Some(AnyKind::ArrayValue(arr)) = attr(&a).value.as_ref().and_then(|v| v.value.clone())
    else {
        panic!("array")
    };
    assert_eq!(arr.values.len(), 7);
    assert_eq!(
        arr.values[4].value,
        Some(AnyKind::BytesValue(b"hi".to_vec()))
    );
    let last = same(&one_attr(
        r#"{"stringValue":"a","intValue":"5","stringValueStrindex":3}"#,
    ));
    assert_eq!(
        attr(&last).value.as_ref().and_then(|v| v.value.clone()),
        Some(AnyKind::IntValue(5))
    );
    // Every member must be valid, even one a later member overrides.
    let body = one_attr(r#"{"intValue":"x","stringValue":"a"}"#);
    assert!(new(&body).is_err() && old(&body).is_err());
}

#[test]
fn bytes_fields_accept_what_the_old_path_accepts() {
    let ids = same(&one_point(
        r#""exemplars":[{"spanId":"0x0A0b0C0d0E0f1011","traceId":""}]"#,
    ));
    let e = &point(&ids).exemplars[0];
    assert_eq!(
        e.span_id,
        vec![0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11]
    );
    assert!(e.trace_id.is_empty());
    for bad in [r#""abc""#, r#""zz""#, "12", r#""0x1""#] {
        let body = one_point(&format!(r#""exemplars":[{{"spanId":{bad}}}]"#));
        assert!(new(&body).is_err(), "{bad}");
    }
    for bad in [
        "\"aGk\"",
        "\"aGl=\"",
        "\"a$==\"",
        "\"aGk=\\n\"",
        "1",
        "\"aGk=aGk=\"",
    ] {
        let body = one_attr(&format!(r#"{{"bytesValue":{bad}}}"#));
        assert!(new(&body).is_err(), "bytesValue {bad}");
        assert!(old(&body).is_err(), "old bytesValue {bad}");
    }
}

fn nested_array(levels: usize) -> String {
    let mut v = r#"{"stringValue":"leaf"}"#.to_string();
    for _ in 1..levels {
        v = format!(r#"{{"arrayValue":{{"values":[{v}]}}}}"#);
    }
    v
}

#[test]
fn any_value_nesting_is_limited() {
    let ok = new(&one_attr(&nested_array(MAX_ANY_VALUE_DEPTH))).unwrap();
    assert!(attr(&ok).value.is_some());
    assert_eq!(
        ok,
        old(&one_attr(&nested_array(MAX_ANY_VALUE_DEPTH))).unwrap()
    );
    let e = new(&one_attr(&nested_array(MAX_ANY_VALUE_DEPTH + 1))).unwrap_err();
    assert!(e.contains("nested deeper than 32 levels"), "{e}");
    // kvlistValue levels count the same (a kvlist level costs four JSON levels, so mix
    // them in below serde_json's own limit of 128).
    let kv = format!(
        r#"{{"kvlistValue":{{"values":[{{"key":"k","value":{}}}]}}}}"#,
        nested_array(MAX_ANY_VALUE_DEPTH)
    );
    assert!(new(&one_attr(&kv)).unwrap_err().contains("nested deeper"));
    // Far beyond: an error, no stack overflow.
    for body in [
        one_attr(&nested_array(5000)),
        "[".repeat(100_000),
        format!("{}{}", r#"{"a":"#.repeat(50_000), "1"),
        format!(
            r#"{{"resourceMetrics":[{}]}}"#,
            "{\"resource\":".repeat(10_000)
        ),
    ] {
        assert!(new(&body).is_err());
    }
    // Unknown fields are skipped by serde_json's iterative skipper, at any depth.
    let deep_junk = one_point(&format!(
        r#""zz":{}1{},"asInt":1"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    ));
    assert!(new(&deep_junk).is_ok());
}

#[test]
fn skipped_values_are_checked_for_syntax_only() {
    // A lone surrogate escape: refused where a string is decoded, passed where skipped.
    let decoded = one_attr(r#"{"stringValue":"\ud800"}"#);
    assert!(new(&decoded).is_err() && old(&decoded).is_err());
    let skipped = r#"{"zz":"\ud800","resourceMetrics":[]}"#;
    assert_eq!(same(skipped), ExportMetricsServiceRequest::default());
    // The old path decoded the unknown members of an AnyValue into its buffer.
    let in_any = one_attr(r#"{"zz":"\ud800","boolValue":true}"#);
    assert!(new(&in_any).is_ok());
    assert!(old(&in_any).is_err());
    // Syntax errors in skipped values are errors.
    for bad in [
        r#"{"zz":[1,}"#,
        r#"{"zz":"\x"}"#,
        r#"{"zz":01}"#,
        r#"{"zz":tru}"#,
    ] {
        assert!(new(bad).is_err(), "{bad}");
    }
}

#[test]
fn malformed_bodies_are_errors() {
    let good = testkit::AgentPush::new("c", "n", 0.9).to_json();
    for cut in 0..good.len() {
        let e = new(&good[..cut]);
        assert!(e.is_err(), "truncated at {cut}");
        assert!(old(&good[..cut]).is_err());
    }
    for body in [
        "",
        " ",
        "[]",
        "[{}]",
        "1",
        r#""x""#,
        "{} {}",
        "{}x",
        r#"{"resourceMetrics":{}}"#,
        r#"{"resourceMetrics":"x"}"#,
        r#"{"resourceMetrics":[[]]}"#,
        r#"{"resourceMetrics":[{"resource":[[],0]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":1}]}]}]}"#,
        r#"{"resourceMetrics":[{"resource":{"droppedAttributesCount":-1}}]}"#,
        r#"{"resourceMetrics":[{"resource":{"droppedAttributesCount":4294967296}}]}"#,
        r#"{"resourceMetrics":[{"resource":{"droppedAttributesCount":"1"}}]}"#,
        r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"k","value":"v"}]}}]}"#,
        r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"k","value":{"stringValue":"\ud800"}}]}}]}"#,
        "{\"resourceMetrics\":[],}",
        "{'resourceMetrics':[]}",
    ] {
        assert!(new(body).is_err(), "{body}");
    }
    // Non-UTF-8 inside a string and outside.
    let mut bad = one_attr(r#"{"stringValue":"abc"}"#).into_bytes();
    let at = bad.iter().position(|&b| b == b'b').unwrap();
    bad[at] = 0xff;
    assert!(decode_metrics(&bad).is_err());
    assert!(serde_json::from_slice::<ExportMetricsServiceRequest>(&bad).is_err());
    assert!(decode_metrics(b"\xef\xbb\xbf{}").is_err(), "BOM");
    assert!(decode_metrics(b"{\xff}").is_err());
    // Also inside a value that is skipped unread (the old path took this one).
    let skipped = b"{\"zz\":\"a\xffb\",\n \"resourceMetrics\":[]}";
    assert!(serde_json::from_slice::<ExportMetricsServiceRequest>(skipped).is_ok());
    let e = decode_metrics(skipped).unwrap_err().to_string();
    assert!(e.contains("invalid UTF-8 at line 1 column 9"), "{e}");
}

#[test]
fn errors_name_the_position() {
    let e = new("{\n  \"resourceMetrics\": [\n    {\"resource\": 5}\n  ]\n}").unwrap_err();
    assert!(e.contains("line 3 column"), "{e}");
    assert!(e.contains("Resource"), "{e}");
}

/// The marshalers' string attribute takes a shortcut; it and every near miss (which take
/// the general path) decode as the old path decodes them.
#[test]
fn plain_string_attributes_and_near_misses_decode_alike() {
    let plain = same(&one_attr(r#"{"stringValue":"v"}"#));
    assert_eq!(
        attr(&plain).value,
        Some(AnyValue {
            value: Some(AnyKind::StringValue("v".into()))
        })
    );
    for kv in [
        r#"{"key":"","value":{"stringValue":""}}"#,
        r#"{"key":"ingero.node.state","value":{"stringValue":"active"}}"#,
        r#"{"key":"k\"q","value":{"stringValue":"v"}}"#,
        r#"{"key":"k","value":{"stringValue":"v\u0041"}}"#,
        r#"{ "key":"k","value":{"stringValue":"v"}}"#,
        r#"{"key":"k","value":{"stringValue":"v"} }"#,
        r#"{"key":"k","value":{"stringValue":"v","boolValue":true}}"#,
        r#"{"key":"k","value":{"stringValue":"v"},"keyStrindex":2}"#,
        r#"{"key":"k","value":{"stringValue":"é😀"}}"#,
        r#"{"value":{"stringValue":"v"},"key":"k"}"#,
    ] {
        let body =
            format!(r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{kv},{kv}]}}}}]}}"#);
        same(&body);
    }
    for bad in [
        r#"{"key":"k","value":{"stringValue":"v"},"key":"x"}"#,
        "{\"key\":\"k\",\"value\":{\"stringValue\":\"a\u{1}\"}}",
        r#"{"key":"k","value":{"stringValue":"v"}"#,
        r#"{"key":"k","value":{"stringValue":"v"}}}"#,
    ] {
        let body = format!(r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{bad}]}}}}]}}"#);
        assert!(new(&body).is_err(), "{bad}");
        assert!(old(&body).is_err(), "old {bad}");
    }
}

/// Keys are first compared with the key at the same place in the previous object of the
/// same type. Objects that repeat the previous keys, reorder them, spell them otherwise,
/// escape them, space them, repeat them or add unknown ones decode as the old path decodes
/// them (or fail as it fails).
#[test]
fn predicted_keys_and_every_kind_of_miss_decode_alike() {
    let point = r#"{"asDouble":0.5,"attributes":[{"key":"a","value":{"stringValue":"b"}}],"timeUnixNano":"1763769600000000000"}"#;
    let metric = |name: &str, point: &str| {
        format!(r#"{{"gauge":{{"dataPoints":[{point},{point}]}},"name":"{name}","unit":"1"}}"#)
    };
    let body = |metrics: &[String]| {
        format!(
            r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{}]}}]}}]}}"#,
            metrics.join(",")
        )
    };
    let variants = [
        // Reordered.
        r#"{"timeUnixNano":"1763769600000000000","asDouble":0.5,"attributes":[]}"#,
        // Escaped key, whitespace before and after the colon, between members.
        r#"{"asDouble":0.5,"attr\u0069butes":[],"timeUnixNano" :"7"}"#,
        r#"{ "asDouble": 0.5 , "attributes":[] ,"timeUnixNano":"7"}"#,
        // Unknown key where a known one was, and a key that extends a known one.
        r#"{"asDoubleX":1,"attributes":[],"timeUnixNano":"7","asInt":3}"#,
        r#"{"asDouble":0.5,"attributesX":[],"timeUnixNano":"7"}"#,
        // Fewer and more keys than before.
        r#"{"asDouble":0.5}"#,
        r#"{}"#,
        r#"{"asDouble":0.5,"attributes":[],"timeUnixNano":"7","startTimeUnixNano":"6","flags":1,"exemplars":[]}"#,
        // Second oneof member in the predicted place of another key.
        r#"{"asDouble":0.5,"asInt":1,"timeUnixNano":"7"}"#,
    ];
    for v in variants {
        let metrics = vec![
            metric("m1", point),
            metric("m2", v),
            metric("m3", point),
            metric("m4", v),
        ];
        same(&body(&metrics));
    }
    // `null` under predicted keys is the field left out, as anywhere (the old path
    // refuses most of these `null`s, so compare with the keys omitted).
    let nulls = r#"{"asDouble":null,"attributes":null,"timeUnixNano":null,"asInt":2}"#;
    let omitted = r#"{"asInt":2}"#;
    assert_eq!(
        new(&body(&[metric("m1", point), metric("m2", nulls)])).unwrap(),
        same(&body(&[metric("m1", point), metric("m2", omitted)]))
    );
    // Metric keys reordered or spaced after a first metric primed the prediction.
    for m in [
        r#"{"name":"x","unit":"1","gauge":{"dataPoints":[]}}"#,
        r#"{"unit":"1","gauge":{"dataPoints":[]},"name":"x"}"#,
        r#"{"gauge" : {"dataPoints":[]},"name":"x","unit":"1"}"#,
        r#"{"sum":{"dataPoints":[],"isMonotonic":true},"gauge":{"dataPoints":[]},"name":"x"}"#,
        r#"{"gauge":{"dataPoints":[]},"sum":{"dataPoints":[]},"name":"x"}"#,
    ] {
        same(&body(&[
            metric("m1", point),
            m.to_string(),
            metric("m3", point),
        ]));
    }
    // Duplicates are still refused, whether the first or the second copy was predicted.
    for dup in [
        r#"{"asDouble":0.5,"attributes":[],"timeUnixNano":"7","timeUnixNano":"8"}"#,
        r#"{"asDouble":0.5,"timeUnixNano":"7","attributes":[],"timeUnixNano":"8"}"#,
        r#"{"asDouble":0.5,"attributes":[],"attributes":[]}"#,
    ] {
        let b = body(&[metric("m1", point), metric("m2", dup)]);
        let e = new(&b).unwrap_err();
        assert!(e.contains("duplicate field"), "{dup}: {e}");
    }
    let b = body(&[
        metric("m1", point),
        r#"{"gauge":{"dataPoints":[]},"name":"x","name":"y"}"#.to_string(),
    ]);
    assert!(new(&b).unwrap_err().contains("duplicate field `name`"));
    // snake_case names where camelCase was predicted: the same fields.
    let camel = new(&body(&[metric("m1", point), metric("m2", point)])).unwrap();
    let snake_point = r#"{"as_double":0.5,"attributes":[{"key":"a","value":{"stringValue":"b"}}],"time_unix_nano":"1763769600000000000"}"#;
    let snake = new(&body(&[
        metric("m1", point),
        format!(
            r#"{{"gauge":{{"data_points":[{snake_point},{snake_point}]}},"name":"m2","unit":"1"}}"#
        ),
    ]))
    .unwrap();
    assert_eq!(camel, snake);
}

/// Digit-only strings take a shortcut for 64-bit integers; it and everything that must
/// miss it decode (or fail) as the old path does.
#[test]
fn integer_strings_at_the_edges_decode_alike() {
    for t in [
        r#""1763769600000000000""#,
        r#""0000000000000000001""#,
        r#""9999999999999999999""#,
        r#""10000000000000000000""#,
        r#""18446744073709551615""#,
        r#""00000000000000000000001""#,
        r#""+1763769600000000000""#,
        r#""17637696\u00300000000000""#,
        r#""0""#,
    ] {
        same(&one_point(&format!(r#""timeUnixNano":{t},"asInt":1"#)));
    }
    // Errors here, as before this shortcut. (The old path loses the metric's data on any
    // error inside it instead; see `errors_inside_metric_data_are_errors_here_and_silent_loss_there`.)
    for bad in [
        r#""18446744073709551616""#,
        r#""99999999999999999999""#,
        r#""""#,
        r#""-1""#,
        r#"" 1""#,
        r#""1 ""#,
        r#""1.0""#,
    ] {
        let body = one_point(&format!(r#""timeUnixNano":{bad}"#));
        assert!(new(&body).is_err(), "{bad}");
    }
    for v in [
        r#""9223372036854775807""#,
        r#""-9223372036854775808""#,
        r#""0000000000000000042""#,
        r#""+42""#,
    ] {
        same(&one_attr(&format!(r#"{{"intValue":{v}}}"#)));
    }
    for bad in [r#""9223372036854775808""#, r#""18446744073709551615""#] {
        let body = one_attr(&format!(r#"{{"intValue":{bad}}}"#));
        assert!(new(&body).is_err(), "{bad}");
        assert!(old(&body).is_err(), "old {bad}");
    }
}

/// Doubles the one-rounding shortcut takes and the ones it leaves to the full parser
/// decode to the same bits as before.
#[test]
fn doubles_decode_to_the_same_bits() {
    for v in [
        "0.9",
        "0.85",
        "-0.0",
        "12.5",
        "1e22",
        "1e23",
        "1.5e-22",
        "9007199254740992.0",
        "9007199254740993.0",
        "123456789012345678.5",
        "0.30000000000000004",
        "5e-324",
        "1.7976931348623157e308",
        "2.2250738585072014e-308",
        "-7.25E+2",
    ] {
        let a = same(&one_point(&format!(r#""asDouble":{v}"#)));
        let want: f64 = v.parse().unwrap();
        match point(&a).value {
            Some(number_data_point::Value::AsDouble(d)) => {
                assert_eq!(d.to_bits(), want.to_bits(), "{v}")
            }
            ref other => panic!("{v}: {other:?}"),
        }
    }
}

/// Metrics are read into a vector sized from the bytes left; any count decodes alike.
#[test]
fn metric_counts_around_the_initial_capacity_decode_alike() {
    for n in [0, 1, 2, 15, 16, 17, 40] {
        let metrics: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"name":"m{i}","gauge":{{"dataPoints":[{{"asInt":{i}}}]}}}}"#))
            .collect();
        let body = format!(
            r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{}]}}]}}]}}"#,
            metrics.join(",")
        );
        let req = same(&body);
        assert_eq!(req.resource_metrics[0].scope_metrics[0].metrics.len(), n);
    }
}

/// The ASCII pre-check finds one high byte at any offset, in a block or in the tail, and
/// a body with multi-byte UTF-8 still decodes (through `str::from_utf8`).
#[test]
fn the_ascii_check_sees_every_byte() {
    let clean = vec![b'a'; 200];
    assert!(super::is_ascii(&clean));
    assert!(super::is_ascii(b""));
    for at in 0..clean.len() {
        for high in [0x80u8, 0xc3, 0xff] {
            let mut b = clean.clone();
            b[at] = high;
            assert!(!super::is_ascii(&b), "byte {high:#x} at {at}");
        }
    }
    let body = one_attr(r#"{"stringValue":"ünïcödé-クラスタ"}"#);
    assert!(!super::is_ascii(body.as_bytes()));
    let req = decode_metrics(body.as_bytes()).unwrap();
    assert_eq!(
        req,
        serde_json::from_str::<ExportMetricsServiceRequest>(&body).unwrap()
    );
}

/// A push of the same shape as the batch this thread finished last is read into that
/// batch's buffers where they lie (the lists and strings of the first push hold the
/// second's), and reads what a fresh decode reads. A push of another node and cluster
/// overwrites every string.
#[test]
fn a_second_push_is_read_into_the_first_ones_buffers() {
    let first = testkit::AgentPush::new("prod", "gpu-node-01", 0.92)
        .gpu("NVIDIA H100 80GB HBM3", 8)
        .to_json();
    let second = testkit::AgentPush::new("staging", "gpu-node-77", 0.41)
        .state("calibrating")
        .to_json();
    let req = same(&first);
    let rm = &req.resource_metrics[0];
    let metrics_ptr = rm.scope_metrics[0].metrics.as_ptr();
    let name_ptr = rm.scope_metrics[0].metrics[0].name.as_ptr();
    let node_id_ptr = rm.resource.as_ref().unwrap().attributes[0].key.as_ptr();
    super::recycle(req.resource_metrics);
    let req = same(&second);
    let rm = &req.resource_metrics[0];
    assert_eq!(rm.scope_metrics[0].metrics.as_ptr(), metrics_ptr);
    assert_eq!(rm.scope_metrics[0].metrics[0].name.as_ptr(), name_ptr);
    assert_eq!(
        rm.resource.as_ref().unwrap().attributes[0].key.as_ptr(),
        node_id_ptr
    );
    assert_eq!(req.resource_metrics, testkit::json_to_proto(&second));
}

// ---- shape replay (`reader::tape`) -----------------------------------------------------

/// `body` decoded on this thread with nothing recorded or kept: a full decode.
fn fresh(body: &str) -> Result<ExportMetricsServiceRequest, String> {
    super::forget_shape();
    drop(component::recycle::take_thread_pool());
    let out = new(body);
    assert!(!super::last_decode_replayed());
    out
}

/// Hand a decoded batch back unchanged, as the receiver does: with its origin.
fn give_back(req: ExportMetricsServiceRequest) {
    component::recycle::recycle_on_this_thread_from(req.resource_metrics, super::take_origin());
}

/// `body` decoded right after `earlier` on this thread (handed back unchanged): whether
/// it was replayed, and what it read, which must be what a full decode reads (the
/// request, or the error word for word).
fn after(earlier: &str, body: &str) -> bool {
    let want = fresh(body);
    super::forget_shape();
    if let Ok(req) = new(earlier) {
        give_back(req);
    }
    let got = new(body);
    let replayed = super::last_decode_replayed();
    match (&got, &want) {
        (Ok(a), Ok(b)) => assert!(
            equal(a, b),
            "replayed {replayed}, after {earlier}\n{body}\n{a:?}\n{b:?}"
        ),
        (a, b) => assert_eq!(
            a.as_ref().err(),
            b.as_ref().err(),
            "replayed {replayed}, after {earlier}\n{body}"
        ),
    }
    if let Ok(req) = got {
        give_back(req);
    }
    replayed
}

#[test]
fn pushes_of_one_shape_are_replayed_and_others_decoded_in_full() {
    let push = |cluster: &str, node: &str, score: f64| {
        testkit::AgentPush::new(cluster, node, score)
            .gpu("NVIDIA H100 80GB HBM3", 8)
            .at(1_763_769_600_000_000_000 + (score * 1e9) as u64)
    };
    let a = push("cluster-1", "node-000001", 0.93).to_json();
    let b = push("cluster-7", "node-004711", 0.5).to_json();
    // Another state and workload: values too.
    let c = push("c", "a-much-longer-node-name", 1.0)
        .state("calibrating")
        .to_json();
    assert!(after(&a, &b), "same shape, other values: replayed");
    assert!(after(&a, &c));
    assert!(after(&b, &b), "the same body again");
    // Another shape: more metrics, more attributes.
    let mut d = push("cluster-1", "node-000001", 0.93).world(8, 3);
    d.with_cgroup_sums = true;
    let d = d.to_json();
    assert!(!after(&a, &d));
    assert!(!after(&d, &a));
    // The same document pretty-printed, or with its keys in another order, is another
    // shape.
    let pretty =
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&a).unwrap())
            .unwrap();
    assert!(!after(&a, &pretty));
    assert!(after(&pretty, &pretty));
    // The tape is of the last body decoded in full: after a miss, the new shape.
    fresh(&a).unwrap();
    assert!(!after(&a, &d));
    let again = new(&d).map(give_back);
    assert!(again.is_ok() && super::last_decode_replayed());
    // A batch handed back without its origin (changed, for all the decoder knows): a
    // full decode, though the shape is the same.
    let req = new(&d).unwrap();
    super::recycle(req.resource_metrics);
    assert!(new(&d).is_ok() && !super::last_decode_replayed());
}

/// Every scalar value of an agent push replaced by values of every kind (of its own kind
/// or another, valid or not): the replay reads what a full decode reads, or gives way to
/// one, which reports the error.
#[test]
fn any_value_in_a_replayed_shape_reads_as_in_a_full_decode() {
    let base = testkit::AgentPush::new("prod", "gpu-node-02", 0.41)
        .gpu("NVIDIA H100 80GB HBM3", 8)
        .world(16, 3)
        .to_json();
    let with = [
        "null",
        "true",
        "false",
        "0",
        "-1",
        "7",
        "1.5",
        "-0",
        "1e3",
        "2E-2",
        "1e400",
        "01",
        "\"\"",
        "\"x\"",
        "\"NaN\"",
        "\"-5\"",
        "\"+5\"",
        "\"1.5\"",
        "\"18446744073709551615\"",
        "\"18446744073709551616\"",
        "\"9223372036854775808\"",
        "18446744073709551616",
        "\"\\u00e9t\\u00e9\"",
        "\"a\\\"b\"",
        "\"\\ud800\"",
        "\"été\"",
        "{}",
        "[]",
        "[1]",
        "{\"stringValue\":\"x\"}",
        "\"unterminated",
    ];
    let spans = scalar_spans(base.as_bytes());
    assert!(spans.len() > 60, "{}", spans.len());
    let (mut replayed, mut missed) = (0, 0);
    for &(s, e) in &spans {
        for w in with {
            let body = format!("{}{w}{}", &base[..s], &base[e..]);
            if after(&base, &body) {
                replayed += 1;
            } else {
                missed += 1;
            }
        }
    }
    // Values of the kind recorded are replayed; the rest give way to a full decode.
    assert!(
        replayed > spans.len() * 4,
        "{replayed} replayed, {missed} missed"
    );
    assert!(
        missed > spans.len() * 4,
        "{replayed} replayed, {missed} missed"
    );
}

/// A oneof member that was `null` when recorded (so the next member was read) and is set
/// in the new body (so the next member must be skipped), and the other way round.
#[test]
fn a_oneof_member_set_or_unset_by_its_value_is_not_replayed() {
    let null_first = one_point(r#""asDouble":null,"asInt":"5","timeUnixNano":"1""#);
    let set_first = one_point(r#""asDouble":2.5,"asInt":"5","timeUnixNano":"1""#);
    assert!(!after(&null_first, &set_first));
    assert_eq!(
        point(&same(&set_first)).value,
        Some(number_data_point::Value::AsDouble(2.5))
    );
    assert!(!after(&set_first, &null_first));
    assert!(after(
        &set_first,
        &one_point(r#""asDouble":3,"asInt":"5","timeUnixNano":"1""#)
    ));
    // Of the metric's oneof as well.
    let gauge_null = one_metric(r#""gauge":null,"sum":{"dataPoints":[]}"#);
    let gauge_set = one_metric(r#""gauge":{"dataPoints":[]},"sum":{"dataPoints":[]}"#);
    assert!(!after(&gauge_null, &gauge_set));
    assert!(!after(&gauge_set, &gauge_null));
}

/// Whitespace, an extra byte, a missing one or trailing bytes after the recorded shape:
/// a miss, and what a full decode gives.
#[test]
fn bytes_around_the_values_must_be_the_recorded_ones() {
    let base = testkit::AgentPush::new("prod", "n1", 0.5).to_json();
    for (at, edit) in [
        (0, " "),
        (1, " "),
        (base.len(), " "),
        (base.len(), "x"),
        (base.len(), "{}"),
        (base.len() - 1, ","),
        (20, "\n"),
    ] {
        let body = format!("{}{edit}{}", &base[..at], &base[at..]);
        assert!(!after(&base, &body), "{body}");
    }
    for cut in [1, 2, base.len() / 2, base.len() - 1] {
        assert!(!after(&base, &base[..cut]));
    }
    for gone in [0, 1, base.len() - 1] {
        assert!(!after(
            &base,
            &format!("{}{}", &base[..gone], &base[gone + 1..])
        ));
    }
    // Every byte left out in turn (in a value, a replay where the value still reads):
    // what a full decode reads, either way.
    for gone in 0..base.len() {
        after(&base, &format!("{}{}", &base[..gone], &base[gone + 1..]));
    }
}

/// `fleet-loadgen`'s pushes one after another, each handed back unchanged: every one
/// after the first is replayed (scores of other lengths included: `0.9` then `0.91` must
/// not be taken for the recorded `0.9`), and each reads what the generic path reads.
#[test]
fn a_run_of_agent_pushes_is_replayed_after_the_first() {
    fresh("{}").unwrap();
    let mut replayed = 0;
    for i in 0..200 {
        let cluster = format!("cluster-{}", i % 8);
        let score = 0.9 + (i % 7) as f64 * 0.01;
        let body = testkit::AgentPush::new(&cluster, &format!("node-{i:06}"), score)
            .gpu("NVIDIA H100 80GB HBM3", 8)
            .at(1_763_769_600_000_000_000 + i * 10_000_000_000)
            .to_json();
        let req = new(&body).unwrap();
        replayed += usize::from(super::last_decode_replayed());
        assert_eq!(req, old(&body).unwrap(), "{body}");
        give_back(req);
    }
    assert_eq!(replayed, 199);
}

/// Batches handed back without their origin (a pipeline that changes them): after two,
/// a full decode is recorded only once in 16; once batches come back unchanged again,
/// the next recorded decode brings replays back for every push.
#[test]
fn recording_backs_off_while_batches_do_not_come_back_unchanged() {
    let body = testkit::AgentPush::new("c", "n1", 0.5).to_json();
    fresh("{}").unwrap();
    let mut replays = Vec::new();
    for i in 0..60 {
        let req = new(&body).unwrap();
        replays.push(super::last_decode_replayed());
        if i < 30 {
            // Changed, for all the decoder knows.
            let _ = super::take_origin();
            super::recycle(req.resource_metrics);
        } else {
            give_back(req);
        }
    }
    assert!(replays[..31].iter().all(|r| !r), "{replays:?}");
    let first = replays.iter().position(|r| *r).expect("replays come back");
    assert!(first <= 31 + 16, "{replays:?}");
    assert!(replays[first..].iter().all(|r| *r), "{replays:?}");
    // The schedule itself: of 48 decodes after one whose batch did not come back, the
    // first is recorded (one loss may be chance), then one in 16.
    let mut state = super::Recording::NEW;
    let mut recorded = 0;
    for _ in 0..48 {
        let (yes, next) = state.next(false, true);
        recorded += usize::from(yes);
        state = next;
    }
    assert_eq!(recorded, 1 + 47 / 16);
}
