//! The gate as an ingest request middleware: the token, rate limit and request cluster
//! before the body is read, the payload's clusters after decoding, then the audit record.

use std::net::SocketAddr;
use std::sync::Arc;

use component::middleware::{
    Admission, Refusal, RefusalCode, RequestMeta, RequestMiddleware, Signal,
};

use super::tokens::TokenEntry;
use super::{Action, Denial, ListenerAuth, gate};

impl RequestMiddleware for ListenerAuth {
    fn admit(&self, meta: &RequestMeta<'_>) -> Result<Box<dyn Admission>, Refusal> {
        let action = match meta.signal {
            Signal::Metrics => Action::PushMetrics,
            Signal::Traces => Action::PushTraces,
            Signal::Logs => Action::PushLogs,
        };
        let entry = self
            .check(meta.authorization, meta.peer, action, meta.cluster)
            .map_err(refusal)?;
        Ok(Box::new(AuthAdmission {
            auth: self.clone(),
            entry,
            peer: meta.peer,
            action,
        }))
    }
}

/// One authenticated export, waiting for its payload check.
struct AuthAdmission {
    auth: ListenerAuth,
    entry: Arc<TokenEntry>,
    peer: Option<SocketAddr>,
    action: Action,
}

impl Admission for AuthAdmission {
    fn tenant(&self) -> Option<std::sync::Arc<str>> {
        Some(std::sync::Arc::from(self.entry.fingerprint.as_str()))
    }

    fn check_payload(
        &self,
        request_cluster: Option<&str>,
        resources: &mut dyn Iterator<Item = Option<&str>>,
    ) -> Result<(), Refusal> {
        self.auth
            .check_payload(
                &self.entry,
                self.peer,
                self.action,
                request_cluster,
                resources,
            )
            .map_err(refusal)?;
        self.auth
            .allowed(&self.entry, self.peer, self.action, request_cluster);
        Ok(())
    }
}

/// A denial as the ingest path reports it (status, message, `WWW-Authenticate`,
/// `Retry-After`, and the refused-requests reason).
pub fn refusal(d: Denial) -> Refusal {
    let code = match d {
        Denial::Unauthenticated { .. } => RefusalCode::Unauthenticated,
        Denial::Forbidden => RefusalCode::PermissionDenied,
        Denial::RateLimited { .. } => RefusalCode::ResourceExhausted,
    };
    let mut r = Refusal::new(code, d.outcome().as_str(), gate::message(d));
    match d {
        Denial::Unauthenticated { token_presented } => {
            r.challenge = Some(gate::challenge(token_presented));
        }
        Denial::RateLimited { retry_after_secs } => r.retry_after_secs = Some(retry_after_secs),
        Denial::Forbidden => {}
    }
    r
}
