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

/// The type a family is declared with. Gauges and counters are reported as
/// [`MetricFamily`] samples; a histogram's owner renders its bucket, sum and count series
/// itself under the header [`MetricSpec::header`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecKind {
    Gauge,
    Counter,
    Histogram,
}

impl SpecKind {
    /// The sample type of a gauge or counter family; `None` for a histogram.
    pub fn sample_type(self) -> Option<MetricType> {
        match self {
            SpecKind::Gauge => Some(MetricType::Gauge),
            SpecKind::Counter => Some(MetricType::Counter),
            SpecKind::Histogram => None,
        }
    }
}

/// One self-metric family declared once: name, type, unit, help text and label names.
/// A component lists its families with [`metric_set!`](crate::metric_set) and builds each
/// scrape's [`MetricFamily`] from the spec, so the names, types and help text in the
/// exposition cannot drift from the declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricSpec {
    pub name: &'static str,
    pub kind: SpecKind,
    /// UCUM-style unit (`1` for counts and ratios, `s` for seconds).
    pub unit: &'static str,
    pub help: &'static str,
    /// Label names every sample carries, in order (empty for an unlabelled family).
    pub labels: &'static [&'static str],
}

impl MetricSpec {
    /// An empty family of this gauge or counter spec, to push samples into. A histogram
    /// has no sample family (see [`SpecKind`]); what this returns for one is a gauge that
    /// [`describes`](Self::describes) rejects.
    pub fn family(&self) -> MetricFamily {
        debug_assert!(
            self.kind != SpecKind::Histogram,
            "{}: a histogram has no sample family",
            self.name
        );
        MetricFamily {
            name: self.name.to_string(),
            help: self.help.to_string(),
            kind: self.kind.sample_type().unwrap_or(MetricType::Gauge),
            samples: Vec::new(),
        }
    }

    /// `f` is a family of this spec: the same name, type and help, and every sample
    /// carries exactly the declared labels, in order.
    pub fn describes(&self, f: &MetricFamily) -> bool {
        f.name == self.name
            && self.kind.sample_type() == Some(f.kind)
            && f.help == self.help
            && f.samples.iter().all(|s| {
                s.labels.len() == self.labels.len()
                    && s.labels.iter().zip(self.labels).all(|((k, _), l)| k == l)
            })
    }

    /// The type as the exposition writes it (`gauge`, `counter`, `histogram`).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            SpecKind::Gauge => "gauge",
            SpecKind::Counter => "counter",
            SpecKind::Histogram => "histogram",
        }
    }

    /// The family's `# HELP` and `# TYPE` lines in Prometheus text exposition 0.0.4 (the
    /// help text escaped), for an owner that writes the series itself.
    pub fn header(&self, out: &mut String) {
        use std::fmt::Write as _;
        let help = self.help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(out, "# HELP {} {help}", self.name);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind_name());
    }
}

/// Declare a component's self-metric families once. For each entry it defines a `&str`
/// constant with the family's name (what code and tests refer to), a [`MetricSpec`] of the
/// same name in the given specs module, and a slice of all specs in declaration order.
///
/// ```
/// pub const LABEL_CLUSTER: &str = "cluster_id";
///
/// component::metric_set! {
///     specs: pub mod spec;
///     all: pub FAMILIES;
///     /// Clusters tracked.
///     CLUSTERS: gauge "demo_clusters", unit "1", labels [], help "Clusters tracked";
///     POINTS: counter "demo_points_total", unit "1", labels [LABEL_CLUSTER], help "Points";
///     /// A histogram: its owner writes the series under the spec's header.
///     LATENCY: histogram "demo_latency_seconds", unit "s", labels [], help "Latency\\n";
/// }
///
/// fn main() {
///     assert_eq!(CLUSTERS, "demo_clusters");
///     assert_eq!(spec::POINTS.labels, ["cluster_id"]);
///     assert_eq!(FAMILIES.len(), 3);
///     let mut head = String::new();
///     spec::LATENCY.header(&mut head);
///     assert_eq!(
///         head,
///         "# HELP demo_latency_seconds Latency\\\\n\n# TYPE demo_latency_seconds histogram\n"
///     );
///     let f = spec::POINTS.family().with(&[(LABEL_CLUSTER, "a")], 1.0);
///     assert!(spec::POINTS.describes(&f));
///     assert!(!spec::CLUSTERS.describes(&f));
/// }
/// ```
#[macro_export]
macro_rules! metric_set {
    (@kind gauge) => { $crate::telemetry::SpecKind::Gauge };
    (@kind counter) => { $crate::telemetry::SpecKind::Counter };
    (@kind histogram) => { $crate::telemetry::SpecKind::Histogram };
    (
        specs: $specs_vis:vis mod $specs:ident;
        all: $all_vis:vis $all:ident;
        $(
            $(#[$meta:meta])*
            $konst:ident : $kind:ident $name:literal,
            unit $unit:literal,
            labels [$($label:path),* $(,)?],
            help $help:literal;
        )*
    ) => {
        $(
            $(#[$meta])*
            pub const $konst: &str = $name;
        )*

        /// The declared spec of each family, under the same names as the name constants.
        $specs_vis mod $specs {
            #[allow(unused_imports)]
            use super::*;
            $(
                pub const $konst: $crate::telemetry::MetricSpec = $crate::telemetry::MetricSpec {
                    name: $name,
                    kind: $crate::metric_set!(@kind $kind),
                    unit: $unit,
                    help: $help,
                    labels: &[$($label),*],
                };
            )*
        }

        /// Every family, in declaration order.
        $all_vis const $all: &[$crate::telemetry::MetricSpec] = &[$($specs::$konst),*];
    };
}
