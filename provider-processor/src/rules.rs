//! Operator provider rules (`node_providers.yaml`): parsing with every error reported,
//! and first-match evaluation against a resource's attributes.
//!
//! ```yaml
//! ip_attributes: [host.ip, k8s.node.ip]          # optional, see DEFAULT_IP_ATTRIBUTES
//! node_label_prefixes: [k8s.node.label.]         # optional, see DEFAULT_NODE_LABEL_PREFIXES
//! rules:
//!   - provider: coreweave
//!     node_id: "cw-*"                 # glob on ingero.node.id
//!   - provider: lambda
//!     ip_range: [10.20.0.0/16, 10.21.0.0/16]   # any IP attribute inside any range
//!   - name: gke pools are GCP         # optional, shown in diagnostics
//!     provider: gcp
//!     node_labels: {cloud.google.com/gke-nodepool: "*"}
//!   - provider: on-prem
//!     cluster_id: "lab-*"
//!     attributes: {host.name: "dgx-??"}
//! ```
//!
//! A rule matches when every matcher it has matches (at least one is required); rules are
//! tried in file order and the first match wins.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use component::config::{ConfigError, ConfigErrors, ConfigValue};
use component::otlp::{self, AnyValueKind, KeyValue};
use ingero_wire as wire;
use serde::Deserialize;

use crate::pattern::{Glob, IpNet};
use crate::provider::ProviderAliases;

/// Most rules a file may hold.
pub const MAX_RULES: usize = 4096;
/// Largest rules file read, in bytes.
pub const MAX_RULES_FILE_BYTES: u64 = 4 << 20;
/// Most entries in one rule's `node_labels` plus `attributes`, or in `ip_range`.
pub const MAX_MATCHERS_PER_RULE: usize = 32;
/// Resource attributes searched for IP addresses when the file does not say.
/// `host.ip` may be a string array; `ingero.node.id` counts only when it parses as an IP.
pub const DEFAULT_IP_ATTRIBUTES: &[&str] = &[
    "host.ip",
    "net.host.ip",
    "k8s.node.ip",
    wire::resource::NODE_ID,
];
/// Prefixes under which Kubernetes node labels arrive as resource attributes (the
/// semantic-convention form and the `k8sattributes` processor's default form).
pub const DEFAULT_NODE_LABEL_PREFIXES: &[&str] = &["k8s.node.label.", "k8s.node.labels."];

const TOP_LEVEL_KEYS: &[&str] = &["rules", "ip_attributes", "node_label_prefixes"];

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    name: Option<String>,
    provider: String,
    #[serde(default)]
    node_id: Option<String>,
    #[serde(default)]
    cluster_id: Option<String>,
    #[serde(default)]
    ip_range: Option<OneOrMany>,
    #[serde(default)]
    node_labels: BTreeMap<String, String>,
    #[serde(default)]
    attributes: BTreeMap<String, String>,
}

/// One attribute matcher: the first of `keys` present on the resource must match `glob`.
#[derive(Debug, Clone)]
struct AttrMatcher {
    keys: Vec<String>,
    glob: Glob,
}

/// One validated rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Position in the file (0-based).
    pub index: usize,
    pub name: Option<String>,
    /// Canonical provider id.
    pub provider: Arc<str>,
    node_id: Option<Glob>,
    cluster_id: Option<Glob>,
    ip_ranges: Vec<IpNet>,
    attrs: Vec<AttrMatcher>,
}

impl Rule {
    /// Only a wildcard-free `node_id`: such rules are found by a hash lookup.
    fn literal_node_id(&self) -> Option<&str> {
        if self.cluster_id.is_none() && self.ip_ranges.is_empty() && self.attrs.is_empty() {
            self.node_id.as_ref().and_then(Glob::as_literal)
        } else {
            None
        }
    }

    fn matches(&self, attrs: &[KeyValue], cx: &mut MatchContext<'_>) -> bool {
        if let Some(g) = &self.node_id
            && !cx.node.is_some_and(|v| g.matches(v))
        {
            return false;
        }
        if let Some(g) = &self.cluster_id
            && !cx.cluster.is_some_and(|v| g.matches(v))
        {
            return false;
        }
        for m in &self.attrs {
            let value = m.keys.iter().find_map(|k| otlp::get_str(attrs, k));
            if !value.is_some_and(|v| m.glob.matches(v)) {
                return false;
            }
        }
        if !self.ip_ranges.is_empty() {
            let found = cx.ips.get(attrs);
            if !found
                .iter()
                .any(|ip| self.ip_ranges.iter().any(|net| net.contains(*ip)))
            {
                return false;
            }
        }
        true
    }
}

/// What every rule looks at, read from the resource once.
struct MatchContext<'a> {
    node: Option<&'a str>,
    cluster: Option<&'a str>,
    ips: LazyIps<'a>,
}

/// The IP addresses of a resource, collected on first use.
struct LazyIps<'a> {
    keys: &'a [String],
    ips: Option<Vec<IpAddr>>,
}

impl LazyIps<'_> {
    fn get(&mut self, attrs: &[KeyValue]) -> &[IpAddr] {
        let keys = self.keys;
        self.ips.get_or_insert_with(|| {
            let mut out = Vec::new();
            for key in keys {
                match otlp::find(attrs, key) {
                    Some(AnyValueKind::StringValue(s)) => {
                        if let Ok(ip) = s.trim().parse() {
                            out.push(ip);
                        }
                    }
                    Some(AnyValueKind::ArrayValue(arr)) => {
                        for v in arr.values.iter().take(MAX_MATCHERS_PER_RULE) {
                            if let Some(AnyValueKind::StringValue(s)) = &v.value
                                && let Ok(ip) = s.trim().parse()
                            {
                                out.push(ip);
                            }
                        }
                    }
                    _ => {}
                }
            }
            out
        })
    }
}

/// A validated rules file, ready to match.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// Literal `node_id` -> index of the first literal-only rule naming it.
    literal_node: HashMap<String, usize>,
    /// Indices of every other rule, ascending.
    general: Vec<usize>,
    ip_attributes: Vec<String>,
}

impl RuleSet {
    /// No rules at all.
    pub fn empty() -> Self {
        RuleSet {
            ip_attributes: DEFAULT_IP_ATTRIBUTES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..RuleSet::default()
        }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Parse and validate a rules file. Every problem is returned, each with its path
    /// inside the file (`rules[3].ip_range[1]: invalid CIDR ...`). An empty document is an
    /// error (a truncated file must not silently remove every rule); write `rules: []`.
    pub fn parse(bytes: &[u8], aliases: &ProviderAliases) -> Result<RuleSet, ConfigErrors> {
        let value = component::config::parse_yaml(bytes).map_err(ConfigErrors::from)?;
        Self::from_value(&value, aliases)
    }

    fn from_value(value: &ConfigValue, aliases: &ProviderAliases) -> Result<RuleSet, ConfigErrors> {
        let mut errs = ConfigErrors::new();
        let Some(top) = value.as_object() else {
            let what = if value.is_null() {
                "the file is empty (write `rules: []` for no rules)"
            } else {
                "must be a mapping with a `rules` list"
            };
            return Err(ConfigError::new("", what).into());
        };
        let mut keys: Vec<&String> = top.keys().collect();
        keys.sort();
        for key in keys {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                errs.push(
                    key.as_str(),
                    format!("unknown field `{key}`, expected one of {TOP_LEVEL_KEYS:?}"),
                );
            }
        }
        let ip_attributes = string_list(top.get("ip_attributes"), "ip_attributes", &mut errs)
            .unwrap_or_else(|| {
                DEFAULT_IP_ATTRIBUTES
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            });
        let label_prefixes = string_list(
            top.get("node_label_prefixes"),
            "node_label_prefixes",
            &mut errs,
        )
        .unwrap_or_else(|| {
            DEFAULT_NODE_LABEL_PREFIXES
                .iter()
                .map(|s| s.to_string())
                .collect()
        });

        let raw_rules = match top.get("rules") {
            Some(ConfigValue::Array(a)) => a.as_slice(),
            Some(_) => {
                errs.push("rules", "must be a list");
                &[]
            }
            None => {
                errs.push("rules", "missing (write `rules: []` for no rules)");
                &[]
            }
        };
        if raw_rules.len() > MAX_RULES {
            errs.push(
                "rules",
                format!("{} rules exceed the cap of {MAX_RULES}", raw_rules.len()),
            );
        }

        let mut rules = Vec::with_capacity(raw_rules.len().min(MAX_RULES));
        for (i, raw) in raw_rules.iter().enumerate() {
            let path = format!("rules[{i}]");
            let parsed: RawRule = match serde_path_to_error::deserialize(raw) {
                Ok(r) => r,
                Err(e) => {
                    let inner = e.path().to_string();
                    let p = if inner == "." {
                        path
                    } else {
                        format!("{path}.{inner}")
                    };
                    errs.push(p, e.into_inner().to_string());
                    continue;
                }
            };
            if let Some(rule) = build_rule(i, parsed, aliases, &label_prefixes, &path, &mut errs) {
                rules.push(rule);
            }
        }
        errs.into_result()?;

        let mut literal_node = HashMap::new();
        let mut general = Vec::new();
        for rule in &rules {
            match rule.literal_node_id() {
                Some(id) => {
                    literal_node.entry(id.to_string()).or_insert(rule.index);
                }
                None => general.push(rule.index),
            }
        }
        Ok(RuleSet {
            rules,
            literal_node,
            general,
            ip_attributes,
        })
    }

    /// The first rule matching these resource attributes.
    pub fn first_match(&self, attrs: &[KeyValue]) -> Option<&Rule> {
        if self.rules.is_empty() {
            return None;
        }
        let node = otlp::get_str(attrs, wire::resource::NODE_ID);
        let literal = node.and_then(|n| self.literal_node.get(n)).copied();
        let mut cx = MatchContext {
            node,
            cluster: otlp::get_str(attrs, wire::resource::CLUSTER_ID),
            ips: LazyIps {
                keys: &self.ip_attributes,
                ips: None,
            },
        };
        for &i in &self.general {
            if literal.is_some_and(|l| l < i) {
                break;
            }
            if let Some(rule) = self.rules.get(i)
                && rule.matches(attrs, &mut cx)
            {
                return Some(rule);
            }
        }
        literal.and_then(|l| self.rules.get(l))
    }
}

fn string_list(
    v: Option<&ConfigValue>,
    path: &str,
    errs: &mut ConfigErrors,
) -> Option<Vec<String>> {
    let v = v?;
    let Some(arr) = v.as_array() else {
        errs.push(path, "must be a list of strings");
        return None;
    };
    let mut out = Vec::new();
    for (i, item) in arr.iter().enumerate() {
        match item.as_str() {
            Some(s) if !s.trim().is_empty() => out.push(s.trim().to_string()),
            _ => errs.push(format!("{path}[{i}]"), "must be a non-empty string"),
        }
    }
    if out.len() > MAX_MATCHERS_PER_RULE {
        errs.push(path, format!("more than {MAX_MATCHERS_PER_RULE} entries"));
    }
    Some(out)
}

fn build_rule(
    index: usize,
    raw: RawRule,
    aliases: &ProviderAliases,
    label_prefixes: &[String],
    path: &str,
    errs: &mut ConfigErrors,
) -> Option<Rule> {
    let before = errs.len();
    let provider = match aliases.normalise(&raw.provider) {
        Ok(p) => Some(p),
        Err(e) => {
            errs.push(format!("{path}.provider"), e.to_string());
            None
        }
    };
    let mut glob = |field: &str, s: &str| match Glob::parse(s) {
        Ok(g) => Some(g),
        Err(e) => {
            errs.push(format!("{path}.{field}"), e);
            None
        }
    };
    let node_id = raw.node_id.as_deref().and_then(|s| glob("node_id", s));
    let cluster_id = raw
        .cluster_id
        .as_deref()
        .and_then(|s| glob("cluster_id", s));
    let mut attrs = Vec::new();
    for (label, pattern) in &raw.node_labels {
        if let Some(g) = glob(&format!("node_labels.{label}"), pattern) {
            attrs.push(AttrMatcher {
                keys: label_prefixes
                    .iter()
                    .map(|p| format!("{p}{label}"))
                    .collect(),
                glob: g,
            });
        }
    }
    for (key, pattern) in &raw.attributes {
        if let Some(g) = glob(&format!("attributes.{key}"), pattern) {
            attrs.push(AttrMatcher {
                keys: vec![key.clone()],
                glob: g,
            });
        }
    }
    for key in raw.node_labels.keys().chain(raw.attributes.keys()) {
        if key.trim().is_empty() {
            errs.push(
                format!("{path}.{key}"),
                "attribute/label key must not be empty",
            );
        }
    }
    if raw.node_labels.len() + raw.attributes.len() > MAX_MATCHERS_PER_RULE {
        errs.push(
            path.to_string(),
            format!("more than {MAX_MATCHERS_PER_RULE} node_labels + attributes"),
        );
    }
    let ranges: Vec<String> = match raw.ip_range {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) => v,
    };
    if ranges.len() > MAX_MATCHERS_PER_RULE {
        errs.push(
            format!("{path}.ip_range"),
            format!("more than {MAX_MATCHERS_PER_RULE} ranges"),
        );
    }
    let mut ip_ranges = Vec::new();
    for (j, r) in ranges.iter().enumerate() {
        match IpNet::parse(r) {
            Ok(n) => ip_ranges.push(n),
            Err(e) => errs.push(format!("{path}.ip_range[{j}]"), e),
        }
    }
    let has_matcher = raw.node_id.is_some()
        || raw.cluster_id.is_some()
        || !ranges.is_empty()
        || !raw.node_labels.is_empty()
        || !raw.attributes.is_empty();
    if !has_matcher {
        errs.push(
            path.to_string(),
            "needs at least one of node_id, cluster_id, ip_range, node_labels, attributes",
        );
    }
    if errs.len() > before {
        return None;
    }
    Some(Rule {
        index,
        name: raw.name,
        provider: provider?,
        node_id,
        cluster_id,
        ip_ranges,
        attrs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{AnyValue, kv_str};
    use opentelemetry_proto::tonic::common::v1::ArrayValue;

    fn parse(yaml: &str) -> Result<RuleSet, ConfigErrors> {
        RuleSet::parse(yaml.as_bytes(), &ProviderAliases::builtin())
    }

    fn provider_of(rs: &RuleSet, attrs: &[KeyValue]) -> Option<String> {
        rs.first_match(attrs).map(|r| r.provider.to_string())
    }

    #[test]
    fn first_match_in_file_order_wins_even_across_the_literal_index() {
        let rs = parse(
            r#"
rules:
  - {provider: lambda, node_id: "gpu-*"}
  - {provider: coreweave, node_id: "gpu-7"}
  - {provider: gcp, node_id: "cpu-1"}
  - {provider: azure, node_id: "cpu-*"}
"#,
        )
        .unwrap();
        let node = |id: &str| vec![kv_str(wire::resource::NODE_ID, id)];
        // gpu-7 hits the literal index (rule 1) but rule 0 comes first.
        assert_eq!(provider_of(&rs, &node("gpu-7")).as_deref(), Some("lambda"));
        // cpu-1: literal rule 2 comes before the glob rule 3.
        assert_eq!(provider_of(&rs, &node("cpu-1")).as_deref(), Some("gcp"));
        assert_eq!(provider_of(&rs, &node("cpu-2")).as_deref(), Some("azure"));
        assert_eq!(provider_of(&rs, &node("tpu-1")), None);
        assert_eq!(provider_of(&rs, &[]), None);
    }

    #[test]
    fn every_matcher_of_a_rule_must_match() {
        let rs = parse(
            r#"
rules:
  - {provider: on-prem, cluster_id: "lab-*", node_id: "dgx-*"}
"#,
        )
        .unwrap();
        let attrs = |c: &str, n: &str| {
            vec![
                kv_str(wire::resource::CLUSTER_ID, c),
                kv_str(wire::resource::NODE_ID, n),
            ]
        };
        assert_eq!(
            provider_of(&rs, &attrs("lab-1", "dgx-01")).as_deref(),
            Some("on-prem")
        );
        assert_eq!(provider_of(&rs, &attrs("prod", "dgx-01")), None);
        assert_eq!(provider_of(&rs, &attrs("lab-1", "gpu-01")), None);
    }

    #[test]
    fn ip_ranges_match_string_and_array_attributes() {
        let rs = parse(
            r#"
ip_attributes: [host.ip, ingero.node.id]
rules:
  - {provider: lambda, ip_range: [10.20.0.0/16, "fd00::/8"]}
"#,
        )
        .unwrap();
        let arr = KeyValue {
            key: "host.ip".into(),
            key_strindex: 0,
            value: Some(AnyValue {
                value: Some(AnyValueKind::ArrayValue(ArrayValue {
                    values: vec![
                        AnyValue {
                            value: Some(AnyValueKind::StringValue("192.168.0.1".into())),
                        },
                        AnyValue {
                            value: Some(AnyValueKind::StringValue("fd00::5".into())),
                        },
                    ],
                })),
            }),
        };
        assert_eq!(provider_of(&rs, &[arr]).as_deref(), Some("lambda"));
        let by_node_id = vec![kv_str(wire::resource::NODE_ID, "10.20.1.2")];
        assert_eq!(provider_of(&rs, &by_node_id).as_deref(), Some("lambda"));
        let outside = vec![kv_str("host.ip", "10.30.1.2")];
        assert_eq!(provider_of(&rs, &outside), None);
        // k8s.node.ip is a default attribute but this file replaced the list.
        let not_listed = vec![kv_str("k8s.node.ip", "10.20.1.2")];
        assert_eq!(provider_of(&rs, &not_listed), None);
    }

    #[test]
    fn node_labels_use_either_prefix_and_aliases_normalise_the_provider() {
        let rs = parse(
            r#"
rules:
  - provider: AWS
    node_labels: {eks.amazonaws.com/nodegroup: "gpu-*"}
"#,
        )
        .unwrap();
        assert_eq!(&*rs.rules()[0].provider, "ec2");
        for prefix in DEFAULT_NODE_LABEL_PREFIXES {
            let attrs = vec![kv_str(
                &format!("{prefix}eks.amazonaws.com/nodegroup"),
                "gpu-h100",
            )];
            assert_eq!(provider_of(&rs, &attrs).as_deref(), Some("ec2"), "{prefix}");
        }
        let wrong = vec![kv_str("k8s.node.label.eks.amazonaws.com/nodegroup", "cpu")];
        assert_eq!(provider_of(&rs, &wrong), None);
    }

    #[test]
    fn every_error_is_reported_with_its_path() {
        let errs = parse(
            r#"
extra: 1
rules:
  - {provider: lambda}
  - {provider: "bad id!", node_id: "x"}
  - {provider: gcp, ip_range: [10.0.0.0/8, 10.0.0/8, "1.2.3.4/40"]}
  - {provider: gcp, node_id: "", nodeid: "x"}
  - "not a mapping"
  - {provider: gcp, node_labels: {gpu: ""}}
"#,
        )
        .unwrap_err();
        let got: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "extra",
                "rules[0]",
                "rules[1].provider",
                "rules[2].ip_range[1]",
                "rules[2].ip_range[2]",
                "rules[3].nodeid",
                "rules[4]",
                "rules[5].node_labels.gpu",
            ],
            "{got:#?}"
        );
        assert!(got[1].contains("needs at least one of"), "{}", got[1]);
        assert!(got[5].contains("unknown field `nodeid`"), "{}", got[5]);
    }

    #[test]
    fn cap_is_enforced_and_reported() {
        let mut yaml = String::from("rules:\n");
        for i in 0..=MAX_RULES {
            yaml.push_str(&format!("  - {{provider: gcp, node_id: n{i}}}\n"));
        }
        let errs = parse(&yaml).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs}");
        assert_eq!(errs.0[0].path, "rules");
        assert!(
            errs.0[0]
                .message
                .contains("4097 rules exceed the cap of 4096")
        );

        let mut yaml = String::from("rules:\n");
        for i in 0..MAX_RULES {
            yaml.push_str(&format!("  - {{provider: gcp, node_id: n{i}}}\n"));
        }
        let rs = parse(&yaml).unwrap();
        assert_eq!(rs.len(), MAX_RULES);
        let attrs = vec![kv_str(wire::resource::NODE_ID, "n4095")];
        assert_eq!(rs.first_match(&attrs).map(|r| r.index), Some(4095));
    }

    #[test]
    fn empty_documents_are_refused_but_empty_lists_are_fine() {
        assert!(parse("").unwrap_err().0[0].message.contains("empty"));
        assert!(parse("rules: []").unwrap().is_empty());
        assert_eq!(parse("rules: 3").unwrap_err().0[0].path, "rules");
        assert_eq!(parse("- a").unwrap_err().0[0].path, "");
        assert!(parse("rules: [").is_err());
    }
}
