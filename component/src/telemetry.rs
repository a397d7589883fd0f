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
    /// The family's name; for a [`prefixed`](Self::prefixed) spec, the part after the
    /// prefix (the whole name is [`name_in`](Self::name_in)).
    pub name: &'static str,
    /// The name goes under the [`MetricPrefix`] the distribution gives its host
    /// (declared `prefix + "..."` in [`metric_set!`](crate::metric_set)).
    pub prefixed: bool,
    pub kind: SpecKind,
    /// UCUM-style unit (`1` for counts and ratios, `s` for seconds).
    pub unit: &'static str,
    pub help: &'static str,
    /// Label names every sample carries, in order (empty for an unlabelled family).
    pub labels: &'static [&'static str],
}

impl MetricSpec {
    /// The family's whole name: `prefix` and [`name`](Self::name) for a
    /// [`prefixed`](Self::prefixed) spec, the declared name for any other.
    pub fn name_in(&self, prefix: MetricPrefix) -> std::borrow::Cow<'static, str> {
        if self.prefixed {
            std::borrow::Cow::Owned(format!("{}{}", prefix.as_str(), self.name))
        } else {
            std::borrow::Cow::Borrowed(self.name)
        }
    }

    /// An empty family of this gauge or counter spec, to push samples into. A histogram
    /// has no sample family (see [`SpecKind`]); what this returns for one is a gauge that
    /// [`describes`](Self::describes) rejects. A prefixed spec needs
    /// [`family_in`](Self::family_in).
    pub fn family(&self) -> MetricFamily {
        debug_assert!(
            !self.prefixed,
            "{}: a prefixed family is named with family_in",
            self.name
        );
        self.family_in(MetricPrefix::NONE)
    }

    /// [`family`](Self::family), named under `prefix` if the spec is prefixed.
    pub fn family_in(&self, prefix: MetricPrefix) -> MetricFamily {
        debug_assert!(
            self.kind != SpecKind::Histogram,
            "{}: a histogram has no sample family",
            self.name
        );
        MetricFamily {
            name: self.name_in(prefix).into_owned(),
            help: self.help.to_string(),
            kind: self.kind.sample_type().unwrap_or(MetricType::Gauge),
            samples: Vec::new(),
        }
    }

    /// `f` is a family of this spec: the same name, type and help, and every sample
    /// carries exactly the declared labels, in order. A prefixed spec needs
    /// [`describes_in`](Self::describes_in).
    pub fn describes(&self, f: &MetricFamily) -> bool {
        self.describes_in(MetricPrefix::NONE, f)
    }

    /// [`describes`](Self::describes), with the name under `prefix` if the spec is prefixed.
    pub fn describes_in(&self, prefix: MetricPrefix, f: &MetricFamily) -> bool {
        f.name == self.name_in(prefix)
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
        self.header_in(MetricPrefix::NONE, out);
    }

    /// [`header`](Self::header), with the name under `prefix` if the spec is prefixed.
    pub fn header_in(&self, prefix: MetricPrefix, out: &mut String) {
        use std::fmt::Write as _;
        let help = self.help.replace('\\', "\\\\").replace('\n', "\\n");
        let name = self.name_in(prefix);
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {}", self.kind_name());
    }
}

/// The prefix a distribution gives the names of its host's own families (connections,
/// TLS, receiver drops, the auth extension's and the Prometheus exporter's counters):
/// specs declared `prefix + "connections_open"` are named under it. Checked when it is
/// made, at compile time in a `const`: a metric name's first characters
/// (`[a-zA-Z_:][a-zA-Z0-9_:]*`), ending in `_`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetricPrefix(&'static str);

impl MetricPrefix {
    /// No prefix: what a spec that is not prefixed is named under.
    pub const NONE: MetricPrefix = MetricPrefix("");

    /// A prefix; panics (a compile error in a `const`) unless `p` is a valid start of a
    /// Prometheus metric name that ends in `_`.
    pub const fn new(p: &'static str) -> MetricPrefix {
        let b = p.as_bytes();
        assert!(
            !b.is_empty() && b[b.len() - 1] == b'_',
            "a metric prefix ends in `_`"
        );
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            let ok =
                c.is_ascii_alphabetic() || c == b'_' || c == b':' || (i > 0 && c.is_ascii_digit());
            assert!(ok, "a metric prefix is [a-zA-Z_:][a-zA-Z0-9_:]*");
            i += 1;
        }
        MetricPrefix(p)
    }

    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

/// The prefix of a host's own families when its distribution gives none: the host
/// library's name (`collector_host_connections_open`). Not `otelcol_`: that is the
/// OpenTelemetry Collector's namespace, and these families are not among its documented
/// ones.
pub const DEFAULT_HOST_PREFIX: MetricPrefix = MetricPrefix::new("collector_host_");

impl std::fmt::Display for MetricPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Declare a component's self-metric families once. For each entry it defines a `&str`
/// constant with the family's name (what code and tests refer to), a [`MetricSpec`] of the
/// same name in the given specs module, and a slice of all specs in declaration order.
/// A name written `prefix + "..."` is the part after the [`MetricPrefix`] the distribution
/// gives its host (the host's own families); the constant then holds that part.
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
///     /// Named under the distribution's prefix.
///     OPEN: gauge prefix + "connections_open", unit "1", labels [], help "Open connections";
/// }
///
/// fn main() {
///     assert_eq!(CLUSTERS, "demo_clusters");
///     assert_eq!(spec::POINTS.labels, ["cluster_id"]);
///     assert_eq!(FAMILIES.len(), 4);
///     let mut head = String::new();
///     spec::LATENCY.header(&mut head);
///     assert_eq!(
///         head,
///         "# HELP demo_latency_seconds Latency\\\\n\n# TYPE demo_latency_seconds histogram\n"
///     );
///     let f = spec::POINTS.family().with(&[(LABEL_CLUSTER, "a")], 1.0);
///     assert!(spec::POINTS.describes(&f));
///     assert!(!spec::CLUSTERS.describes(&f));
///     const P: component::telemetry::MetricPrefix =
///         component::telemetry::MetricPrefix::new("demo_");
///     assert_eq!(OPEN, "connections_open");
///     assert_eq!(spec::OPEN.name_in(P), "demo_connections_open");
///     assert_eq!(spec::CLUSTERS.name_in(P), "demo_clusters");
///     let open = spec::OPEN.family_in(P).with(&[], 3.0);
///     assert_eq!(open.name, "demo_connections_open");
///     assert!(spec::OPEN.describes_in(P, &open));
/// }
/// ```
#[macro_export]
macro_rules! metric_set {
    (@kind gauge) => { $crate::telemetry::SpecKind::Gauge };
    (@kind counter) => { $crate::telemetry::SpecKind::Counter };
    (@kind histogram) => { $crate::telemetry::SpecKind::Histogram };
    (@prefixed) => { false };
    (@prefixed prefix) => { true };
    (
        specs: $specs_vis:vis mod $specs:ident;
        all: $all_vis:vis $all:ident;
        $(
            $(#[$meta:meta])*
            $konst:ident : $kind:ident $($prefix:ident +)? $name:literal,
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
                    prefixed: $crate::metric_set!(@prefixed $($prefix)?),
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
