//! The example Prometheus rules and Grafana dashboard (top-level `examples/`): promtool
//! accepts them, and the metrics they read are exactly those tagged `# dashboard` in
//! `examples/exported-metrics.txt` (which lists every family, this processor's included;
//! `fleet/tests/e2e/components.rs` holds the whole list to the binary).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may unwrap

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use component::config::{ConfigValue, parse_yaml};
use provider_processor::metrics;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn rules_path() -> PathBuf {
    examples().join("prometheus/ingero-rules.yaml")
}

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(examples().join("grafana/ingero-fleet.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn rules() -> ConfigValue {
    parse_yaml(&std::fs::read(rules_path()).unwrap()).unwrap()
}

/// (record or alert name, expr) of every rule.
fn rule_exprs(rules: &ConfigValue) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let expr = r["expr"].as_str().unwrap().to_string();
            match (r["record"].as_str(), r["alert"].as_str()) {
                (Some(n), None) => out.push((n.to_string(), expr, true)),
                (None, Some(n)) => out.push((n.to_string(), expr, false)),
                _ => panic!("rule without exactly one of record/alert: {r}"),
            }
        }
    }
    out
}

/// Every PromQL query of the dashboard: panel targets (rows included) and `query`
/// variables.
fn dashboard_exprs(d: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let mut exprs = Vec::new();
    fn walk(panels: &serde_json::Value, out: &mut Vec<String>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push(t["expr"].as_str().unwrap().to_string());
            }
            walk(&p["panels"], out);
        }
    }
    walk(&d["panels"], &mut exprs);
    let mut var_queries = Vec::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap();
            var_queries.push(q.to_string());
        }
    }
    (exprs, var_queries)
}

/// Not metric names: operators, modifiers, literals and aggregation operators (which may
/// be followed by `by (...)` rather than `(`).
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "atan2",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Skip from an opening bracket to just after its matching close.
fn skip_group(chars: &[char], mut i: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        if chars[i] == open {
            depth += 1;
        } else if chars[i] == close {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    i
}

/// Metric names (and recorded-rule names) a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Strings out first (they may hold brackets and `$` variables).
    let mut clean = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    clean.push_str("\"\"");
                }
            }
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => clean.push(c),
        }
    }
    let chars: Vec<char> = clean.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip_group(&chars, i, '{', '}');
        } else if c == '[' {
            i = skip_group(&chars, i, '[', ']');
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c == '$' {
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let next = chars.get(j).copied();
            if GROUPING.contains(&word.as_str()) {
                if next == Some('(') {
                    i = skip_group(&chars, j, '(', ')');
                }
            } else if KEYWORDS.contains(&word.as_str()) || next == Some('(') {
                // keyword, or a function / aggregation name
            } else {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The metric a Grafana `label_values(metric, label)` query reads.
fn label_values_metric(q: &str) -> String {
    let inner = q.trim().strip_prefix("label_values(").unwrap();
    let first = inner.split([',', ')']).next().unwrap();
    first.split('{').next().unwrap().trim().to_string()
}

/// The families of exported-metrics.txt: (every name, the names tagged `# dashboard`).
fn exported() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut all = BTreeSet::new();
    let mut tagged = BTreeSet::new();
    for l in std::fs::read_to_string(examples().join("exported-metrics.txt"))
        .unwrap()
        .lines()
    {
        let (name, comment) = l.split_once('#').unwrap_or((l, ""));
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        assert!(all.insert(name.to_string()), "{name} is listed twice");
        if comment.trim() == "dashboard" {
            tagged.insert(name.to_string());
        }
    }
    (all, tagged)
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn extractor_finds_metrics_and_nothing_else() {
    assert_eq!(
        metric_names(
            r#"sum by (cluster_id, currency) (increase(ingero_cost_barrier_idle_total{cluster_id=~"$cluster"}[1h]))"#
        ),
        set(&["ingero_cost_barrier_idle_total"])
    );
    assert_eq!(
        metric_names(r#"label_replace(max by (a) (x_y), "cluster_id", "$1", "a", "(.*)")"#),
        set(&["x_y"])
    );
    assert_eq!(
        metric_names("a + on(b) group_left(c) d offset 5m > bool 3"),
        set(&["a", "d"])
    );
    assert_eq!(
        metric_names("rate(foo[$__rate_interval]) / ignoring (x) bar:baz:sum"),
        set(&["foo", "bar:baz:sum"])
    );
    assert_eq!(metric_names("24 * sum(x) without (y) and 1e3"), set(&["x"]));
    assert_eq!(metric_names(r#"{__name__="x"}"#), set(&[]));
    assert_eq!(label_values_metric("label_values(m{a=\"b\"}, c)"), "m");
}

#[test]
fn promtool_accepts_the_rules() {
    let Some(promtool) = promtool() else {
        return;
    };
    let out = Command::new(promtool)
        .arg("check")
        .arg("rules")
        .arg(rules_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Dashboard queries are PromQL too: wrapped as recording rules (Grafana variables
/// replaced by plausible values) they must pass `promtool check rules`.
#[test]
fn promtool_accepts_the_dashboard_queries() {
    let Some(promtool) = promtool() else {
        return;
    };
    let (exprs, _) = dashboard_exprs(&dashboard());
    assert!(exprs.len() >= 10);
    let mut yaml = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "2m")
            .replace("$__interval", "1m")
            .replace("$__range", "6h")
            .replace("$cluster", ".*");
        yaml.push_str(&format!(
            "      - record: dashboard:query_{i}:check\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    let dir = std::env::temp_dir().join(format!("provider-processor-dash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dashboard-rules.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(promtool)
        .arg("check")
        .arg("rules")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "promtool rejected a dashboard query:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[allow(clippy::print_stdout)] // the skip must be visible in the test output
fn promtool() -> Option<&'static str> {
    match Command::new("promtool").arg("--version").output() {
        Ok(o) if o.status.success() => Some("promtool"),
        _ => {
            println!(
                "SKIPPED: promtool is not installed (apt-get install -y prometheus); CI installs it"
            );
            None
        }
    }
}

#[test]
fn every_metric_read_is_exported_and_every_recorded_name_is_defined() {
    let (exported, tagged) = exported();
    let rules = rules();
    let rule_list = rule_exprs(&rules);
    let recorded: BTreeSet<String> = rule_list
        .iter()
        .filter(|(_, _, is_record)| *is_record)
        .map(|(n, _, _)| n.clone())
        .collect();
    let (exprs, vars) = dashboard_exprs(&dashboard());
    let mut read: Vec<(String, String)> = Vec::new();
    for (name, expr, _) in &rule_list {
        for m in metric_names(expr) {
            read.push((format!("rule {name}"), m));
        }
    }
    for e in &exprs {
        for m in metric_names(e) {
            read.push((format!("dashboard query {e}"), m));
        }
    }
    for q in &vars {
        read.push((format!("dashboard variable {q}"), label_values_metric(q)));
    }
    assert!(read.len() > 30);
    let mut used = BTreeSet::new();
    for (where_, m) in &read {
        if m.contains(':') {
            assert!(
                recorded.contains(m),
                "{where_} reads {m}, which no recording rule defines"
            );
        } else {
            assert!(
                exported.contains(m),
                "{where_} reads {m}, missing from exported-metrics.txt"
            );
            assert!(
                tagged.contains(m),
                "{where_} reads {m}: tag it `# dashboard` in exported-metrics.txt"
            );
            used.insert(m.clone());
        }
    }
    // Nothing tagged that nobody reads.
    for m in &tagged {
        assert!(
            used.contains(m),
            "{m} is tagged `# dashboard` but neither the rules nor the dashboard read it"
        );
    }
    let ours: BTreeSet<String> = metrics::FAMILIES
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    // Every metric this processor emits is listed.
    for m in &ours {
        assert!(
            exported.contains(m),
            "{m} is emitted but missing from exported-metrics.txt"
        );
    }
    // The dashboard shows each of the four subjects.
    let all: String = exprs.join("\n");
    for needle in ["threshold", "straggler", "peer_lag", "cost"] {
        assert!(all.contains(needle), "dashboard has no {needle} query");
    }
}

#[test]
fn dashboard_is_well_formed() {
    let d = dashboard();
    assert!(d["title"].is_string() && d["uid"].is_string());
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_i64().unwrap()),
            "duplicate panel id {}",
            p["id"]
        );
        let g = &p["gridPos"];
        for k in ["x", "y", "w", "h"] {
            assert!(g[k].is_i64(), "panel {} gridPos.{k}", p["id"]);
        }
        assert!(g["x"].as_i64().unwrap() + g["w"].as_i64().unwrap() <= 24);
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {}", p["id"]);
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "panel {} has no query", p["id"]);
            let refs: BTreeSet<_> = targets
                .iter()
                .map(|t| t["refId"].as_str().unwrap())
                .collect();
            assert_eq!(refs.len(), targets.len(), "panel {} refIds", p["id"]);
        }
    }
}
