//! Bearer tokens: the tokens file, the live token set with removal grace, and the
//! constant-time lookup.
//!
//! Only SHA-256 digests of tokens are kept; the raw value is hashed as soon as it is read
//! and never stored, formatted or logged. Error messages name entries by index and name,
//! never by value.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use component::scope::RequestScope;
use parking_lot::Mutex;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::bucket::TokenBucket;
use super::config::RateLimitConfig;

/// Shortest token accepted (bytes).
pub const MIN_TOKEN_LEN: usize = 16;
/// Longest token accepted (bytes).
pub const MAX_TOKEN_LEN: usize = 4096;
/// Most entries in one tokens file.
pub const MAX_TOKENS: usize = 10_000;

pub type TokenDigest = [u8; 32];

pub fn digest(token: &[u8]) -> TokenDigest {
    Sha256::digest(token).into()
}

/// First 12 hex digits of the token's SHA-256: identifies a token in logs without
/// revealing it.
pub fn fingerprint(d: &TokenDigest) -> String {
    let mut s = hex::encode(&d[..6]);
    s.truncate(12);
    s
}

/// Constant-time equality of two digests.
pub fn digest_eq(a: &TokenDigest, b: &TokenDigest) -> bool {
    a.ct_eq(b).into()
}

/// Which clusters a token may push for and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Clusters(HashSet<Box<str>>),
}

impl Scope {
    pub fn allows(&self, cluster: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Clusters(c) => c.contains(cluster),
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Scope::All)
    }
}

/// One entry of a tokens file, the token already reduced to its digest.
#[derive(Debug, Clone)]
pub struct ParsedToken {
    pub digest: TokenDigest,
    pub name: String,
    pub scope: Scope,
    pub rate_limit: Option<RateLimitConfig>,
}

/// A live token.
#[derive(Debug)]
pub struct TokenEntry {
    digest: TokenDigest,
    pub name: String,
    pub fingerprint: String,
    pub scope: Scope,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

impl TokenEntry {
    /// Take one request from this token's bucket; `Err(wait)` when over the limit.
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        match &self.bucket {
            None => Ok(()),
            Some(b) => b.lock().try_take(now),
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    entry: Arc<TokenEntry>,
    /// When the token was removed from the file (it works until `+ grace`).
    retired_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct TokenSet {
    slots: Vec<Slot>,
    /// Digest -> position in `slots`. std's `HashMap` hashes with a per-process random
    /// SipHash key, and its input is a SHA-256 digest an attacker cannot steer, so the
    /// lookup's timing says nothing useful about the token; the match is then confirmed with
    /// a constant-time comparison.
    index: HashMap<TokenDigest, usize>,
}

impl TokenSet {
    fn new(slots: Vec<Slot>) -> Self {
        let index = slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.entry.digest, i))
            .collect();
        TokenSet { slots, index }
    }

    fn find(&self, d: &TokenDigest) -> Option<&Slot> {
        self.index
            .get(d)
            .and_then(|&i| self.slots.get(i))
            .filter(|s| digest_eq(&s.entry.digest, d))
    }
}

/// What a reload changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApplyStats {
    pub active: usize,
    pub added: usize,
    pub retired: usize,
}

/// The live tokens; lookups never wait for a reload.
#[derive(Debug)]
pub struct TokenStore {
    set: ArcSwap<TokenSet>,
    grace: Duration,
    default_limit: RateLimitConfig,
    /// Serialises reloads (SIGHUP and the poller may race).
    apply_lock: Mutex<()>,
}

impl TokenStore {
    pub fn new(grace: Duration, default_limit: RateLimitConfig) -> Self {
        TokenStore {
            set: ArcSwap::from_pointee(TokenSet::default()),
            grace,
            default_limit,
            apply_lock: Mutex::new(()),
        }
    }

    /// The entry for a presented token, if it is active or retired within the grace
    /// period. The token is hashed; its digest is looked up and confirmed in constant time.
    pub fn lookup(&self, presented: &[u8], now: Instant) -> Option<Arc<TokenEntry>> {
        let d = digest(presented);
        let set = self.set.load();
        set.find(&d)
            .filter(|s| self.in_grace(s, now))
            .map(|s| s.entry.clone())
    }

    fn in_grace(&self, s: &Slot, now: Instant) -> bool {
        s.retired_at
            .is_none_or(|t| now.saturating_duration_since(t) < self.grace)
    }

    /// Replace the token set: new tokens work at once, tokens no longer listed keep
    /// working for the grace period. A token's rate-limit state survives a reload when its
    /// limits are unchanged.
    pub fn apply(&self, tokens: Vec<ParsedToken>, now: Instant) -> ApplyStats {
        let _g = self.apply_lock.lock();
        let old = self.set.load_full();
        let mut stats = ApplyStats::default();
        let mut slots = Vec::with_capacity(tokens.len());
        for t in tokens {
            let limit = t.rate_limit.unwrap_or(self.default_limit);
            let prev = old.find(&t.digest);
            if prev.is_none() {
                stats.added += 1;
            }
            let bucket = if limit.is_unlimited() {
                None
            } else {
                let want = (limit.requests_per_second, limit.capacity());
                prev.and_then(|p| p.entry.bucket.clone())
                    .filter(|b| b.lock().limits() == want)
                    .or_else(|| Some(Arc::new(Mutex::new(TokenBucket::new(want.0, want.1, now)))))
            };
            slots.push(Slot {
                entry: Arc::new(TokenEntry {
                    fingerprint: fingerprint(&t.digest),
                    digest: t.digest,
                    name: t.name,
                    scope: t.scope,
                    bucket,
                }),
                retired_at: None,
            });
        }
        stats.active = slots.len();
        let listed: HashSet<TokenDigest> = slots.iter().map(|s| s.entry.digest).collect();
        for s in &old.slots {
            if !listed.contains(&s.entry.digest) && self.in_grace(s, now) {
                slots.push(Slot {
                    entry: s.entry.clone(),
                    retired_at: Some(s.retired_at.unwrap_or(now)),
                });
                stats.retired += 1;
            }
        }
        self.set.store(Arc::new(TokenSet::new(slots)));
        stats
    }

    /// Forget retired tokens whose grace has passed.
    pub fn prune(&self, now: Instant) {
        let _g = self.apply_lock.lock();
        let old = self.set.load_full();
        if old.slots.iter().all(|s| self.in_grace(s, now)) {
            return;
        }
        let slots = old
            .slots
            .iter()
            .filter(|s| self.in_grace(s, now))
            .cloned()
            .collect();
        self.set.store(Arc::new(TokenSet::new(slots)));
    }

    /// (active, retired but still within grace).
    pub fn counts(&self, now: Instant) -> (usize, usize) {
        let set = self.set.load();
        let active = set.slots.iter().filter(|s| s.retired_at.is_none()).count();
        let retired = set
            .slots
            .iter()
            .filter(|s| s.retired_at.is_some() && self.in_grace(s, now))
            .count();
        (active, retired)
    }
}

/// Parse a tokens file. `env` resolves `token_env` names (the process environment in
/// production). Every problem is reported, by entry index and name, never by value.
pub fn parse_tokens_file(
    bytes: &[u8],
    env: &dyn Fn(&str) -> Option<String>,
    scope: &dyn RequestScope,
) -> Result<Vec<ParsedToken>, Vec<String>> {
    let doc: Value = match serde_norway::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            // serde_norway messages can quote the offending text; report the place only.
            let at = e
                .location()
                .map(|l| format!(" at line {} column {}", l.line(), l.column()))
                .unwrap_or_default();
            return Err(vec![format!("not valid YAML{at}")]);
        }
    };
    let Value::Array(items) = doc else {
        return Err(vec![
            "must be a YAML list of {name, token or token_env, clusters}".into(),
        ]);
    };
    if items.is_empty() {
        return Err(vec!["lists no tokens".into()]);
    }
    if items.len() > MAX_TOKENS {
        return Err(vec![format!("lists more than {MAX_TOKENS} tokens")]);
    }
    let mut errs = Vec::new();
    let mut out: Vec<ParsedToken> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut seen: HashMap<TokenDigest, String> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("entry[{i}]");
        let Value::Object(m) = item else {
            errs.push(format!("{at}: must be a mapping"));
            continue;
        };
        for k in m.keys() {
            if !["name", "token", "token_env", "clusters", "rate_limit"].contains(&k.as_str()) {
                errs.push(format!(
                    "{at}: unknown key {k:?} (known: name, token, token_env, clusters, rate_limit)"
                ));
            }
        }
        let name = match m.get("name") {
            Some(Value::String(s))
                if !s.is_empty() && s.len() <= 128 && !s.chars().any(char::is_control) =>
            {
                s.clone()
            }
            _ => {
                errs.push(format!(
                    "{at}.name: is required (a string of 1 to 128 printable characters)"
                ));
                continue;
            }
        };
        let at = format!("entry[{i}] ({name:?})");
        if let Some(j) = names.get(&name) {
            errs.push(format!("{at}.name: same name as entry[{j}]"));
        } else {
            names.insert(name.clone(), i);
        }
        let raw: Option<String> = match (m.get("token"), m.get("token_env")) {
            (Some(Value::String(t)), None) => Some(t.clone()),
            (None, Some(Value::String(var))) => match env(var) {
                Some(t) => Some(t),
                None => {
                    errs.push(format!(
                        "{at}.token_env: environment variable {var:?} is not set"
                    ));
                    None
                }
            },
            (Some(_), Some(_)) => {
                errs.push(format!("{at}: give token or token_env, not both"));
                None
            }
            (None, None) => {
                errs.push(format!("{at}: token or token_env is required"));
                None
            }
            _ => {
                errs.push(format!("{at}: token and token_env must be strings"));
                None
            }
        };
        let scope = match m.get("clusters") {
            Some(Value::Array(cs)) if !cs.is_empty() => {
                let mut set = HashSet::new();
                let mut all = false;
                for (j, c) in cs.iter().enumerate() {
                    match c.as_str() {
                        Some("*") => all = true,
                        Some(c) if scope.validate_id(c).is_ok() => {
                            set.insert(Box::from(c));
                        }
                        _ => {
                            errs.push(format!("{at}.clusters[{j}]: must be a cluster id or \"*\""))
                        }
                    }
                }
                if all && !set.is_empty() {
                    errs.push(format!("{at}.clusters: \"*\" must be the only entry"));
                }
                if all {
                    Scope::All
                } else {
                    Scope::Clusters(set)
                }
            }
            _ => {
                errs.push(format!(
                    "{at}.clusters: is required (a non-empty list of cluster ids, or [\"*\"])"
                ));
                continue;
            }
        };
        let rate_limit = match m.get("rate_limit") {
            None => None,
            Some(v) => match serde_json::from_value::<RateLimitConfig>(v.clone()) {
                Ok(r) => {
                    let mut ce = component::ConfigErrors::new();
                    r.check(&mut ce, "rate_limit");
                    for e in ce.iter() {
                        errs.push(format!("{at}.{e}"));
                    }
                    Some(r)
                }
                Err(_) => {
                    errs.push(format!(
                        "{at}.rate_limit: must be {{requests_per_second: <number>, burst: <integer>}}"
                    ));
                    None
                }
            },
        };
        let Some(raw) = raw else { continue };
        if raw.is_empty() {
            errs.push(format!("{at}.token: is empty"));
            continue;
        }
        if raw.len() < MIN_TOKEN_LEN || raw.len() > MAX_TOKEN_LEN {
            errs.push(format!(
                "{at}.token: must be {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} bytes long"
            ));
            continue;
        }
        if !raw.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            errs.push(format!(
                "{at}.token: may only hold visible ASCII characters (no spaces)"
            ));
            continue;
        }
        let d = digest(raw.as_bytes());
        drop(raw);
        if let Some(first) = seen.get(&d) {
            errs.push(format!("{at}.token: same token as {first:?}"));
            continue;
        }
        seen.insert(d, name.clone());
        out.push(ParsedToken {
            digest: d,
            name,
            scope,
            rate_limit,
        });
    }
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "token-for-cluster-a-0001";
    const B: &str = "token-for-cluster-b-0002";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(yaml: &str) -> Result<Vec<ParsedToken>, Vec<String>> {
        parse_tokens_file(yaml.as_bytes(), &no_env, &ingero_wire::scope::ClusterScope)
    }

    fn store() -> TokenStore {
        TokenStore::new(Duration::from_secs(60), RateLimitConfig::default())
    }

    #[test]
    fn constant_time_eq_and_fingerprint() {
        let a = digest(b"abc");
        let mut b = a;
        assert!(digest_eq(&a, &b));
        b[31] ^= 1;
        assert!(!digest_eq(&a, &b));
        b = a;
        b[0] ^= 0x80;
        assert!(!digest_eq(&a, &b));
        // SHA-256("abc") = ba7816bf8f01cfea...
        assert_eq!(fingerprint(&a), "ba7816bf8f01");
    }

    #[test]
    fn parses_scopes_env_tokens_and_limits() {
        let env = |k: &str| (k == "TOK_B").then(|| B.to_string());
        let y = format!(
            "- {{name: a, token: {A}, clusters: [alpha, beta]}}\n\
             - {{name: b, token_env: TOK_B, clusters: ['*'], rate_limit: {{requests_per_second: 5}}}}\n"
        );
        let t = parse_tokens_file(y.as_bytes(), &env, &ingero_wire::scope::ClusterScope).unwrap();
        assert_eq!(t.len(), 2);
        assert!(t[0].scope.allows("alpha") && !t[0].scope.allows("gamma"));
        assert!(t[1].scope.is_all());
        assert_eq!(t[1].rate_limit.unwrap().requests_per_second, 5.0);
        assert_eq!(t[1].digest, digest(B.as_bytes()));
    }

    #[test]
    fn bad_files_are_refused_without_echoing_tokens() {
        let cases: &[(&str, &str)] = &[
            ("", "must be a YAML list"),
            ("[]", "lists no tokens"),
            (
                "- {name: a, token: '', clusters: [x]}",
                "entry[0] (\"a\").token: is empty",
            ),
            (
                "- {name: a, token: short-secret, clusters: [x]}",
                "must be 16 to 4096 bytes",
            ),
            (
                "- {name: a, token: 'has space in the secret', clusters: [x]}",
                "visible ASCII",
            ),
            (
                "- {name: a, token_env: NOPE_SECRET_VAR, clusters: [x]}",
                "is not set",
            ),
            (
                "- {name: a, clusters: [x]}",
                "token or token_env is required",
            ),
            (
                "- {name: a, token: xxxxxxxxxxxxxxxxsecret, clusters: []}",
                "clusters: is required",
            ),
            (
                "- {name: a, token: xxxxxxxxxxxxxxxxsecret, clusters: ['*', b]}",
                "must be the only entry",
            ),
            (
                "- {name: a, token: xxxxxxxxxxxxxxxxsecret, clusters: [x], tokn: 1}",
                "unknown key \"tokn\"",
            ),
            (
                "- {name: a, token: xxxxxxxxxxxxxxxxsecret, clusters: [x]}\n- {name: b, token: xxxxxxxxxxxxxxxxsecret, clusters: [y]}",
                "entry[1] (\"b\").token: same token as \"a\"",
            ),
            (
                "- {name: a, token: xxxxxxxxxxxxxxxxsecret, clusters: [x]}\n- {name: a, token: yyyyyyyyyyyyyyyysecret, clusters: [y]}",
                "same name as entry[0]",
            ),
            (
                "- {name: a, token: \"xxxxxxxxxxxxxxxxsecret, clusters: [x]}",
                "not valid YAML at line",
            ),
            (
                "- {name: a, token: xxxxxxxxxxxxxxxxsecret, clusters: [x], rate_limit: {requests_per_second: -2}}",
                "rate_limit.requests_per_second",
            ),
        ];
        for (yaml, want) in cases {
            let errs = parse(yaml).unwrap_err();
            let all = errs.join("\n");
            assert!(all.contains(want), "{yaml}: {all}");
            assert!(!all.contains("secret"), "token echoed for {yaml}: {all}");
        }
    }

    #[test]
    fn lookup_finds_only_listed_tokens() {
        let s = store();
        let now = Instant::now();
        s.apply(
            parse(&format!("- {{name: a, token: {A}, clusters: [alpha]}}")).unwrap(),
            now,
        );
        let e = s.lookup(A.as_bytes(), now).unwrap();
        assert_eq!(e.name, "a");
        assert_eq!(e.fingerprint, fingerprint(&digest(A.as_bytes())));
        assert!(s.lookup(B.as_bytes(), now).is_none());
        assert!(s.lookup(b"", now).is_none());
        assert!(s.lookup(&A.as_bytes()[..A.len() - 1], now).is_none());
    }

    #[test]
    fn removed_tokens_work_for_the_grace_period_then_stop() {
        let s = store();
        let t0 = Instant::now();
        let both = format!(
            "- {{name: a, token: {A}, clusters: [alpha]}}\n- {{name: b, token: {B}, clusters: [beta]}}"
        );
        assert_eq!(s.apply(parse(&both).unwrap(), t0).added, 2);
        let only_b = format!("- {{name: b, token: {B}, clusters: [beta]}}");
        let st = s.apply(parse(&only_b).unwrap(), t0);
        assert_eq!((st.active, st.added, st.retired), (1, 0, 1));
        assert_eq!(s.counts(t0), (1, 1));
        assert!(
            s.lookup(A.as_bytes(), t0 + Duration::from_secs(59))
                .is_some()
        );
        assert!(
            s.lookup(A.as_bytes(), t0 + Duration::from_secs(60))
                .is_none()
        );
        // A second reload inside the grace does not restart A's grace.
        s.apply(parse(&only_b).unwrap(), t0 + Duration::from_secs(30));
        assert!(
            s.lookup(A.as_bytes(), t0 + Duration::from_secs(61))
                .is_none()
        );
        s.prune(t0 + Duration::from_secs(61));
        assert_eq!(s.counts(t0 + Duration::from_secs(61)), (1, 0));
        // Re-adding a retired token makes it active again.
        s.apply(parse(&both).unwrap(), t0 + Duration::from_secs(62));
        assert!(
            s.lookup(A.as_bytes(), t0 + Duration::from_secs(1000))
                .is_some()
        );
    }

    #[test]
    fn rate_limit_state_survives_a_reload_with_the_same_limits() {
        let s = store();
        let t0 = Instant::now();
        let y = format!(
            "- {{name: a, token: {A}, clusters: ['*'], rate_limit: {{requests_per_second: 1, burst: 2}}}}"
        );
        s.apply(parse(&y).unwrap(), t0);
        let e = s.lookup(A.as_bytes(), t0).unwrap();
        assert!(e.take(t0).is_ok() && e.take(t0).is_ok());
        assert!(e.take(t0).is_err());
        s.apply(parse(&y).unwrap(), t0);
        let e = s.lookup(A.as_bytes(), t0).unwrap();
        assert!(e.take(t0).is_err(), "a reload must not refill the bucket");
        assert!(e.take(t0 + Duration::from_secs(1)).is_ok());
    }
}
