//! Self-telemetry as components report it: typed metric families with labels, rendered
//! by the host (Prometheus text exposition in `ingero-fleet`, JSON over the C ABI).
//! Names are already in Prometheus form (`ingero_fleet_threshold`, counters end `_total`).

use serde::Serialize;

/// Prometheus metric type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricType {
    Gauge,
    Counter,
}

/// One labelled value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// All samples of one metric name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricFamily {
    pub name: String,
    pub help: String,
    #[serde(rename = "type")]
    pub kind: MetricType,
    pub samples: Vec<Sample>,
}

impl MetricFamily {
    pub fn gauge(name: &str, help: &str) -> Self {
        MetricFamily {
            name: name.to_string(),
            help: help.to_string(),
            kind: MetricType::Gauge,
            samples: Vec::new(),
        }
    }

    pub fn counter(name: &str, help: &str) -> Self {
        MetricFamily {
            name: name.to_string(),
            help: help.to_string(),
            kind: MetricType::Counter,
            samples: Vec::new(),
        }
    }

    /// Add a sample; labels as `(name, value)` pairs.
    pub fn with(mut self, labels: &[(&str, &str)], value: f64) -> Self {
        self.push(labels, value);
        self
    }

    pub fn push(&mut self, labels: &[(&str, &str)], value: f64) {
        self.samples.push(Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            value,
        });
    }
}
