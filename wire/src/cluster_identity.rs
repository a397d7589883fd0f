//! One cluster identity per resource.
//!
//! Auth, the processors and the exporters must agree on which cluster a resource belongs
//! to, or a token scoped to cluster A could pass auth as A and still be exported as B. The
//! places that disagreed: [`component::otlp::get_str`] reads the first `ingero.cluster.id`, the
//! Prometheus exporter lets a later duplicate key win, turns an int or array into a label
//! (`"7"`, `"[\"b\"]"`), and joins every attribute whose key sanitises to the label name
//! `ingero_cluster_id` (`ingero_cluster_id`, `ingero-cluster-id`, ...) with `;`.
//!
//! The rule, applied once on the ingest path before anything else reads the payload:
//! every resource attribute whose key becomes the label `ingero_cluster_id`
//! ([`is_cluster_id_key`]) must be a string, pass [`crate::cluster_id::validate_cluster_id`],
//! and equal every other such attribute; [`settle_resource`] then leaves exactly one
//! `ingero.cluster.id` attribute. A data-point attribute with such a key must equal the
//! resource's cluster (then it is removed, being redundant) or its point is dropped
//! ([`settle_point`]). Whatever breaks the rule is refused, never guessed.

use std::fmt;

use crate::cluster_id::validate_cluster_id;
use crate::resource::CLUSTER_ID;
use component::otlp::{AnyValueKind, KeyValue};
use component::scope::ScopeKey;

/// The cluster attribute and its aliases: every key that becomes the Prometheus label
/// `ingero_cluster_id` (every character outside `[a-zA-Z0-9_]` turns into `_`, as the
/// exporter sanitises label names).
pub const CLUSTER_KEY: ScopeKey = ScopeKey::new(CLUSTER_ID, "ingero_cluster_id");

/// Whether `key` becomes the Prometheus label `ingero_cluster_id`:
/// `ingero.cluster.id`, `ingero_cluster_id`, `ingero-cluster/id`, `ingero cluster id`, ...
#[inline]
pub fn is_cluster_id_key(key: &str) -> bool {
    CLUSTER_KEY.matches(key)
}

/// Why a resource's (or a point's) cluster identity was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityError {
    /// A cluster-id attribute whose value is not a string (int, array, map, absent).
    NotString,
    /// A cluster-id string that breaks the id rule (empty, too long, control characters).
    Invalid(&'static str),
    /// Two cluster-id attributes with different values, or a point naming another cluster
    /// than its resource.
    Conflict,
}

impl IdentityError {
    /// The telemetry `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            IdentityError::NotString => "cluster_id_not_string",
            IdentityError::Invalid(_) => "cluster_id_invalid",
            IdentityError::Conflict => "cluster_id_conflict",
        }
    }
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityError::NotString => f.write_str("ingero.cluster.id is not a string"),
            IdentityError::Invalid(why) => write!(f, "ingero.cluster.id refused: {why}"),
            IdentityError::Conflict => f.write_str(
                "more than one cluster id (duplicate or alias attributes such as \
                 ingero_cluster_id with different values, or a data point naming another \
                 cluster than its resource)",
            ),
        }
    }
}

impl std::error::Error for IdentityError {}

fn as_str(kv: &KeyValue) -> Result<&str, IdentityError> {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValueKind::StringValue(s)) => Ok(s),
        _ => Err(IdentityError::NotString),
    }
}

/// The cluster a resource's attributes name, checked by the rule above (without changing
/// them): `Ok(None)` when no attribute names one.
pub fn resource_cluster(attrs: &[KeyValue]) -> Result<Option<&str>, IdentityError> {
    let mut found: Option<&str> = None;
    for kv in attrs.iter().filter(|kv| is_cluster_id_key(&kv.key)) {
        let v = as_str(kv)?;
        match found {
            None => {
                validate_cluster_id(v).map_err(IdentityError::Invalid)?;
                found = Some(v);
            }
            Some(f) if f == v => {}
            Some(_) => return Err(IdentityError::Conflict),
        }
    }
    Ok(found)
}

/// Check a resource's attributes (see [`resource_cluster`]) and leave exactly one cluster
/// attribute, keyed `ingero.cluster.id`, where the first one was; duplicates and aliases
/// with the same value are removed. On `Err` nothing is changed. Returns whether the
/// resource names a cluster.
/// Read-only [`settle_resource`]: `Some(names)` when it would change nothing and answer
/// `Ok(names)` (no cluster attribute, or exactly one, keyed `ingero.cluster.id`, valid);
/// `None` when it would change or refuse them.
pub fn resource_settled(attrs: &[KeyValue]) -> Option<bool> {
    let mut keys = attrs.iter().filter(|kv| is_cluster_id_key(&kv.key));
    match (keys.next(), keys.next()) {
        (None, _) => Some(false),
        (Some(kv), None) if kv.key == CLUSTER_ID && resource_cluster(attrs).is_ok() => Some(true),
        _ => None,
    }
}

pub fn settle_resource(attrs: &mut Vec<KeyValue>) -> Result<bool, IdentityError> {
    let mut count = 0usize;
    let mut canonical = true;
    for kv in attrs.iter().filter(|kv| is_cluster_id_key(&kv.key)) {
        count += 1;
        canonical &= kv.key == CLUSTER_ID;
    }
    if count == 0 {
        return Ok(false);
    }
    resource_cluster(attrs)?;
    if count == 1 && canonical {
        return Ok(true);
    }
    let mut first = true;
    attrs.retain_mut(|kv| {
        if !is_cluster_id_key(&kv.key) {
            return true;
        }
        if first {
            first = false;
            if kv.key != CLUSTER_ID {
                kv.key = CLUSTER_ID.to_string();
            }
            return true;
        }
        false
    });
    Ok(true)
}

/// Check a data point's attributes against its resource's cluster (`cluster`: the
/// resource's, else the request's): a cluster-id attribute equal to it is removed (so the
/// exported label is exactly the resource's); any other is an error, and the caller drops
/// the point. On `Err` nothing is changed.
pub fn settle_point(attrs: &mut Vec<KeyValue>, cluster: Option<&str>) -> Result<(), IdentityError> {
    if !attrs.iter().any(|kv| is_cluster_id_key(&kv.key)) {
        return Ok(());
    }
    for kv in attrs.iter().filter(|kv| is_cluster_id_key(&kv.key)) {
        let v = as_str(kv)?;
        if cluster != Some(v) {
            return Err(IdentityError::Conflict);
        }
    }
    attrs.retain(|kv| !is_cluster_id_key(&kv.key));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{AnyValue, kv_i64, kv_str};

    fn keys(attrs: &[KeyValue]) -> Vec<&str> {
        attrs.iter().map(|kv| kv.key.as_str()).collect()
    }

    #[test]
    fn every_spelling_of_the_label_is_a_cluster_key() {
        for k in [
            "ingero.cluster.id",
            "ingero_cluster_id",
            "ingero-cluster-id",
            "ingero cluster/id",
            "ingero.cluster_id",
            "ingeroécluster.id",
        ] {
            assert!(is_cluster_id_key(k), "{k:?}");
        }
        for k in [
            "ingero.node.id",
            "ingero.cluster.id2",
            "xingero.cluster.id",
            "Ingero.cluster.id",
            "ingero.cluster",
            "cluster_id",
            "",
        ] {
            assert!(!is_cluster_id_key(k), "{k:?}");
        }
    }

    /// The rule spelled out one character at a time: the reference the byte-level
    /// [`is_cluster_id_key`] must agree with.
    fn maps_to_label(key: &str) -> bool {
        let mapped: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        mapped == CLUSTER_KEY.label()
    }

    #[test]
    fn the_byte_level_key_check_agrees_with_the_character_rule() {
        let label = "ingero.cluster.id";
        let swaps = [
            ".",
            "_",
            "-",
            "/",
            " ",
            "x",
            "C",
            "\u{e9}",
            "\u{20ac}",
            "\u{1f600}",
            "\u{202e}",
            "",
            "..",
        ];
        let mut keys = vec![
            String::new(),
            label.to_string(),
            "ingero.workload.type".to_string(),
            "ingero.cgroup.path_hash".to_string(),
            "ingero.cluster.identity".to_string(),
            "ingero.clusterXid\u{e9}".to_string(),
        ];
        // Every position replaced (or removed, or doubled) by every swap, and every swap
        // added at either end.
        for i in 0..label.len() {
            for s in swaps {
                keys.push(format!("{}{s}{}", &label[..i], &label[i + 1..]));
                keys.push(format!("{}{s}{}", &label[..i], &label[i..]));
            }
        }
        for s in swaps {
            keys.push(format!("{s}{label}"));
            keys.push(format!("{label}{s}"));
        }
        let mut matched = 0;
        for k in &keys {
            assert_eq!(is_cluster_id_key(k), maps_to_label(k), "{k:?}");
            matched += usize::from(maps_to_label(k));
        }
        // The swaps that map to `_` at the two separators, and the non-ASCII spellings.
        assert!(matched > 20, "{matched}");
    }

    #[test]
    fn one_plain_cluster_id_is_left_alone() {
        let mut a = vec![kv_str("ingero.node.id", "n1"), kv_str(CLUSTER_ID, "a")];
        let before = a.clone();
        assert_eq!(settle_resource(&mut a), Ok(true));
        assert_eq!(a, before);
        assert_eq!(resource_cluster(&a), Ok(Some("a")));
        let mut none = vec![kv_str("ingero.node.id", "n1")];
        assert_eq!(settle_resource(&mut none), Ok(false));
    }

    #[test]
    fn conflicting_duplicates_and_aliases_are_refused_unchanged() {
        let cases = [
            vec![kv_str(CLUSTER_ID, "a"), kv_str(CLUSTER_ID, "b")],
            vec![kv_str(CLUSTER_ID, "a"), kv_str("ingero_cluster_id", "b")],
            vec![kv_str("ingero-cluster-id", "b"), kv_str(CLUSTER_ID, "a")],
        ];
        for mut a in cases {
            let before = a.clone();
            assert_eq!(settle_resource(&mut a), Err(IdentityError::Conflict));
            assert_eq!(a, before);
        }
    }

    #[test]
    fn non_string_and_invalid_ids_are_refused() {
        let mut int = vec![kv_i64(CLUSTER_ID, 7)];
        assert_eq!(settle_resource(&mut int), Err(IdentityError::NotString));
        let mut array = vec![KeyValue {
            key: CLUSTER_ID.into(),
            value: Some(AnyValue {
                value: Some(AnyValueKind::ArrayValue(Default::default())),
            }),
            ..Default::default()
        }];
        assert_eq!(settle_resource(&mut array), Err(IdentityError::NotString));
        let mut absent = vec![KeyValue {
            key: "ingero_cluster_id".into(),
            value: None,
            ..Default::default()
        }];
        assert_eq!(settle_resource(&mut absent), Err(IdentityError::NotString));
        let mut crlf = vec![kv_str(CLUSTER_ID, "a\r\nb")];
        assert!(matches!(
            settle_resource(&mut crlf),
            Err(IdentityError::Invalid(_))
        ));
        let mut empty = vec![kv_str(CLUSTER_ID, "")];
        assert!(matches!(
            settle_resource(&mut empty),
            Err(IdentityError::Invalid(_))
        ));
    }

    #[test]
    fn agreeing_aliases_collapse_to_one_canonical_attribute() {
        let mut a = vec![
            kv_str("ingero_cluster_id", "a"),
            kv_str("ingero.node.id", "n"),
            kv_str(CLUSTER_ID, "a"),
            kv_str(CLUSTER_ID, "a"),
        ];
        assert_eq!(settle_resource(&mut a), Ok(true));
        assert_eq!(keys(&a), [CLUSTER_ID, "ingero.node.id"]);
        assert_eq!(resource_cluster(&a), Ok(Some("a")));
    }

    #[test]
    fn points_may_repeat_their_cluster_but_not_name_another() {
        let mut same = vec![
            kv_str("ingero.node.state", "active"),
            kv_str(CLUSTER_ID, "a"),
        ];
        assert_eq!(settle_point(&mut same, Some("a")), Ok(()));
        assert_eq!(keys(&same), ["ingero.node.state"]);

        let mut other = vec![kv_str("ingero_cluster_id", "b")];
        let before = other.clone();
        assert_eq!(
            settle_point(&mut other, Some("a")),
            Err(IdentityError::Conflict)
        );
        assert_eq!(other, before);
        // Without a resource or request cluster a point cannot name one either.
        assert_eq!(
            settle_point(&mut vec![kv_str(CLUSTER_ID, "b")], None),
            Err(IdentityError::Conflict)
        );
        assert_eq!(
            settle_point(&mut vec![kv_i64("ingero_cluster_id", 1)], Some("a")),
            Err(IdentityError::NotString)
        );
        let mut plain = vec![kv_str("ingero.node.state", "active")];
        assert_eq!(settle_point(&mut plain, None), Ok(()));
        assert_eq!(plain.len(), 1);
    }

    /// `resource_settled` answers `Some` exactly where `settle_resource` changes nothing
    /// and succeeds, with the same answer.
    #[test]
    fn resource_settled_is_settle_resource_without_the_changes() {
        let cases: Vec<Vec<KeyValue>> = vec![
            vec![],
            vec![kv_str("ingero.node.id", "n")],
            vec![kv_str(CLUSTER_ID, "a")],
            vec![kv_str("ingero.node.id", "n"), kv_str(CLUSTER_ID, "a")],
            vec![kv_str("ingero_cluster_id", "a")],
            vec![kv_str(CLUSTER_ID, "a"), kv_str(CLUSTER_ID, "a")],
            vec![kv_str(CLUSTER_ID, "a"), kv_str("ingero-cluster-id", "a")],
            vec![kv_str(CLUSTER_ID, "a"), kv_str(CLUSTER_ID, "b")],
            vec![kv_i64(CLUSTER_ID, 7)],
            vec![kv_str(CLUSTER_ID, "")],
            vec![kv_str(CLUSTER_ID, "a\r\nb")],
        ];
        for attrs in cases {
            let mut settled = attrs.clone();
            let r = settle_resource(&mut settled);
            match resource_settled(&attrs) {
                Some(named) => {
                    assert_eq!(r, Ok(named), "{attrs:?}");
                    assert_eq!(settled, attrs);
                }
                None => assert!(r.is_err() || settled != attrs, "{attrs:?}"),
            }
        }
    }
}
