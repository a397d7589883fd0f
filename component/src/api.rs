//! A socket-free HTTP model for component-served endpoints (threshold API, diagnostics).
//! Components route an [`ApiRequest`] to an [`ApiResponse`]; the host owns the listener.
//! Tests and the C ABI drive the same routing without a socket.

use crate::text::form_decode_lossy;

/// The parts of an HTTP request a component route looks at.
#[derive(Debug, Clone, Copy)]
pub struct ApiRequest<'a> {
    pub method: &'a str,
    /// Path without the query string.
    pub path: &'a str,
    /// Raw query string (without `?`), if any.
    pub query: Option<&'a str>,
}

/// A complete response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl ApiResponse {
    pub fn json(status: u16, body: Vec<u8>) -> Self {
        ApiResponse {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body,
        }
    }

    /// `{"error": message}` with the given status.
    pub fn json_error(status: u16, message: &str) -> Self {
        let body = serde_json::to_vec(&serde_json::json!({ "error": message }))
            .unwrap_or_else(|_| b"{\"error\":\"internal\"}".to_vec());
        ApiResponse::json(status, body)
    }

    pub fn not_found() -> Self {
        ApiResponse::json_error(404, "not found")
    }

    pub fn method_not_allowed(allow: &'static str) -> Self {
        let mut r = ApiResponse::json_error(405, "method not allowed");
        r.headers.push(("Allow", allow.to_string()));
        r
    }
}

/// Routes one request of an [`ApiListener`] for a caller that sees `Visibility`.
pub type ApiRoute =
    std::sync::Arc<dyn Fn(&ApiRequest<'_>, Visibility<'_>) -> ApiResponse + Send + Sync>;

/// A listener an extension binds and serves itself (see
/// [`crate::Extension::served_listeners`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedListener {
    /// The listener is called `<extension id>/<name>` in logs and telemetry.
    pub name: &'static str,
    /// Config key of the endpoint under the extension (`endpoint`).
    pub endpoint_key: &'static str,
    pub endpoint: String,
}

/// An HTTP listener an extension asks its host to serve: the host binds `endpoint` (with
/// the extension's `tls` block), checks bearer tokens when the extension names an `auth`
/// authenticator, and hands each request to `route`.
#[derive(Clone)]
pub struct ApiListener {
    /// The listener is called `<extension id>/<name>` in logs and telemetry.
    pub name: &'static str,
    /// Config key of the endpoint under the extension (`agent_endpoint`).
    pub endpoint_key: &'static str,
    pub endpoint: String,
    pub max_connections: usize,
    /// Connections open at once from one client address (0 = unlimited); beyond it a
    /// new connection evicts that address's least recently used idle one.
    pub max_connections_per_client: usize,
    /// A connection that sends no byte this long after accept (or after its TLS
    /// handshake) is closed.
    pub first_byte_timeout: std::time::Duration,
    /// A connection with no request in service this long is closed.
    pub idle_timeout: std::time::Duration,
    /// Host names (and `host:port`) the listener's requests may be addressed to, besides
    /// IP addresses ([`crate::listen_addr::AllowedHosts`]); `None`: no such check (an
    /// open loopback listener still takes only local names).
    pub allowed_hosts: Option<Vec<String>>,
    /// Behind `auth`: an admin listener's requests are diagnostics reads and need a token
    /// scoped to every cluster unless they name one; otherwise threshold reads.
    pub admin: bool,
    /// Paths under this prefix are served without authentication, to a caller that sees
    /// no cluster: static pages that hold no data (the live view's HTML, script and style,
    /// which then read the data with the caller's token).
    pub public_prefix: Option<&'static str>,
    pub route: ApiRoute,
}

impl std::fmt::Debug for ApiListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiListener")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Which clusters a caller may see.
#[derive(Clone, Copy)]
pub enum Visibility<'a> {
    /// Every cluster (no authentication, or a token scoped to `"*"`).
    All,
    /// Only the clusters this predicate accepts.
    Only(&'a (dyn Fn(&str) -> bool + Sync)),
}

impl std::fmt::Debug for Visibility<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Visibility::All => "All",
            Visibility::Only(_) => "Only(..)",
        })
    }
}

/// The visibility of a caller that sees no cluster.
pub const NOTHING: Visibility<'static> = Visibility::Only(&sees_nothing);

fn sees_nothing(_: &str) -> bool {
    false
}

impl Visibility<'_> {
    /// Whether the caller may see `cluster`.
    pub fn allows(&self, cluster: &str) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Only(f) => f(cluster),
        }
    }
}

/// Iterate `key=value` pairs of a query string, percent-decoded (`+` is a space) by
/// [`form_decode_lossy`]: malformed escapes are kept literally, bytes that are not UTF-8
/// replaced; a pair without `=` has an empty value.
pub fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (
            form_decode_lossy(k).into_owned(),
            form_decode_lossy(v).into_owned(),
        )
    })
}

/// Every value of a query parameter, in order.
pub fn query_values(query: Option<&str>, key: &str) -> Vec<String> {
    match query {
        Some(q) => query_pairs(q)
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_decode_and_repeat() {
        let q = Some("cluster_id=prod%2Da&x=1&cluster_id=b+c&flag");
        assert_eq!(query_values(q, "cluster_id"), ["prod-a", "b c"]);
        assert_eq!(query_values(q, "flag"), [""]);
        assert!(query_values(None, "cluster_id").is_empty());
    }

    #[test]
    fn malformed_escapes_are_kept() {
        let q = Some("k=a%zz%4&k=%41%&k=%0d%0a&k=%FF");
        assert_eq!(query_values(q, "k"), ["a%zz%4", "A%", "\r\n", "\u{FFFD}"]);
    }
}
