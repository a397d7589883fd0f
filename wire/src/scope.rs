//! Fleet's [`RequestScope`]: a request and a resource belong to a cluster.
//!
//! A push names its cluster in the `cluster_id` query parameter, else the
//! `ingero.cluster.id` request header (gRPC: the `cluster_id`, else `ingero.cluster.id`
//! metadata entry); a resource in its `ingero.cluster.id` attribute, settled by
//! [`crate::cluster_identity`]; ids follow [`crate::cluster_id::validate_cluster_id`], node
//! ids [`crate::cluster_id::validate_node_id`]. `ingero-fleet` and `ingero-echo` register
//! [`ClusterScope`] with their component sets; the host itself knows none of these names.

use std::borrow::Cow;

use component::otlp::{AnyValueKind, KeyValue, find};
use component::scope::{HeaderName, RequestScope, ScopeKey, ScopeRefusal, ScopeSource};

use crate::cluster_id::{
    ClusterIdParam, MAX_CLUSTER_ID_LEN, cluster_id_from_query, header_cluster_id, push_cluster,
    validate_cluster_id, validate_node_id,
};
use crate::cluster_identity::{self, CLUSTER_KEY, IdentityError};
use crate::http::{PARAM_CLUSTER_ID, REQUEST_HEADER_CLUSTER_ID};
use crate::resource::NODE_ID;

/// The request header naming the cluster, parsed once.
static CLUSTER_ID_HEADER: HeaderName = HeaderName::from_static(REQUEST_HEADER_CLUSTER_ID);

/// The cluster of a request and a resource, as the agent protocol defines it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterScope;

fn refusal(e: IdentityError) -> ScopeRefusal {
    ScopeRefusal {
        reason: e.reason(),
        message: Cow::Owned(e.to_string()),
    }
}

impl RequestScope for ClusterScope {
    fn name(&self) -> &'static str {
        "cluster"
    }

    fn key(&self) -> Option<&ScopeKey> {
        Some(&CLUSTER_KEY)
    }

    fn request_scope<'a>(&self, source: ScopeSource<'a>) -> Result<Option<Cow<'a, str>>, String> {
        match source {
            ScopeSource::Http { query, headers } => {
                push_cluster(query, headers.get(&CLUSTER_ID_HEADER).map(|h| h.as_bytes()))
            }
            ScopeSource::Grpc(get) => {
                for key in [PARAM_CLUSTER_ID, REQUEST_HEADER_CLUSTER_ID] {
                    if let Some(v) = get(key) {
                        let v = header_cluster_id(v).map_err(|e| format!("{key} metadata: {e}"))?;
                        return Ok(Some(Cow::Borrowed(v)));
                    }
                }
                Ok(None)
            }
            ScopeSource::Query(query) => match cluster_id_from_query(query) {
                ClusterIdParam::Valid(c) => Ok(Some(c)),
                ClusterIdParam::Missing => Ok(None),
                ClusterIdParam::Invalid(e) => Err(format!("{PARAM_CLUSTER_ID}: {e}")),
            },
        }
    }

    fn validate_id(&self, id: &str) -> Result<(), &'static str> {
        validate_cluster_id(id)
    }

    fn max_id_len(&self) -> usize {
        MAX_CLUSTER_ID_LEN
    }

    fn settle_resource(&self, attrs: &mut Vec<KeyValue>) -> Result<bool, ScopeRefusal> {
        cluster_identity::settle_resource(attrs).map_err(refusal)
    }

    fn resource_settled(&self, attrs: &[KeyValue]) -> Option<bool> {
        cluster_identity::resource_settled(attrs)
    }

    fn settle_point(
        &self,
        attrs: &mut Vec<KeyValue>,
        scope: Option<&str>,
    ) -> Result<(), ScopeRefusal> {
        cluster_identity::settle_point(attrs, scope).map_err(refusal)
    }

    /// A resource whose `ingero.node.id` is not a string or breaks the id rule.
    fn check_metrics_resource(&self, attrs: &[KeyValue]) -> Result<(), ScopeRefusal> {
        let Some(node) = find(attrs, NODE_ID) else {
            return Ok(());
        };
        let checked = match node {
            AnyValueKind::StringValue(n) => validate_node_id(n),
            _ => Err("node id is not a string"),
        };
        checked.map_err(|why| ScopeRefusal {
            reason: "node_id_invalid",
            message: Cow::Owned(format!("{NODE_ID} refused: {why}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::CLUSTER_ID;
    use component::otlp::{kv_i64, kv_str};
    use component::scope::HeaderMap;

    #[test]
    fn http_requests_name_their_cluster_as_push_cluster_reads_it() {
        fn http<'a>(
            query: Option<&'a str>,
            headers: &'a HeaderMap,
        ) -> Result<Option<Cow<'a, str>>, String> {
            ClusterScope.request_scope(ScopeSource::Http { query, headers })
        }
        let mut h = HeaderMap::new();
        assert_eq!(
            http(Some("cluster_id=prod"), &h).unwrap().as_deref(),
            Some("prod")
        );
        assert_eq!(http(None, &h).unwrap(), None);
        h.insert("ingero.cluster.id", "hdr".parse().unwrap());
        assert_eq!(http(None, &h).unwrap().as_deref(), Some("hdr"));
        assert_eq!(
            http(Some("cluster_id=q"), &h).unwrap().as_deref(),
            Some("q")
        );
        assert_eq!(
            http(Some("cluster_id=a&cluster_id=b"), &h).unwrap_err(),
            "cluster_id: query parameter cluster_id given more than once"
        );
        h.insert("ingero.cluster.id", "a\tb".parse().unwrap());
        assert_eq!(
            http(None, &h).unwrap_err(),
            "ingero.cluster.id header: cluster_id contains a control character or line break"
        );
    }

    #[test]
    fn grpc_metadata_prefers_cluster_id_then_the_header_key() {
        let md = |pairs: &'static [(&'static str, &'static [u8])]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
        };
        let both = md(&[("ingero.cluster.id", b"h"), ("cluster_id", b"c")]);
        assert_eq!(
            ClusterScope
                .request_scope(ScopeSource::Grpc(&both))
                .unwrap()
                .as_deref(),
            Some("c")
        );
        let header = md(&[("ingero.cluster.id", b"h")]);
        assert_eq!(
            ClusterScope
                .request_scope(ScopeSource::Grpc(&header))
                .unwrap()
                .as_deref(),
            Some("h")
        );
        let none = md(&[]);
        assert_eq!(
            ClusterScope
                .request_scope(ScopeSource::Grpc(&none))
                .unwrap(),
            None
        );
        let bad = md(&[("cluster_id", b"a\xffb")]);
        assert_eq!(
            ClusterScope
                .request_scope(ScopeSource::Grpc(&bad))
                .unwrap_err(),
            "cluster_id metadata: not visible ASCII"
        );
    }

    #[test]
    fn api_queries_read_the_cluster_id_parameter() {
        let q = |s| ClusterScope.request_scope(ScopeSource::Query(s));
        assert_eq!(q(Some("cluster_id=a%20b")).unwrap().as_deref(), Some("a b"));
        assert_eq!(q(None).unwrap(), None);
        assert_eq!(
            q(Some("cluster_id=")).unwrap_err(),
            "cluster_id: cluster_id is empty"
        );
    }

    #[test]
    fn ids_keys_and_limits_are_the_cluster_rules() {
        assert_eq!(ClusterScope.key().map(|k| k.key()), Some(CLUSTER_ID));
        assert_eq!(ClusterScope.max_id_len(), 256);
        assert_eq!(ClusterScope.validate_id("prod"), Ok(()));
        assert_eq!(ClusterScope.validate_id(""), Err("cluster_id is empty"));
    }

    #[test]
    fn resources_and_points_settle_with_the_identity_messages() {
        let mut a = vec![kv_str("ingero_cluster_id", "a"), kv_str(CLUSTER_ID, "a")];
        assert_eq!(ClusterScope.settle_resource(&mut a), Ok(true));
        assert_eq!(a, [kv_str(CLUSTER_ID, "a")]);
        let mut int = vec![kv_i64(CLUSTER_ID, 7)];
        let e = ClusterScope.settle_resource(&mut int).unwrap_err();
        assert_eq!(e.reason, "cluster_id_not_string");
        assert_eq!(e.to_string(), "ingero.cluster.id is not a string");
        let mut crlf = vec![kv_str(CLUSTER_ID, "a\r\n")];
        let e = ClusterScope.settle_resource(&mut crlf).unwrap_err();
        assert_eq!(e.reason, "cluster_id_invalid");
        assert_eq!(
            e.to_string(),
            "ingero.cluster.id refused: cluster_id contains a control character or line break"
        );
        let mut p = vec![kv_str("ingero.cluster.id", "b")];
        let e = ClusterScope.settle_point(&mut p, Some("a")).unwrap_err();
        assert_eq!(e.reason, "cluster_id_conflict");
        assert_eq!(e.message, IdentityError::Conflict.to_string());
    }

    #[test]
    fn metrics_resources_need_a_valid_node_id_when_they_name_one() {
        assert_eq!(
            ClusterScope.check_metrics_resource(&[kv_str("a", "b")]),
            Ok(())
        );
        assert_eq!(
            ClusterScope.check_metrics_resource(&[kv_str(NODE_ID, "n1")]),
            Ok(())
        );
        let e = ClusterScope
            .check_metrics_resource(&[kv_i64(NODE_ID, 1)])
            .unwrap_err();
        assert_eq!(e.reason, "node_id_invalid");
        assert_eq!(
            e.to_string(),
            "ingero.node.id refused: node id is not a string"
        );
        let e = ClusterScope
            .check_metrics_resource(&[kv_str(NODE_ID, "n\r1")])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ingero.node.id refused: node id contains a control character or line break"
        );
    }
}
