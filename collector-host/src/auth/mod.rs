//! `ingero_auth`: bearer tokens scoped to clusters on every listener that opts in with
//! `auth: { authenticator: ingero_auth }`.
//!
//! # Design
//!
//! - **Tokens** ([`tokens`]) come from a YAML file (`tokens_file`) or an environment
//!   variable holding that file (`tokens_env`); a file entry gives its token inline or names
//!   an environment variable (`token_env`). Nothing secret is in the collector config, so
//!   `print-config` cannot show a token. Only SHA-256 digests are kept; a presented token is
//!   hashed and compared against every digest in constant time (`subtle`).
//! - **Scopes**: each token lists its clusters or `["*"]`: ids of the binary's request
//!   scope ([`component::scope::RequestScope`]; Fleet's is the cluster). The cluster a
//!   request names before its body (where the scope reads it: query, header, gRPC
//!   metadata) is checked before the body is read; clusters named by a payload's resources
//!   (the scope's attribute) after decoding: any out-of-scope cluster refuses the whole batch
//!   (403 / PERMISSION_DENIED) before it reaches a pipeline. A scoped token's push must
//!   name its cluster (request or every resource). Threshold GET and one-cluster
//!   diagnostics for an out-of-scope cluster answer exactly as for an unknown cluster
//!   (see `ingero_extension::Visibility`); the diagnostics listing and Prometheus scrapes
//!   need a `"*"` token; the health check takes any valid token.
//! - **Rotation** ([`reload`]): the file is re-read every `reload_interval` (content hash
//!   compared) and on SIGHUP. Removed tokens keep working for `grace_period`; a bad file
//!   keeps the previous tokens, is logged with its reasons (never with token values) and
//!   counted.
//! - **Audit** ([`audit`]): JSON lines through a bounded queue to a writer thread.
//! - **Rate limits** ([`bucket`]): one token bucket per token, shared by every listener;
//!   429 + `Retry-After` (gRPC: RESOURCE_EXHAUSTED).

pub mod audit;
pub mod bucket;
pub mod config;
pub mod gate;
pub mod middleware;
pub mod reload;
pub mod tokens;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

use component::scope::RequestScope;
use component::telemetry::MetricPrefix;
use component::{Extension, Host, MetricFamily, StartError};
use parking_lot::Mutex;

use audit::{AuditLog, AuditRecord};
use config::AuthConfig;
use tokens::{ApplyStats, TokenEntry, TokenStore};

/// The component type name in configs.
pub const TYPE: &str = "ingero_auth";

/// What a request does (the audit log's `action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    PushMetrics,
    PushTraces,
    PushLogs,
    GetThreshold,
    Diagnostics,
    Scrape,
    Health,
    /// A read of stored data (a query API, an MCP tool call).
    Query,
    /// A path no route serves.
    Other,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::PushMetrics => "push_metrics",
            Action::PushTraces => "push_traces",
            Action::PushLogs => "push_logs",
            Action::GetThreshold => "get_threshold",
            Action::Diagnostics => "diagnostics",
            Action::Scrape => "scrape",
            Action::Health => "health",
            Action::Query => "query",
            Action::Other => "other",
        }
    }
}

/// The decision on a request (the audit log's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Unauthenticated,
    Forbidden,
    RateLimited,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Allowed,
        Outcome::Unauthenticated,
        Outcome::Forbidden,
        Outcome::RateLimited,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Unauthenticated => "unauthenticated",
            Outcome::Forbidden => "forbidden",
            Outcome::RateLimited => "rate_limited",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// No usable `Authorization: Bearer` header (`token_presented: false`) or an unknown or
    /// expired token.
    Unauthenticated {
        token_presented: bool,
    },
    Forbidden,
    /// Over the token's rate limit; retry after this many whole seconds.
    RateLimited {
        retry_after_secs: u64,
    },
}

impl Denial {
    pub fn outcome(self) -> Outcome {
        match self {
            Denial::Unauthenticated { .. } => Outcome::Unauthenticated,
            Denial::Forbidden => Outcome::Forbidden,
            Denial::RateLimited { .. } => Outcome::RateLimited,
        }
    }
}

/// Counters of one listener.
#[derive(Debug)]
struct ListenerCounters {
    name: String,
    outcomes: [AtomicU64; 4],
}

/// One `ingero_auth` instance.
#[derive(Debug)]
pub struct AuthExtension {
    pub id: String,
    pub config: AuthConfig,
    store: TokenStore,
    audit: OnceLock<AuditLog>,
    listeners: Mutex<Vec<Arc<ListenerCounters>>>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    /// What a token's `clusters` entries and a request's scope are checked by.
    scope: Arc<dyn RequestScope>,
    /// The prefix of the extension's families (the distribution's).
    metric_prefix: MetricPrefix,
}

impl AuthExtension {
    pub fn new(id: &str, config: AuthConfig, scope: Arc<dyn RequestScope>) -> Self {
        AuthExtension {
            scope,
            id: id.to_string(),
            store: TokenStore::new(config.grace_period, config.rate_limit),
            config,
            audit: OnceLock::new(),
            listeners: Mutex::new(Vec::new()),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            metric_prefix: crate::telemetry::HOST_METRIC_PREFIX,
        }
    }

    /// Name the extension's families under `prefix` (the distribution's, as the host's
    /// own families are).
    pub fn with_metric_prefix(mut self, prefix: MetricPrefix) -> Self {
        self.metric_prefix = prefix;
        self
    }

    /// Load the tokens and open the audit log; an error names the key at fault.
    pub fn load_initial(&self) -> Result<(), String> {
        let bytes = self.read_source()?;
        let parsed = tokens::parse_tokens_file(&bytes, &env_var, &*self.scope)
            .map_err(|e| format!("{}: {}", self.source_key(), e.join("; ")))?;
        let st = self.store.apply(parsed, Instant::now());
        let log = AuditLog::open(&self.config.audit_log, config::AUDIT_QUEUE)
            .map_err(|e| format!("audit_log: cannot open {:?}: {e}", self.config.audit_log))?;
        let _ = self.audit.set(log);
        tracing::info!(authenticator = %self.id, tokens = st.active, "bearer tokens loaded");
        Ok(())
    }

    /// Non-fatal findings about its files, as `key: message`: a tokens file or an existing
    /// audit log that its group or others may read (the check the TLS key gets).
    pub fn file_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.config.tokens_env.is_empty()
            && let Some(w) = crate::tls::secret_file_warning(&self.config.tokens_file)
        {
            out.push(format!("tokens_file: {w}"));
        }
        if !matches!(self.config.audit_log.as_str(), "" | "stderr")
            && let Some(w) = crate::tls::secret_file_warning(&self.config.audit_log)
        {
            out.push(format!("audit_log: {w}"));
        }
        out
    }

    fn source_key(&self) -> String {
        if self.config.tokens_env.is_empty() {
            format!("tokens_file {:?}", self.config.tokens_file)
        } else {
            format!("tokens_env {}", self.config.tokens_env)
        }
    }

    /// The tokens file's bytes (or the environment variable's content).
    pub fn read_source(&self) -> Result<Vec<u8>, String> {
        if self.config.tokens_env.is_empty() {
            std::fs::read(&self.config.tokens_file)
                .map_err(|e| format!("{}: cannot read: {e}", self.source_key()))
        } else {
            env_var(&self.config.tokens_env)
                .map(String::into_bytes)
                .ok_or_else(|| format!("{}: environment variable is not set", self.source_key()))
        }
    }

    /// Parse and apply new file content; on error keep the previous tokens. Logged and
    /// counted either way.
    pub fn apply_bytes(&self, bytes: &[u8], trigger: &str) -> Result<ApplyStats, Vec<String>> {
        match tokens::parse_tokens_file(bytes, &env_var, &*self.scope) {
            Ok(parsed) => {
                let st = self.store.apply(parsed, Instant::now());
                self.reloads_ok.fetch_add(1, Relaxed);
                tracing::info!(
                    authenticator = %self.id,
                    trigger,
                    active = st.active,
                    added = st.added,
                    retired = st.retired,
                    "bearer tokens reloaded"
                );
                Ok(st)
            }
            Err(errs) => {
                self.reload_failed(trigger, &errs.join("; "));
                Err(errs)
            }
        }
    }

    fn reload_failed(&self, trigger: &str, why: &str) {
        self.reloads_failed.fetch_add(1, Relaxed);
        tracing::error!(
            authenticator = %self.id,
            trigger,
            source = %self.source_key(),
            errors = %why,
            "tokens not reloaded; keeping the previous tokens"
        );
    }

    /// The request scope token entries and API queries are read with.
    pub fn scope(&self) -> &dyn RequestScope {
        &*self.scope
    }

    pub fn store(&self) -> &TokenStore {
        &self.store
    }

    fn audit(&self) -> Option<&AuditLog> {
        self.audit.get().filter(|a| a.is_enabled())
    }

    /// The started authenticator `id` among the host's extensions (started extensions
    /// see the authenticators in their host).
    pub fn find(host: &dyn Host, id: &component::ComponentId) -> Option<Arc<AuthExtension>> {
        host.extensions()
            .into_iter()
            .find(|(i, _)| i == id)
            .and_then(|(_, e)| e.as_any())
            .and_then(|a| a.downcast::<AuthExtension>().ok())
    }

    /// The gate of one listener (`name` as in logs: `otlp/http`, `ingero_threshold/agent`).
    pub fn listener(self: &Arc<Self>, name: &str) -> ListenerAuth {
        let c = Arc::new(ListenerCounters {
            name: name.to_string(),
            outcomes: Default::default(),
        });
        self.listeners.lock().push(c.clone());
        ListenerAuth {
            ext: self.clone(),
            counters: c,
        }
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Extension for AuthExtension {
    fn start(&self, _host: &dyn Host) -> Result<(), StartError> {
        Ok(())
    }

    /// An extension that serves its own listener finds its authenticator through the
    /// host and downcasts it (see [`AuthExtension::find`]).
    fn as_any(self: Arc<Self>) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self)
    }

    fn shutdown(&self) {}

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        let id = self.id.as_str();
        let mut req = spec::REQUESTS.family_in(self.metric_prefix);
        for l in self.listeners.lock().iter() {
            for o in Outcome::ALL {
                req.push(
                    &[
                        (LABEL_AUTHENTICATOR, id),
                        (LABEL_LISTENER, &l.name),
                        (LABEL_OUTCOME, o.as_str()),
                    ],
                    l.outcomes[o.index()].load(Relaxed) as f64,
                );
            }
        }
        out.push(req);
        out.push(
            spec::RELOADS
                .family_in(self.metric_prefix)
                .with(
                    &[(LABEL_AUTHENTICATOR, id), (LABEL_RESULT, "success")],
                    self.reloads_ok.load(Relaxed) as f64,
                )
                .with(
                    &[(LABEL_AUTHENTICATOR, id), (LABEL_RESULT, "failure")],
                    self.reloads_failed.load(Relaxed) as f64,
                ),
        );
        let (active, retired) = self.store.counts(Instant::now());
        out.push(
            spec::TOKENS
                .family_in(self.metric_prefix)
                .with(
                    &[(LABEL_AUTHENTICATOR, id), (LABEL_STATE, "active")],
                    active as f64,
                )
                .with(
                    &[(LABEL_AUTHENTICATOR, id), (LABEL_STATE, "grace")],
                    retired as f64,
                ),
        );
        let (dropped, written) = self
            .audit()
            .map(|a| (a.dropped.load(Relaxed), a.written.load(Relaxed)))
            .unwrap_or((0, 0));
        out.push(
            spec::AUDIT_DROPPED
                .family_in(self.metric_prefix)
                .with(&[(LABEL_AUTHENTICATOR, id)], dropped as f64),
        );
        out.push(
            spec::AUDIT_WRITTEN
                .family_in(self.metric_prefix)
                .with(&[(LABEL_AUTHENTICATOR, id)], written as f64),
        );
    }
}

pub const LABEL_AUTHENTICATOR: &str = "authenticator";
pub const LABEL_LISTENER: &str = "listener";
pub const LABEL_OUTCOME: &str = "outcome";
pub const LABEL_RESULT: &str = "result";
pub const LABEL_STATE: &str = "state";

// The extension's families, declared once, in exposition order (served on the host's
// telemetry endpoint while the extension is configured).
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    REQUESTS: counter prefix + "auth_requests_total", unit "1",
        labels [LABEL_AUTHENTICATOR, LABEL_LISTENER, LABEL_OUTCOME],
        help "Authentication decisions by listener and outcome.";
    RELOADS: counter prefix + "auth_reloads_total", unit "1",
        labels [LABEL_AUTHENTICATOR, LABEL_RESULT],
        help "Token file reloads by result (a failed reload keeps the previous tokens).";
    TOKENS: gauge prefix + "auth_tokens", unit "1", labels [LABEL_AUTHENTICATOR, LABEL_STATE],
        help "Tokens accepted now: listed in the file, or removed but within the grace period.";
    AUDIT_DROPPED: counter prefix + "auth_audit_dropped_total", unit "1",
        labels [LABEL_AUTHENTICATOR],
        help "Audit lines dropped because the writer queue was full.";
    AUDIT_WRITTEN: counter prefix + "auth_audit_written_total", unit "1",
        labels [LABEL_AUTHENTICATOR],
        help "Audit lines written.";
}

/// The authentication gate of one listener.
#[derive(Debug, Clone)]
pub struct ListenerAuth {
    ext: Arc<AuthExtension>,
    counters: Arc<ListenerCounters>,
}

impl ListenerAuth {
    pub fn name(&self) -> &str {
        &self.counters.name
    }

    /// The authenticator's request scope.
    pub fn scope(&self) -> &dyn RequestScope {
        self.ext.scope()
    }

    /// Token, rate limit and the request-level cluster (if any). `authorization` is the
    /// value of the single `Authorization` header (`Err` when the header is repeated).
    pub fn check(
        &self,
        authorization: Result<Option<&[u8]>, gate::RepeatedHeader>,
        peer: Option<SocketAddr>,
        action: Action,
        cluster: Option<&str>,
    ) -> Result<Arc<TokenEntry>, Denial> {
        let presented = authorization.ok().flatten().and_then(gate::bearer_token);
        let Some(token) = presented else {
            let d = Denial::Unauthenticated {
                token_presented: false,
            };
            self.record(None, None, peer, action, cluster, d.outcome());
            return Err(d);
        };
        let now = Instant::now();
        let Some(entry) = self.ext.store.lookup(token, now) else {
            let fp = tokens::fingerprint(&tokens::digest(token));
            let d = Denial::Unauthenticated {
                token_presented: true,
            };
            self.record(Some(&fp), None, peer, action, cluster, d.outcome());
            return Err(d);
        };
        if let Err(wait) = entry.take(now) {
            let d = Denial::RateLimited {
                retry_after_secs: bucket::retry_after_secs(wait),
            };
            self.deny(&entry, peer, action, cluster, d);
            return Err(d);
        }
        if let Some(c) = cluster
            && !entry.scope.allows(c)
        {
            self.deny(&entry, peer, action, cluster, Denial::Forbidden);
            return Err(Denial::Forbidden);
        }
        Ok(entry)
    }

    /// The clusters a decoded payload names, one item per resource (`None`: the resource
    /// names none). Any out-of-scope cluster refuses the batch; so does a resource without a
    /// cluster when the request named none and the token is scoped.
    pub fn check_payload<'a>(
        &self,
        entry: &TokenEntry,
        peer: Option<SocketAddr>,
        action: Action,
        request_cluster: Option<&str>,
        resources: impl Iterator<Item = Option<&'a str>>,
    ) -> Result<(), Denial> {
        if entry.scope.is_all() {
            return Ok(());
        }
        for c in resources {
            let bad = match c {
                Some(c) => (!entry.scope.allows(c)).then_some(Some(c)),
                None => request_cluster.is_none().then_some(None),
            };
            if let Some(c) = bad {
                self.deny(entry, peer, action, c, Denial::Forbidden);
                return Err(Denial::Forbidden);
            }
        }
        Ok(())
    }

    /// Record an allowed request (counted; audited unless `audit_allowed: false`).
    pub fn allowed(
        &self,
        entry: &TokenEntry,
        peer: Option<SocketAddr>,
        action: Action,
        cluster: Option<&str>,
    ) {
        self.counters.outcomes[Outcome::Allowed.index()].fetch_add(1, Relaxed);
        if self.ext.config.audit_allowed
            && let Some(a) = self.ext.audit()
        {
            a.record(&AuditRecord {
                time: audit::rfc3339(SystemTime::now()),
                listener: self.name(),
                remote: audit::remote(peer),
                token_fingerprint: Some(&entry.fingerprint),
                token_name: Some(&entry.name),
                cluster,
                action: action.as_str(),
                outcome: Outcome::Allowed.as_str(),
            });
        }
    }

    /// Record a refusal by a known token.
    pub fn deny(
        &self,
        entry: &TokenEntry,
        peer: Option<SocketAddr>,
        action: Action,
        cluster: Option<&str>,
        d: Denial,
    ) {
        self.record(
            Some(&entry.fingerprint),
            Some(&entry.name),
            peer,
            action,
            cluster,
            d.outcome(),
        );
    }

    fn record(
        &self,
        fingerprint: Option<&str>,
        name: Option<&str>,
        peer: Option<SocketAddr>,
        action: Action,
        cluster: Option<&str>,
        outcome: Outcome,
    ) {
        self.counters.outcomes[outcome.index()].fetch_add(1, Relaxed);
        if let Some(a) = self.ext.audit() {
            a.record(&AuditRecord {
                time: audit::rfc3339(SystemTime::now()),
                listener: self.name(),
                remote: audit::remote(peer),
                token_fingerprint: fingerprint,
                token_name: name,
                cluster,
                action: action.as_str(),
                outcome: outcome.as_str(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ext(audit_allowed: bool, audit: &str, tokens: usize) -> Arc<AuthExtension> {
        let cfg = AuthConfig {
            tokens_file: "unused".into(),
            audit_allowed,
            audit_log: audit.into(),
            ..AuthConfig::default()
        };
        let e = Arc::new(AuthExtension::new(
            "ingero_auth",
            cfg,
            Arc::new(ingero_wire::scope::ClusterScope),
        ));
        let yaml: String = (0..tokens)
            .map(|i| format!("- {{name: t{i}, token: token-number-{i:08}, clusters: [c{i}]}}\n"))
            .collect();
        e.apply_bytes(yaml.as_bytes(), "test").unwrap();
        if !audit.is_empty() {
            let _ = e
                .audit
                .set(AuditLog::open(audit, config::AUDIT_QUEUE).unwrap());
        }
        e
    }

    #[test]
    fn decisions_by_outcome() {
        let e = ext(false, "", 3);
        let l = e.listener("otlp/http");
        let ok = l
            .check(
                Ok(Some(b"Bearer token-number-00000001")),
                None,
                Action::PushMetrics,
                Some("c1"),
            )
            .unwrap();
        assert_eq!(ok.name, "t1");
        assert_eq!(
            l.check(
                Ok(Some(b"Bearer token-number-00000001")),
                None,
                Action::PushMetrics,
                Some("c2")
            )
            .unwrap_err(),
            Denial::Forbidden
        );
        assert_eq!(
            l.check(Ok(None), None, Action::PushMetrics, None)
                .unwrap_err(),
            Denial::Unauthenticated {
                token_presented: false
            }
        );
        assert_eq!(
            l.check(Err(gate::RepeatedHeader), None, Action::PushMetrics, None)
                .unwrap_err(),
            Denial::Unauthenticated {
                token_presented: false
            }
        );
        assert_eq!(
            l.check(
                Ok(Some(b"Bearer token-number-99999999")),
                None,
                Action::PushMetrics,
                None
            )
            .unwrap_err(),
            Denial::Unauthenticated {
                token_presented: true
            }
        );
        // Payload: any out-of-scope resource, or an unattributed one without a request
        // cluster, refuses the batch.
        let p = |req: Option<&str>, res: &[Option<&str>]| {
            l.check_payload(&ok, None, Action::PushMetrics, req, res.iter().copied())
        };
        assert!(p(Some("c1"), &[None, Some("c1")]).is_ok());
        assert!(p(None, &[Some("c1")]).is_ok());
        assert_eq!(
            p(Some("c1"), &[Some("c1"), Some("c2")]),
            Err(Denial::Forbidden)
        );
        assert_eq!(p(None, &[Some("c1"), None]), Err(Denial::Forbidden));
        let mut fams = Vec::new();
        e.telemetry(&mut fams);
        let req = &fams[0];
        let count = |o: &str| {
            req.samples
                .iter()
                .find(|s| s.labels.iter().any(|(k, v)| k == "outcome" && v == o))
                .map(|s| s.value)
        };
        assert_eq!(count("forbidden"), Some(3.0));
        assert_eq!(count("unauthenticated"), Some(3.0));
        assert_eq!(count("allowed"), Some(0.0));
    }

    /// The extension reports exactly its declared families, in order, each with the
    /// declared name, type, help and labels.
    #[test]
    fn families_follow_their_declaration() {
        let e = ext(false, "", 2);
        let _ = e.listener("otlp/http");
        let mut fams = Vec::new();
        e.telemetry(&mut fams);
        assert_eq!(fams.len(), FAMILIES.len());
        for (f, spec) in fams.iter().zip(FAMILIES) {
            assert!(
                spec.describes_in(crate::telemetry::HOST_METRIC_PREFIX, f),
                "{} does not match {spec:?}",
                f.name
            );
            assert!(!f.samples.is_empty(), "{} has no sample", f.name);
        }
        let named = Arc::new(
            AuthExtension::new(
                "ingero_auth",
                AuthConfig::default(),
                Arc::new(ingero_wire::scope::ClusterScope),
            )
            .with_metric_prefix(MetricPrefix::new("dist_")),
        );
        let mut fams = Vec::new();
        named.telemetry(&mut fams);
        assert_eq!(fams[0].name, "dist_auth_requests_total");
        assert_eq!(fams.len(), FAMILIES.len());
    }

    /// `cargo test --release -p collector-host --lib auth::tests::cost -- --ignored --nocapture`
    #[test]
    #[ignore = "measurement; run in release"]
    fn cost() {
        for (tokens, audit) in [(10, ""), (1000, ""), (10, "/dev/null")] {
            let e = ext(true, audit, tokens);
            let l = e.listener("otlp/http");
            let hdr = format!("Bearer token-number-{:08}", tokens - 1);
            let n = 200_000u32;
            let t = Instant::now();
            for _ in 0..n {
                let p = l
                    .check(Ok(Some(hdr.as_bytes())), None, Action::PushMetrics, None)
                    .unwrap();
                l.allowed(&p, None, Action::PushMetrics, Some("c"));
            }
            let per = t.elapsed() / n;
            let dropped = e.audit().map(|a| a.dropped.load(Relaxed)).unwrap_or(0);
            println!(
                "tokens={tokens} audit={audit:?}: {per:?} per allowed request ({dropped} audit lines dropped of {n})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
