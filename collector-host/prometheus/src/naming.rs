//! OTLP names to Prometheus names, as the contrib exporter does with the
//! `UnderscoreEscapingWithSuffixes` / `UnderscoreEscapingWithoutSuffixes` strategies
//! (Prometheus `otlptranslator` `MetricNamer` and `LabelNamer`).
//!
//! Metric names (with suffixes):
//! 1. split the name into tokens at every character outside `[a-zA-Z0-9:]` (so runs of
//!    invalid characters and underscores collapse to one `_`, and leading/trailing ones go);
//! 2. append the unit as tokens: `ms` -> `milliseconds`, `By` -> `bytes`, `%` -> `percent`,
//!    `x/y` -> `x_per_y` (`/s` -> `per_second`), `{packets}` annotations dropped, unknown
//!    units kept as written; a unit already among the tokens is not repeated;
//! 3. monotonic cumulative sums get `total` (moved to the end if already present);
//!    gauges with unit `1` get `ratio` the same way;
//! 4. prepend the namespace; prefix `_` if the result starts with a digit.
//!
//! Label names: every character outside `[a-zA-Z0-9_]` becomes `_`; a leading digit gets
//! `key_`, a single leading `_` gets `key`.

/// What the name is for; decides the type suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameKind {
    Gauge,
    /// Monotonic sum: Prometheus counter, `_total`.
    MonotonicCounter,
    /// Non-monotonic sum: rendered as a gauge, but no `_ratio` (as in otlptranslator).
    NonMonotonicCounter,
    Histogram,
    Summary,
}

/// A name that cannot be made valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("normalization of {0:?} resulted in an empty name")]
    Empty(String),
    #[error("normalization of {0:?} resulted in a name of only underscores")]
    OnlyUnderscores(String),
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
pub fn is_valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`
pub fn is_valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_name_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// Prometheus name of a unit that is not after `/`.
fn main_unit(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        _ => return None,
    })
}

/// Prometheus name of a unit after `/` (singular).
fn per_unit(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        _ => return None,
    })
}

/// (main suffix, per suffix) before character clean-up; per is `per_<unit>` or empty.
fn unit_suffixes(unit: &str) -> (String, String) {
    let (main_raw, per_raw) = match unit.split_once('/') {
        Some((m, p)) => (m, Some(p)),
        None => (unit, None),
    };
    let mut main = String::new();
    let m = main_raw.trim();
    if !m.is_empty() && !m.contains(['{', '}']) {
        main = main_unit(m).unwrap_or(m).to_string();
    }
    let mut per = String::new();
    if let Some(p) = per_raw.map(str::trim)
        && !p.is_empty()
        && !p.contains(['{', '}'])
    {
        per = format!("per_{}", per_unit(p).unwrap_or(p));
    }
    (main, per)
}

/// Invalid characters to `_`, runs of `_` collapsed, a leading `_` dropped.
fn clean_unit(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    for c in unit.chars() {
        let c = if is_name_token_char(c) { c } else { '_' };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    match out.strip_prefix('_') {
        Some(rest) => rest.to_string(),
        None => out,
    }
}

/// The Prometheus metric name (family name; histogram/summary sample suffixes are added
/// at render time).
pub fn metric_name(
    name: &str,
    unit: &str,
    kind: NameKind,
    namespace: &str,
    with_suffixes: bool,
) -> Result<String, NameError> {
    let out = if with_suffixes {
        name_with_suffixes(name, unit, kind, namespace)
    } else {
        name_without_suffixes(name, namespace)
    };
    if out.is_empty() {
        return Err(NameError::Empty(name.to_string()));
    }
    if out != name && out.chars().all(|c| c == '_') {
        return Err(NameError::OnlyUnderscores(name.to_string()));
    }
    Ok(out)
}

fn name_with_suffixes(name: &str, unit: &str, kind: NameKind, namespace: &str) -> String {
    let mut tokens: Vec<String> = name
        .split(|c: char| !is_name_token_char(c))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();

    let (main, per) = unit_suffixes(unit);
    let mut main = clean_unit(&main);
    let mut per = clean_unit(&per);
    if tokens.contains(&main) {
        main.clear();
    }
    if per == "per_" {
        per.clear();
    } else {
        if per.ends_with('_') {
            per.pop();
        }
        if tokens.contains(&per) {
            per.clear();
        }
    }
    if !per.is_empty() && main.ends_with('_') {
        main.pop();
    }
    if !main.is_empty() {
        tokens.push(main);
    }
    if !per.is_empty() {
        tokens.push(per);
    }

    if kind == NameKind::MonotonicCounter {
        tokens.retain(|t| t != "total");
        tokens.push("total".to_string());
    }
    if unit == "1" && kind == NameKind::Gauge {
        tokens.retain(|t| t != "ratio");
        tokens.push("ratio".to_string());
    }
    if !namespace.is_empty() {
        tokens.insert(0, namespace.to_string());
    }
    let joined = tokens.join("_");
    if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{joined}")
    } else {
        joined
    }
}

fn name_without_suffixes(name: &str, namespace: &str) -> String {
    let join = |s: &str| {
        s.split(|c: char| !(is_name_token_char(c) || c == '_'))
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("_")
    };
    let base = join(name);
    if !namespace.is_empty() {
        return format!("{}_{base}", join(namespace));
    }
    if base.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{base}")
    } else {
        base
    }
}

/// The Prometheus label name of an attribute key, or `None` when the key cannot become a
/// valid label (empty, or only underscores after clean-up).
pub fn label_name(key: &str) -> Option<String> {
    if key.is_empty() {
        return None;
    }
    let mut out: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    } else if out.starts_with('_') && !out.starts_with("__") {
        out.insert_str(0, "key");
    }
    if out != key && out.chars().all(|c| c == '_') {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::NameKind::*;
    use super::*;
    use proptest::prelude::*;

    fn n(name: &str, unit: &str, kind: NameKind) -> String {
        metric_name(name, unit, kind, "", true).unwrap()
    }

    #[test]
    fn metric_names_with_suffixes() {
        let table: &[(&str, &str, NameKind, &str)] = &[
            // The agent's metrics (spec section 1.4).
            (
                "ingero.node.health_score",
                "1",
                Gauge,
                "ingero_node_health_score_ratio",
            ),
            (
                "ingero.node.degradation_warning",
                "1",
                Gauge,
                "ingero_node_degradation_warning_ratio",
            ),
            (
                "ingero.node.cuda_kernel_launch_total",
                "1",
                MonotonicCounter,
                "ingero_node_cuda_kernel_launch_total",
            ),
            (
                "ingero.node.cpu_stall_nanos_total",
                "ns",
                MonotonicCounter,
                "ingero_node_cpu_stall_nanos_nanoseconds_total",
            ),
            (
                "ingero.node.cuda_memcpy_bytes_total",
                "By",
                MonotonicCounter,
                "ingero_node_cuda_memcpy_bytes_total",
            ),
            (
                "nccl.collective.duration_ms",
                "ms",
                Gauge,
                "nccl_collective_duration_ms_milliseconds",
            ),
            // Units.
            (
                "http.server.duration",
                "s",
                Histogram,
                "http_server_duration_seconds",
            ),
            ("latency", "us", Gauge, "latency_microseconds"),
            ("rx", "KiBy", Gauge, "rx_kibibytes"),
            ("rx", "MiBy", Gauge, "rx_mebibytes"),
            ("cpu.utilization", "%", Gauge, "cpu_utilization_percent"),
            ("requests", "{request}", MonotonicCounter, "requests_total"),
            ("throughput", "By/s", Gauge, "throughput_bytes_per_second"),
            (
                "packets.rate",
                "{packets}/s",
                Gauge,
                "packets_rate_per_second",
            ),
            ("x", "m/mo", Gauge, "x_meters_per_month"),
            ("x", "foo/bar", Gauge, "x_foo_per_bar"),
            ("temp", "Cel", Gauge, "temp_celsius"),
            ("weird", "a.b", Gauge, "weird_a_b"),
            ("memory.bytes", "By", Gauge, "memory_bytes"),
            ("x", " s ", Gauge, "x_seconds"),
            // `_ratio` only for gauges with unit exactly "1".
            ("ratio.of.things", "1", Gauge, "of_things_ratio"),
            ("updown", "1", NonMonotonicCounter, "updown"),
            ("hist", "1", Histogram, "hist"),
            // `_total` moved to the end, never doubled.
            ("total.requests", "", MonotonicCounter, "requests_total"),
            ("requests_total", "", MonotonicCounter, "requests_total"),
            (
                "requests_total",
                "s",
                MonotonicCounter,
                "requests_seconds_total",
            ),
            ("requests", "", Gauge, "requests"),
            // Sanitising and collapsing.
            ("a..b__c", "", Gauge, "a_b_c"),
            ("_leading.trailing_", "", Gauge, "leading_trailing"),
            ("héllo wörld", "", Gauge, "h_llo_w_rld"),
            ("name:with:colons", "", Gauge, "name:with:colons"),
            ("2xx.count", "", Gauge, "_2xx_count"),
        ];
        for (name, unit, kind, want) in table {
            assert_eq!(n(name, unit, *kind), *want, "{name} [{unit}] {kind:?}");
        }
    }

    #[test]
    fn namespace_is_prepended() {
        assert_eq!(
            metric_name("ingero.node.health_score", "1", Gauge, "fleet", true).unwrap(),
            "fleet_ingero_node_health_score_ratio"
        );
        assert_eq!(
            metric_name("2xx", "", Gauge, "ns", false).unwrap(),
            "ns_2xx"
        );
    }

    #[test]
    fn metric_names_without_suffixes() {
        let table: &[(&str, &str)] = &[
            ("ingero.node.health_score", "ingero_node_health_score"),
            ("requests_total", "requests_total"),
            ("a..b__c", "a_b__c"),
            ("2xx", "_2xx"),
        ];
        for (name, want) in table {
            assert_eq!(
                metric_name(name, "s", MonotonicCounter, "", false).unwrap(),
                *want
            );
        }
    }

    #[test]
    fn unusable_metric_names_are_errors() {
        assert!(matches!(
            metric_name("", "", Gauge, "", true),
            Err(NameError::Empty(_))
        ));
        assert!(matches!(
            metric_name("...", "", Gauge, "", true),
            Err(NameError::Empty(_))
        ));
        assert!(matches!(
            metric_name("..", "", Gauge, "", false),
            Err(NameError::Empty(_))
        ));
        // A name that is only underscores is kept only when it was given that way.
        assert!(matches!(
            metric_name("_.", "", Gauge, "", false),
            Err(NameError::OnlyUnderscores(_))
        ));
    }

    #[test]
    fn label_names() {
        let table: &[(&str, &str)] = &[
            ("ingero.cluster.id", "ingero_cluster_id"),
            ("ingero.cgroup_path_hash", "ingero_cgroup_path_hash"),
            ("http-method", "http_method"),
            ("0day", "key_0day"),
            ("_private", "key_private"),
            ("__reserved", "__reserved"),
            ("a..b", "a__b"),
            ("ünï", "key_n_"),
            ("job", "job"),
        ];
        for (key, want) in table {
            assert_eq!(label_name(key).as_deref(), Some(*want), "{key}");
        }
        assert_eq!(label_name(""), None);
        assert_eq!(label_name(".."), None);
    }

    proptest! {
        #[test]
        fn translated_metric_names_are_valid(name in "\\PC{0,24}", unit in "[a-zA-Z{}/%1 ]{0,6}") {
            for kind in [Gauge, MonotonicCounter, NonMonotonicCounter, Histogram, Summary] {
                for suffixes in [true, false] {
                    if let Ok(out) = metric_name(&name, &unit, kind, "", suffixes) {
                        prop_assert!(is_valid_metric_name(&out), "{name:?} -> {out:?}");
                    }
                }
            }
        }

        #[test]
        fn translated_label_names_are_valid(key in "\\PC{0,24}") {
            if let Some(out) = label_name(&key) {
                prop_assert!(is_valid_label_name(&out), "{key:?} -> {out:?}");
            }
        }
    }
}
