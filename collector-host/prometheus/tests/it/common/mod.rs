//! Test helpers: OTLP builders, an exposition parser, promtool.
#![allow(dead_code)]

pub mod agent;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use component::otlp::{
    Gauge, KeyValue, Metric, MetricKind, NumberDataPoint, NumberValue, Resource, ResourceMetrics,
    ScopeMetrics, Sum,
};
use component::{MetricFamily, Timestamp};
use fleet_prometheus::{PrometheusExporter, PrometheusExporterConfig};

pub const T0: u64 = 1_750_000_000;

pub fn ts(secs: u64) -> Timestamp {
    Timestamp::from_secs(secs)
}

/// An exporter named and defaulted as `ingero-fleet` builds it ([`agent::fleet_exporter`]).
pub fn exporter(cfg: PrometheusExporterConfig) -> PrometheusExporter {
    agent::fleet_exporter(cfg)
}

pub fn default_exporter() -> PrometheusExporter {
    exporter(PrometheusExporterConfig::default())
}

pub fn render(e: &PrometheusExporter, now: u64, extra: &[MetricFamily]) -> String {
    let mut out = String::new();
    e.render(ts(now), extra, &mut out);
    out
}

pub fn rm(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: resource,
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn point(attrs: Vec<KeyValue>, t_secs: u64, v: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        time_unix_nano: t_secs * 1_000_000_000,
        value: Some(NumberValue::AsDouble(v)),
        ..Default::default()
    }
}

pub fn gauge(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(MetricKind::Gauge(Gauge {
            data_points: points,
        })),
        ..Default::default()
    }
}

/// temporality: 1 delta, 2 cumulative.
pub fn sum(
    name: &str,
    unit: &str,
    monotonic: bool,
    temporality: i32,
    points: Vec<NumberDataPoint>,
) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(MetricKind::Sum(Sum {
            data_points: points,
            aggregation_temporality: temporality,
            is_monotonic: monotonic,
        })),
        ..Default::default()
    }
}

/// One parsed sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedSample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parse sample lines (comments skipped), unescaping label values. Panics on malformed
/// input: the tests want to know.
pub fn parse(text: &str) -> Vec<ParsedSample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (head, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().expect("value parses"),
        };
        let (name, labels) = match head.split_once('{') {
            None => (head.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                (name.to_string(), parse_labels(body))
            }
        };
        out.push(ParsedSample {
            name,
            labels,
            value,
        });
    }
    out
}

fn parse_labels(body: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            name.push(c);
            chars.next();
        }
        if name.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('='));
        assert_eq!(chars.next(), Some('"'));
        let mut value = String::new();
        loop {
            match chars.next().expect("unterminated value") {
                '\\' => match chars.next().expect("escape") {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        assert!(
            labels.insert(name, value).is_none(),
            "duplicate label in {body}"
        );
        match chars.next() {
            Some(',') => continue,
            None => break,
            Some(c) => panic!("unexpected {c:?} in {body}"),
        }
    }
    labels
}

/// Samples named `name`.
pub fn named<'a>(samples: &'a [ParsedSample], name: &str) -> Vec<&'a ParsedSample> {
    samples.iter().filter(|s| s.name == name).collect()
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `promtool check metrics` on `text`: None when promtool is not installed, else
/// (exit code, lint problems / errors).
pub fn promtool(text: &str) -> Option<(i32, Vec<String>)> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => {
            eprintln!(
                "promtool not found: skipping the exposition check (CI installs it: apt-get install prometheus)"
            );
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::to_string)
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines.sort();
    Some((out.status.code().unwrap_or(-1), lines))
}
