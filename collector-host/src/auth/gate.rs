//! The HTTP and gRPC faces of the gate: reading `Authorization`, the 401/403/429 answers,
//! and handler wrappers for the threshold API, the Prometheus scrape and the health check.

use std::sync::Arc;

use component::api::{ApiRequest, ApiRoute, Visibility};
use component::scope::ScopeSource;
use http::{HeaderMap, HeaderValue, Request};
use hyper::body::Incoming;

use super::{Action, Denial, ListenerAuth};
use crate::server::{Body, Handler, response};

/// `WWW-Authenticate` of a 401 without a token, and with a bad one (RFC 6750).
const CHALLENGE: &str = "Bearer realm=\"ingero-fleet\"";
const CHALLENGE_INVALID: &str = "Bearer realm=\"ingero-fleet\", error=\"invalid_token\"";

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive).
pub fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let t = rest.trim_ascii();
    (!t.is_empty() && !t.contains(&b' ')).then_some(t)
}

/// More than one `Authorization` header (or metadata entry): refused as unauthenticated.
pub use component::middleware::RepeatedHeader;

/// The single `Authorization` header's value; `Err` when it is repeated.
pub fn authorization(h: &HeaderMap) -> Result<Option<&[u8]>, RepeatedHeader> {
    let mut it = h.get_all(http::header::AUTHORIZATION).iter();
    let first = it.next().map(HeaderValue::as_bytes);
    if it.next().is_some() {
        return Err(RepeatedHeader);
    }
    Ok(first)
}

/// Human-readable reason sent in a refusal body (never names a cluster).
pub fn message(d: Denial) -> &'static str {
    match d {
        Denial::Unauthenticated {
            token_presented: false,
        } => "missing bearer token: send Authorization: Bearer <token>",
        Denial::Unauthenticated {
            token_presented: true,
        } => "invalid or expired bearer token",
        Denial::Forbidden => "this token is not allowed to access what this request names",
        Denial::RateLimited { .. } => {
            "this token's rate limit is exceeded; retry after the Retry-After delay"
        }
    }
}

pub fn status(d: Denial) -> u16 {
    match d {
        Denial::Unauthenticated { .. } => 401,
        Denial::Forbidden => 403,
        Denial::RateLimited { .. } => 429,
    }
}

/// The `WWW-Authenticate` value of a 401.
pub fn challenge(token_presented: bool) -> &'static str {
    if token_presented {
        CHALLENGE_INVALID
    } else {
        CHALLENGE
    }
}

/// Add `WWW-Authenticate` / `Retry-After` to a refusal.
pub fn decorate(r: &mut http::Response<Body>, d: Denial) {
    let h = r.headers_mut();
    match d {
        Denial::Unauthenticated { token_presented } => {
            h.insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge(token_presented)),
            );
        }
        Denial::RateLimited { retry_after_secs } => {
            h.insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs),
            );
        }
        Denial::Forbidden => {}
    }
}

/// A JSON refusal (`{"error": ...}`) for the API, scrape and health listeners.
pub fn json_denial(d: Denial) -> http::Response<Body> {
    let body = serde_json::json!({ "error": message(d) }).to_string();
    let mut r = response(status(d), "application/json", body);
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    decorate(&mut r, d);
    r
}

/// Gate a whole listener: any valid token (`need_all: false`, health check) or a token
/// scoped to every cluster (`need_all: true`, Prometheus scrape).
pub fn guard(inner: Handler, auth: ListenerAuth, action: Action, need_all: bool) -> Handler {
    Arc::new(move |req: Request<Incoming>, peer| {
        let entry = match auth.check(authorization(req.headers()), Some(peer), action, None) {
            Ok(e) => e,
            Err(d) => return Box::pin(async move { json_denial(d) }),
        };
        if need_all && !entry.scope.is_all() {
            auth.deny(&entry, Some(peer), action, None, Denial::Forbidden);
            return Box::pin(async move {
                let body = serde_json::json!({
                    "error": "this endpoint needs a token scoped to every cluster (\"*\")"
                })
                .to_string();
                response(403, "application/json", body)
            });
        }
        auth.allowed(&entry, Some(peer), action, None);
        inner(req, peer)
    })
}

/// An extension's API listener behind the gate: threshold reads (`admin: false`) or
/// diagnostics (`admin: true`). The route gets the caller's [`Visibility`]: out-of-scope
/// clusters answer exactly as unknown ones (and are audited as `forbidden`).
///
/// Paths under `public_prefix` (static pages that hold no data) skip the token check and are
/// routed for a caller that sees no cluster.
pub fn api_listener(
    route: ApiRoute,
    admin: bool,
    public_prefix: Option<&'static str>,
    auth: ListenerAuth,
) -> Handler {
    Arc::new(move |req: Request<Incoming>, peer| {
        let route = route.clone();
        let auth = auth.clone();
        Box::pin(async move {
            if public_prefix.is_some_and(|p| req.uri().path().starts_with(p)) {
                let api = ApiRequest {
                    method: req.method().as_str(),
                    path: req.uri().path(),
                    query: req.uri().query(),
                };
                return api_response(route(&api, component::api::NOTHING));
            }
            let action = if admin {
                Action::Diagnostics
            } else {
                Action::GetThreshold
            };
            let query = req.uri().query();
            let cluster = auth
                .scope()
                .request_scope(ScopeSource::Query(query))
                .ok()
                .flatten();
            let entry = match auth.check(authorization(req.headers()), Some(peer), action, None) {
                Ok(e) => e,
                Err(d) => return json_denial(d),
            };
            let scope = |c: &str| entry.scope.allows(c);
            let vis = if entry.scope.is_all() {
                Visibility::All
            } else {
                Visibility::Only(&scope)
            };
            match cluster.as_deref() {
                Some(c) if !entry.scope.allows(c) => {
                    auth.deny(&entry, Some(peer), action, Some(c), Denial::Forbidden)
                }
                None if admin && !entry.scope.is_all() => {
                    auth.deny(&entry, Some(peer), action, None, Denial::Forbidden)
                }
                c => auth.allowed(&entry, Some(peer), action, c),
            }
            let api = ApiRequest {
                method: req.method().as_str(),
                path: req.uri().path(),
                query,
            };
            api_response(route(&api, vis))
        })
    })
}

fn api_response(out: component::api::ApiResponse) -> http::Response<Body> {
    let mut r = response(out.status, out.content_type, out.body);
    for (k, v) in out.headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"BEARER abc"), Some(&b"abc"[..]));
        for bad in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearerabc",
            b"Basic abc",
            b"Bearer a b",
            b"",
        ] {
            assert_eq!(
                bearer_token(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn repeated_authorization_is_refused() {
        let mut h = HeaderMap::new();
        assert_eq!(authorization(&h), Ok(None));
        h.append(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer a"),
        );
        assert_eq!(authorization(&h), Ok(Some(&b"Bearer a"[..])));
        h.append(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer b"),
        );
        assert_eq!(authorization(&h), Err(RepeatedHeader));
    }
}
