//! Glue: OTLP batches in -> provider tag on every resource, observations into the cost
//! ledger; `tick` checks the files and accrues cost; `telemetry` shows it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use component::config::{ConfigError, ConfigErrors};
use component::otlp::{self, KeyValue, ResourceMetrics};
use component::wire::{attr, metric, resource};
use component::{
    BatchContext, Host, MetricFamily, ProcessOutcome, Processor, StartError, Timestamp,
};
use parking_lot::Mutex;
use serde::Serialize;

use crate::config::ProviderConfig;
use crate::cost::{
    CostLedger, CostSnapshot, LagPoint, LedgerSettings, NodeChange, NodeObservation, SeriesKey,
    StragglerPoint,
};
use crate::metrics::{self as m, reason};
use crate::provider::{self, ProviderAliases};
use crate::rates::{MAX_MODEL_LEN, MAX_RATES_FILE_BYTES, RateTable};
use crate::rules::{MAX_RULES_FILE_BYTES, RuleSet};
use crate::watch::{Fingerprint, Poll, ReadError, WatchedFile};

/// Most GPUs one node may report.
pub const MAX_GPUS_PER_NODE: i64 = 1024;
/// Largest world size / communicator size / rank accepted.
pub const MAX_WORLD_SIZE: i64 = 1_000_000;
/// Largest |peer lag| accepted, in ms (one hour).
pub const MAX_LAG_MS: f64 = 3_600_000.0;
/// Longest communicator hash or op type accepted, in bytes.
pub const MAX_LAG_KEY_LEN: usize = 64;
/// How many errors of a bad file go into one log line.
const LOGGED_ERRORS: usize = 20;

/// Where a resource's provider came from, in precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderSource {
    /// An operator rule (its 0-based index in the rules file).
    Rule(usize),
    /// The agent's `ingero.provider` on this resource, or remembered from the same
    /// node's latest health push.
    Agent,
    /// `cloud.provider`, `cloud.platform` or `host.type`.
    SemanticConvention,
    /// `default_provider`.
    Default,
}

impl ProviderSource {
    pub fn label(self) -> &'static str {
        match self {
            ProviderSource::Rule(_) => "rule",
            ProviderSource::Agent => "agent",
            ProviderSource::SemanticConvention => "semconv",
            ProviderSource::Default => "default",
        }
    }

    fn index(self) -> usize {
        match self {
            ProviderSource::Rule(_) => 0,
            ProviderSource::Agent => 1,
            ProviderSource::SemanticConvention => 2,
            ProviderSource::Default => 3,
        }
    }
}

const SOURCES: [&str; 4] = ["rule", "agent", "semconv", "default"];

/// A resource's provider and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub provider: Arc<str>,
    pub source: ProviderSource,
}

/// A failed reload. The previous version stays in use.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("no {0} is configured")]
    NotConfigured(&'static str),
    #[error("{0}; keeping the previous version")]
    Read(#[from] ReadError),
    #[error("{path} (sha256 {sha256}) is invalid; keeping the previous version:\n{errors}")]
    Invalid {
        path: String,
        sha256: String,
        errors: ConfigErrors,
    },
}

#[derive(Debug, Default)]
struct ReloadCounters {
    success: AtomicU64,
    failure: AtomicU64,
}

/// The `(provider, gpu_model)` pairs seen without a rate, capped.
#[derive(Debug, Default)]
struct UnknownModels {
    counts: BTreeMap<(Arc<str>, Arc<str>), u64>,
    overflow: u64,
}

/// Everything one batch contributed, gathered before taking the ledger lock.
#[derive(Debug, Default)]
struct Extracted {
    nodes: Vec<(NodeObservation, Option<Arc<str>>)>,
    stragglers: HashMap<Arc<str>, Vec<StragglerPoint>>,
    lags: Vec<LagPoint>,
    /// Points seen per (cluster, comm, op, time, op_seq, rank) in this batch.
    lag_occurrences: HashMap<LagSlot, u32>,
    dropped: BTreeMap<&'static str, u64>,
}

type LagSlot = (Arc<str>, Arc<str>, Arc<str>, u64, Option<i64>, u32);

impl Extracted {
    fn drop(&mut self, why: &'static str, n: u64) {
        *self.dropped.entry(why).or_default() += n;
    }
}

/// The `provider_lookup` processor.
pub struct ProviderLookupProcessor {
    cfg: ProviderConfig,
    aliases: ProviderAliases,
    default_provider: Arc<str>,
    rules: ArcSwap<RuleSet>,
    rates: ArcSwap<RateTable>,
    builtin_rates: Option<RateTable>,
    rules_watch: Mutex<Option<WatchedFile>>,
    rates_watch: Mutex<Option<WatchedFile>>,
    rules_reloads: ReloadCounters,
    rates_reloads: ReloadCounters,
    last_reload_error: Mutex<Option<String>>,
    ledger: Mutex<CostLedger>,
    /// Agent-reported providers by (cluster, node), kept in the ledger's node map.
    unknown_models: Mutex<UnknownModels>,
    resolved: [AtomicU64; 4],
    dropped: Mutex<BTreeMap<&'static str, u64>>,
    last_tick: AtomicU64,
    started: AtomicBool,
}

impl std::fmt::Debug for ProviderLookupProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderLookupProcessor")
            .field("rules", &self.rules.load().len())
            .field("rates", &self.rates.load().len())
            .finish_non_exhaustive()
    }
}

fn file_errors(key: &str, file: &str, errs: ConfigErrors) -> ConfigErrors {
    ConfigErrors(
        errs.0
            .into_iter()
            .map(|e| ConfigError::new(key, format!("{file}: {e}")))
            .collect(),
    )
}

fn log_errors(errs: &ConfigErrors) -> String {
    let mut s: Vec<String> = errs
        .iter()
        .take(LOGGED_ERRORS)
        .map(|e| e.to_string())
        .collect();
    if errs.len() > LOGGED_ERRORS {
        s.push(format!("... and {} more", errs.len() - LOGGED_ERRORS));
    }
    s.join("; ")
}

impl ProviderLookupProcessor {
    /// Build from a validated config: reads and validates the rules and rates files,
    /// reporting every problem in them under `rules_file` / `rates_file`.
    pub fn new(cfg: ProviderConfig) -> Result<Self, ConfigErrors> {
        use component::ComponentConfig;
        cfg.validate()?;
        let aliases = cfg.alias_table()?;
        let mut errs = ConfigErrors::new();
        let default_provider = match aliases.normalise(&cfg.default_provider) {
            Ok(p) => p,
            Err(e) => {
                errs.push("default_provider", e.to_string());
                Arc::from(provider::UNKNOWN_PROVIDER)
            }
        };

        let mut rules = RuleSet::empty();
        let mut rules_watch = None;
        if !cfg.rules_file.trim().is_empty() {
            let mut w = WatchedFile::new(cfg.rules_file.trim(), MAX_RULES_FILE_BYTES);
            match w.read_now() {
                Ok((bytes, fp)) => match RuleSet::parse(&bytes, &aliases) {
                    Ok(rs) => {
                        rules = rs;
                        w.accept(fp);
                    }
                    Err(e) => errs.0.extend(file_errors("rules_file", &fp.path, e).0),
                },
                Err(e) => errs.push("rules_file", e.to_string()),
            }
            rules_watch = Some(w);
        }

        let builtin_rates = if cfg.include_builtin_rates {
            match RateTable::builtin(&aliases) {
                Ok(t) => Some(t),
                Err(e) => {
                    errs.0
                        .extend(file_errors("include_builtin_rates", "built-in table", e).0);
                    None
                }
            }
        } else {
            None
        };
        let mut rates = builtin_rates.clone();
        let mut rates_watch = None;
        if !cfg.rates_file.trim().is_empty() {
            let mut w = WatchedFile::new(cfg.rates_file.trim(), MAX_RATES_FILE_BYTES);
            match w.read_now() {
                Ok((bytes, fp)) => match Self::table_from(&bytes, &aliases, builtin_rates.as_ref())
                {
                    Ok(t) => {
                        rates = Some(t);
                        w.accept(fp);
                    }
                    Err(e) => errs.0.extend(file_errors("rates_file", &fp.path, e).0),
                },
                Err(e) => errs.push("rates_file", e.to_string()),
            }
            rates_watch = Some(w);
        }
        errs.into_result()?;
        let Some(rates) = rates else {
            return Err(ConfigError::new("rates_file", "no rate table (this is a bug)").into());
        };

        let ledger = CostLedger::new(LedgerSettings::from_config(&cfg));
        Ok(ProviderLookupProcessor {
            aliases,
            default_provider,
            rules: ArcSwap::from_pointee(rules),
            rates: ArcSwap::from_pointee(rates),
            builtin_rates,
            rules_watch: Mutex::new(rules_watch),
            rates_watch: Mutex::new(rates_watch),
            rules_reloads: ReloadCounters::default(),
            rates_reloads: ReloadCounters::default(),
            last_reload_error: Mutex::new(None),
            ledger: Mutex::new(ledger),
            unknown_models: Mutex::new(UnknownModels::default()),
            resolved: Default::default(),
            dropped: Mutex::new(BTreeMap::new()),
            last_tick: AtomicU64::new(0),
            started: AtomicBool::new(false),
            cfg,
        })
    }

    fn table_from(
        bytes: &[u8],
        aliases: &ProviderAliases,
        builtin: Option<&RateTable>,
    ) -> Result<RateTable, ConfigErrors> {
        let user = RateTable::parse(bytes, aliases)?;
        match builtin {
            Some(b) => b.overridden_by(&user).map_err(ConfigErrors::from),
            None => Ok(user),
        }
    }

    /// How often the host should call `tick`.
    pub fn tick_interval(&self) -> Duration {
        self.cfg.tick_interval
    }

    pub fn config(&self) -> &ProviderConfig {
        &self.cfg
    }

    /// The rules file version in use.
    pub fn rules_fingerprint(&self) -> Option<Fingerprint> {
        self.rules_watch
            .lock()
            .as_ref()
            .and_then(|w| w.current().cloned())
    }

    /// The rates file version in use.
    pub fn rates_fingerprint(&self) -> Option<Fingerprint> {
        self.rates_watch
            .lock()
            .as_ref()
            .and_then(|w| w.current().cloned())
    }

    /// Number of operator rules in use.
    pub fn rules_loaded(&self) -> usize {
        self.rules.load().len()
    }

    /// The rate table in use.
    pub fn rate_table(&self) -> Arc<RateTable> {
        self.rates.load_full()
    }

    /// The cost snapshot of the last tick.
    pub fn cost_snapshot(&self) -> Arc<CostSnapshot> {
        self.ledger.lock().snapshot()
    }

    /// Re-read the rules file now (whatever its mtime says). A bad file keeps the
    /// previous rules; the error says why.
    pub fn reload_rules(&self) -> Result<Fingerprint, ReloadError> {
        let mut guard = self.rules_watch.lock();
        let Some(w) = guard.as_mut() else {
            return Err(ReloadError::NotConfigured("rules_file"));
        };
        let outcome = match w.read_now() {
            Ok((bytes, fp)) => self.apply_rules(w, &bytes, fp),
            Err(e) => Err(ReloadError::Read(e)),
        };
        self.record_reload(&self.rules_reloads, "rules", &outcome);
        outcome
    }

    /// Re-read the rates file now. A bad file keeps the previous table.
    pub fn reload_rates(&self) -> Result<Fingerprint, ReloadError> {
        let mut guard = self.rates_watch.lock();
        let Some(w) = guard.as_mut() else {
            return Err(ReloadError::NotConfigured("rates_file"));
        };
        let outcome = match w.read_now() {
            Ok((bytes, fp)) => self.apply_rates(w, &bytes, fp),
            Err(e) => Err(ReloadError::Read(e)),
        };
        self.record_reload(&self.rates_reloads, "rates", &outcome);
        outcome
    }

    fn apply_rules(
        &self,
        w: &mut WatchedFile,
        bytes: &[u8],
        fp: Fingerprint,
    ) -> Result<Fingerprint, ReloadError> {
        match RuleSet::parse(bytes, &self.aliases) {
            Ok(rs) => {
                let n = rs.len();
                self.rules.store(Arc::new(rs));
                w.accept(fp.clone());
                tracing::info!(
                    path = %fp.path,
                    sha256 = %fp.sha256,
                    mtime_unix_nano = fp.mtime_unix_nano,
                    rules = n,
                    "provider rules reloaded"
                );
                Ok(fp)
            }
            Err(errors) => Err(ReloadError::Invalid {
                path: fp.path,
                sha256: fp.sha256,
                errors,
            }),
        }
    }

    fn apply_rates(
        &self,
        w: &mut WatchedFile,
        bytes: &[u8],
        fp: Fingerprint,
    ) -> Result<Fingerprint, ReloadError> {
        match Self::table_from(bytes, &self.aliases, self.builtin_rates.as_ref()) {
            Ok(t) => {
                let (n, currency) = (t.len(), Arc::clone(t.currency()));
                self.rates.store(Arc::new(t));
                w.accept(fp.clone());
                tracing::info!(
                    path = %fp.path,
                    sha256 = %fp.sha256,
                    mtime_unix_nano = fp.mtime_unix_nano,
                    rates = n,
                    currency = %currency,
                    "GPU rate table reloaded"
                );
                Ok(fp)
            }
            Err(errors) => Err(ReloadError::Invalid {
                path: fp.path,
                sha256: fp.sha256,
                errors,
            }),
        }
    }

    fn record_reload(
        &self,
        counters: &ReloadCounters,
        what: &str,
        outcome: &Result<Fingerprint, ReloadError>,
    ) {
        match outcome {
            Ok(_) => {
                counters.success.fetch_add(1, Ordering::Relaxed);
            }
            Err(ReloadError::NotConfigured(_)) => {}
            Err(e) => {
                counters.failure.fetch_add(1, Ordering::Relaxed);
                let why = match e {
                    ReloadError::Invalid {
                        path,
                        sha256,
                        errors,
                    } => format!("{path} (sha256 {sha256}): {}", log_errors(errors)),
                    other => other.to_string(),
                };
                tracing::warn!(file = what, error = %why, "reload failed; keeping the previous version");
                *self.last_reload_error.lock() = Some(format!("{what}: {why}"));
            }
        }
    }

    /// Poll both files (one `stat` each when unchanged).
    fn poll_files(&self) {
        for (watch, counters, what) in [
            (&self.rules_watch, &self.rules_reloads, "rules"),
            (&self.rates_watch, &self.rates_reloads, "rates"),
        ] {
            let mut guard = watch.lock();
            let Some(w) = guard.as_mut() else {
                continue;
            };
            let outcome = match w.poll() {
                Poll::Unchanged => continue,
                Poll::Changed { bytes, fingerprint } => {
                    if what == "rules" {
                        self.apply_rules(w, &bytes, fingerprint)
                    } else {
                        self.apply_rates(w, &bytes, fingerprint)
                    }
                }
                Poll::Failed(e) => Err(ReloadError::Read(e)),
            };
            self.record_reload(counters, what, &outcome);
        }
    }

    /// The provider of a resource with these attributes, and why.
    pub fn resolve(&self, attrs: &[KeyValue]) -> Resolution {
        let mut invalid = 0;
        let rules = self.rules.load();
        self.resolve_with(&rules, attrs, None, &mut invalid)
    }

    fn resolve_with(
        &self,
        rules: &RuleSet,
        attrs: &[KeyValue],
        remembered: Option<Arc<str>>,
        invalid: &mut u64,
    ) -> Resolution {
        if let Some(rule) = rules.first_match(attrs) {
            return Resolution {
                provider: Arc::clone(&rule.provider),
                source: ProviderSource::Rule(rule.index),
            };
        }
        let mut norm = |raw: &str| match self.aliases.normalise(raw) {
            Ok(p) => Some(p),
            Err(_) => {
                *invalid += 1;
                None
            }
        };
        if let Some(p) = otlp::get_str(attrs, resource::PROVIDER).and_then(&mut norm) {
            return Resolution {
                provider: p,
                source: ProviderSource::Agent,
            };
        }
        if let Some(p) = remembered {
            return Resolution {
                provider: p,
                source: ProviderSource::Agent,
            };
        }
        let semconv = otlp::get_str(attrs, resource::CLOUD_PROVIDER)
            .and_then(&mut norm)
            .or_else(|| {
                otlp::get_str(attrs, resource::CLOUD_PLATFORM)
                    .and_then(provider::provider_from_cloud_platform)
                    .and_then(&mut norm)
            })
            .or_else(|| {
                otlp::get_str(attrs, resource::HOST_TYPE)
                    .and_then(provider::provider_from_host_type)
                    .and_then(&mut norm)
            });
        match semconv {
            Some(p) => Resolution {
                provider: p,
                source: ProviderSource::SemanticConvention,
            },
            None => Resolution {
                provider: Arc::clone(&self.default_provider),
                source: ProviderSource::Default,
            },
        }
    }

    fn observed_at(&self, ctx: &BatchContext) -> Timestamp {
        if ctx.received_at != Timestamp::ZERO {
            ctx.received_at
        } else {
            Timestamp(self.last_tick.load(Ordering::Relaxed))
        }
    }

    /// Read what this processor needs from one resource.
    fn extract(
        &self,
        rm: &ResourceMetrics,
        res: &Resolution,
        agent_value: Option<Arc<str>>,
        ctx: &BatchContext,
        out: &mut Extracted,
    ) {
        let attrs = otlp::resource_attrs(rm);
        let cluster: Option<Arc<str>> = otlp::get_str(attrs, resource::CLUSTER_ID)
            .filter(|s| !s.is_empty())
            .map(Arc::from)
            .or_else(|| ctx.cluster_id.clone());
        let node: Option<Arc<str>> = otlp::get_str(attrs, resource::NODE_ID)
            .filter(|s| !s.is_empty())
            .map(Arc::from);
        let mut health_push = false;
        let mut gpu = None;
        let mut world = None;
        for sm in &rm.scope_metrics {
            for met in &sm.metrics {
                match met.name.as_str() {
                    metric::NODE_INFO => {
                        health_push = true;
                        for dp in otlp::number_points(met) {
                            let model = otlp::get_str(&dp.attributes, attr::GPU_MODEL)
                                .filter(|s| !s.trim().is_empty() && s.len() <= MAX_MODEL_LEN);
                            let count = otlp::get_i64(&dp.attributes, attr::GPU_COUNT)
                                .filter(|c| (1..=MAX_GPUS_PER_NODE).contains(c))
                                .and_then(|c| u32::try_from(c).ok());
                            match (model, count) {
                                (Some(mo), Some(c)) => gpu = Some((Arc::from(mo), c)),
                                _ => out.drop(reason::INVALID_NODE_INFO, 1),
                            }
                        }
                    }
                    metric::NODE_WORLD_SIZE => {
                        health_push = true;
                        for dp in otlp::number_points(met) {
                            match otlp::point_value(dp).filter(|v| {
                                v.fract() == 0.0 && (0.0..=MAX_WORLD_SIZE as f64).contains(v)
                            }) {
                                Some(v) => world = Some(v as u32),
                                None => out.drop(reason::INVALID_WORLD_SIZE, 1),
                            }
                        }
                    }
                    m::INPUT_FLEET_NODE_STRAGGLER => {
                        let points = otlp::number_points(met);
                        let (Some(c), Some(n)) = (&cluster, &node) else {
                            let why = if cluster.is_none() {
                                reason::NO_CLUSTER
                            } else {
                                reason::NO_NODE
                            };
                            out.drop(why, points.len() as u64);
                            continue;
                        };
                        let list = out.stragglers.entry(Arc::clone(c)).or_default();
                        for dp in points {
                            list.push(StragglerPoint {
                                node: Arc::clone(n),
                                provider: Arc::clone(&res.provider),
                                straggler: otlp::point_value(dp).is_some_and(|v| v >= 0.5),
                            });
                        }
                    }
                    metric::NCCL_PEER_LAG_MS => {
                        let points = otlp::number_points(met);
                        let Some(c) = &cluster else {
                            out.drop(reason::NO_CLUSTER, points.len() as u64);
                            continue;
                        };
                        for dp in points {
                            match lag_point(c, node.as_ref(), &res.provider, dp) {
                                Ok(mut p) => {
                                    let slot = (
                                        Arc::clone(&p.cluster),
                                        Arc::clone(&p.comm),
                                        Arc::clone(&p.op),
                                        p.time_unix_nano,
                                        p.op_seq,
                                        p.rank,
                                    );
                                    let seen = out.lag_occurrences.entry(slot).or_default();
                                    p.occurrence = *seen;
                                    *seen = seen.saturating_add(1);
                                    out.lags.push(p);
                                }
                                Err(why) => out.drop(why, 1),
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        if health_push {
            if world.is_none() {
                world = otlp::get_i64(attrs, resource::WORLD_SIZE)
                    .filter(|w| (0..=MAX_WORLD_SIZE).contains(w))
                    .and_then(|w| u32::try_from(w).ok());
            }
            match (cluster, node) {
                (Some(cluster), Some(node)) => out.nodes.push((
                    NodeObservation {
                        cluster,
                        node,
                        provider: Arc::clone(&res.provider),
                        gpu,
                        world_size: world,
                    },
                    agent_value,
                )),
                (None, _) => out.drop(reason::NO_CLUSTER, 1),
                (_, None) => out.drop(reason::NO_NODE, 1),
            }
        }
    }

    fn count_unknown_model(&self, provider: &Arc<str>, model: &Arc<str>) {
        let mut u = self.unknown_models.lock();
        let key = (Arc::clone(provider), Arc::clone(model));
        if let Some(n) = u.counts.get_mut(&key) {
            *n += 1;
            return;
        }
        if u.counts.len() >= self.cfg.limits.max_unknown_model_labels {
            u.overflow += 1;
            drop(u);
            *self
                .dropped
                .lock()
                .entry(reason::UNKNOWN_MODEL_LABEL_CAP)
                .or_default() += 1;
            return;
        }
        u.counts.insert(key, 1);
        // Logged once per (provider, model): bounded by the label cap.
        tracing::warn!(
            provider = %provider,
            gpu_model = %model,
            fallback_rate = self.rates.load().fallback_rate(),
            "GPU model has no rate for this provider; using the fallback rate \
             (add it to rates_file, keyed exactly as nvidia-smi prints it)"
        );
    }
}

fn lag_point(
    cluster: &Arc<str>,
    node: Option<&Arc<str>>,
    provider: &Arc<str>,
    dp: &otlp::NumberDataPoint,
) -> Result<LagPoint, &'static str> {
    let a = &dp.attributes;
    let key = |k: &str| otlp::get_str(a, k).filter(|s| !s.is_empty() && s.len() <= MAX_LAG_KEY_LEN);
    let comm = key(attr::NCCL_COMM_ID_HASH).ok_or(reason::INVALID_LAG_POINT)?;
    if comm.bytes().all(|b| b == b'0') {
        return Err(reason::UNKNOWN_COMMUNICATOR);
    }
    let op = key(attr::NCCL_OP_TYPE).ok_or(reason::INVALID_LAG_POINT)?;
    let rank = otlp::get_i64(a, attr::NCCL_RANK)
        .filter(|r| (0..MAX_WORLD_SIZE).contains(r))
        .and_then(|r| u32::try_from(r).ok())
        .ok_or(reason::INVALID_LAG_POINT)?;
    let nranks = match otlp::get_i64(a, attr::NCCL_NRANKS) {
        None => 0,
        Some(n) if (0..=MAX_WORLD_SIZE).contains(&n) => u32::try_from(n).unwrap_or(0),
        Some(_) => return Err(reason::INVALID_LAG_POINT),
    };
    let lag_ms = otlp::point_value(dp)
        .filter(|v| v.is_finite() && v.abs() <= MAX_LAG_MS)
        .ok_or(reason::INVALID_LAG_POINT)?;
    Ok(LagPoint {
        cluster: Arc::clone(cluster),
        node: node.cloned(),
        provider: Arc::clone(provider),
        comm: Arc::from(comm),
        op: Arc::from(op),
        time_unix_nano: dp.time_unix_nano,
        op_seq: otlp::get_i64(a, attr::NCCL_OP_SEQ),
        occurrence: 0,
        rank,
        nranks,
        lag_ms,
    })
}

impl Processor for ProviderLookupProcessor {
    fn start(&self, _host: &dyn Host) -> Result<(), StartError> {
        let first = !self.started.swap(true, Ordering::SeqCst);
        if first {
            match self.rules_fingerprint() {
                Some(fp) => tracing::info!(
                    path = %fp.path,
                    sha256 = %fp.sha256,
                    mtime_unix_nano = fp.mtime_unix_nano,
                    rules = self.rules_loaded(),
                    "provider rules loaded"
                ),
                None => tracing::info!(
                    "no provider rules file; agent value, semantic conventions and default apply"
                ),
            }
            let rates = self.rates.load();
            match self.rates_fingerprint() {
                Some(fp) => tracing::info!(
                    path = %fp.path,
                    sha256 = %fp.sha256,
                    mtime_unix_nano = fp.mtime_unix_nano,
                    rates = rates.len(),
                    currency = %rates.currency(),
                    builtin = self.builtin_rates.is_some(),
                    "GPU rate table loaded"
                ),
                None => tracing::info!(
                    rates = rates.len(),
                    currency = %rates.currency(),
                    "GPU rate table: built-in"
                ),
            }
        }
        Ok(())
    }

    fn process(&self, data: &mut Vec<ResourceMetrics>, ctx: &BatchContext) -> ProcessOutcome {
        let rules = self.rules.load();
        let at = self.observed_at(ctx);
        let mut ex = Extracted::default();
        let mut invalid = 0u64;
        let mut by_source = [0u64; 4];
        for rm in data.iter_mut() {
            let attrs = otlp::resource_attrs(rm);
            let agent_value = otlp::get_str(attrs, resource::PROVIDER)
                .and_then(|raw| self.aliases.normalise(raw).ok());
            // A resource without its own agent value (trace exporter, straggler events)
            // takes the value the same node's health push carried.
            let remembered = if agent_value.is_none() {
                let cluster =
                    otlp::get_str(attrs, resource::CLUSTER_ID).or(ctx.cluster_id.as_deref());
                match (cluster, otlp::get_str(attrs, resource::NODE_ID)) {
                    (Some(c), Some(n)) => self.ledger.lock().agent_provider(c, n),
                    _ => None,
                }
            } else {
                None
            };
            let res = self.resolve_with(&rules, attrs, remembered, &mut invalid);
            by_source[res.source.index()] += 1;
            self.extract(rm, &res, agent_value, ctx, &mut ex);
            let r = rm.resource.get_or_insert_with(Default::default);
            otlp::set_str(&mut r.attributes, resource::PROVIDER, &res.provider);
        }
        for (i, n) in by_source.iter().enumerate() {
            if *n > 0 {
                self.resolved[i].fetch_add(*n, Ordering::Relaxed);
            }
        }
        if invalid > 0 {
            ex.drop(reason::INVALID_PROVIDER_VALUE, invalid);
        }

        let rates = self.rates.load();
        let mut unknown = Vec::new();
        {
            let mut ledger = self.ledger.lock();
            for (obs, agent_value) in ex.nodes {
                let gpu = obs.gpu.clone();
                let provider = Arc::clone(&obs.provider);
                let key = (Arc::clone(&obs.cluster), Arc::clone(&obs.node));
                let change = ledger.observe_node(obs, at);
                if change != NodeChange::Dropped {
                    ledger.set_agent_provider(&key.0, &key.1, agent_value);
                }
                if change == NodeChange::NewInfo
                    && let Some((model, _)) = gpu
                    && !rates.lookup(&provider, &model).known
                {
                    unknown.push((provider, model));
                }
            }
            for (cluster, points) in &ex.stragglers {
                ledger.observe_stragglers(cluster, points, at);
            }
            for p in ex.lags {
                ledger.observe_lag(p);
            }
        }
        for (provider, model) in unknown {
            self.count_unknown_model(&provider, &model);
        }
        if !ex.dropped.is_empty() {
            let mut d = self.dropped.lock();
            for (why, n) in ex.dropped {
                *d.entry(why).or_default() += n;
            }
        }
        // Enrichment only: nothing is consumed or refused.
        ProcessOutcome::default()
    }

    fn tick(&self, now: Timestamp) -> Vec<ResourceMetrics> {
        self.last_tick.store(now.as_nanos(), Ordering::Relaxed);
        self.poll_files();
        let rates = self.rates.load_full();
        self.ledger.lock().tick(now, &rates);
        Vec::new()
    }

    fn shutdown(&self) {
        self.started.store(false, Ordering::SeqCst);
    }

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        let (snap, ledger_drops) = {
            let l = self.ledger.lock();
            (l.snapshot(), l.dropped())
        };
        out.extend(cost_families(&snap));

        let mut rules_loaded =
            MetricFamily::gauge(m::RULES_LOADED, "Operator provider rules in use.");
        rules_loaded.push(&[], self.rules_loaded() as f64);
        out.push(rules_loaded);
        let mut rates_loaded =
            MetricFamily::gauge(m::RATES_LOADED, "(provider, GPU model) rates in use.");
        rates_loaded.push(&[], self.rates.load().len() as f64);
        out.push(rates_loaded);
        for (name, help, c) in [
            (
                m::RULES_RELOAD_TOTAL,
                "Rules file reloads by outcome.",
                &self.rules_reloads,
            ),
            (
                m::RATES_RELOAD_TOTAL,
                "Rates file reloads by outcome.",
                &self.rates_reloads,
            ),
        ] {
            let mut f = MetricFamily::counter(name, help);
            f.push(
                &[("outcome", "success")],
                c.success.load(Ordering::Relaxed) as f64,
            );
            f.push(
                &[("outcome", "failure")],
                c.failure.load(Ordering::Relaxed) as f64,
            );
            out.push(f);
        }

        let mut unknown = MetricFamily::counter(
            m::UNKNOWN_GPU_MODEL_TOTAL,
            "Node reports whose GPU model has no rate for its provider (priced at the fallback).",
        );
        {
            let u = self.unknown_models.lock();
            for ((p, model), n) in &u.counts {
                unknown.push(&[("provider", p), ("gpu_model", model)], *n as f64);
            }
            if u.overflow > 0 {
                unknown.push(
                    &[
                        ("provider", m::OVERFLOW_LABEL),
                        ("gpu_model", m::OVERFLOW_LABEL),
                    ],
                    u.overflow as f64,
                );
            }
        }
        out.push(unknown);

        let mut resolved = MetricFamily::counter(
            m::RESOLVED_TOTAL,
            "Resources tagged with a provider, by source.",
        );
        for (i, s) in SOURCES.iter().enumerate() {
            resolved.push(
                &[("source", s)],
                self.resolved[i].load(Ordering::Relaxed) as f64,
            );
        }
        out.push(resolved);

        let mut dropped = MetricFamily::counter(m::DROPPED_TOTAL, "Inputs not kept, by reason.");
        {
            let d = self.dropped.lock();
            for why in reason::ALL {
                dropped.push(&[("reason", why)], d.get(why).copied().unwrap_or(0) as f64);
            }
        }
        for (why, n) in ledger_drops {
            dropped.push(&[("reason", why.as_str())], n as f64);
        }
        out.push(dropped);
    }

    fn diagnostics(&self) -> Option<serde_json::Value> {
        let snap = self.cost_snapshot();
        let rates = self.rates.load();
        Some(serde_json::json!({
            "rules": {
                "file": self.rules_fingerprint(),
                "loaded": self.rules_loaded(),
            },
            "rates": {
                "file": self.rates_fingerprint(),
                "builtin": self.builtin_rates.is_some(),
                "currency": &**rates.currency(),
                "currency_symbol": rates.currency_symbol(),
                "fallback_rate": rates.fallback_rate(),
                "entries": rates.len(),
            },
            "last_reload_error": self.last_reload_error.lock().clone(),
            "computed_at_unix_nano": snap.computed_at.as_nanos(),
            "clusters": snap.straggler_counts.iter().map(|(c, n)| serde_json::json!({
                "cluster_id": &**c,
                "stragglers": n,
            })).collect::<Vec<_>>(),
        }))
    }
}

/// The cost families of a snapshot.
fn cost_families(snap: &CostSnapshot) -> Vec<MetricFamily> {
    let mut idle_rate = MetricFamily::gauge(
        m::COST_BARRIER_IDLE_RATE,
        "GPU spend idle at NCCL barriers, currency units per hour (window average).",
    );
    let mut idle_gpus = MetricFamily::gauge(
        m::COST_BARRIER_IDLE_GPUS,
        "GPUs idle at NCCL barriers on average over the window.",
    );
    for r in &snap.barrier {
        idle_rate.push(
            &[
                ("cluster_id", &r.cluster),
                ("provider", &r.price.provider),
                ("gpu_model", &r.price.gpu_model),
                ("currency", &r.currency),
            ],
            r.rate_per_hour,
        );
        idle_gpus.push(
            &[
                ("cluster_id", &r.cluster),
                ("provider", &r.price.provider),
                ("gpu_model", &r.price.gpu_model),
            ],
            r.idle_gpus,
        );
    }
    let mut straggler_rate = MetricFamily::gauge(
        m::COST_STRAGGLER_RATE,
        "GPU spend held back by each current straggler, currency units per hour.",
    );
    for r in &snap.stragglers {
        straggler_rate.push(
            &[
                ("cluster_id", &r.cluster),
                ("node_id", &r.node),
                ("provider", &r.price.provider),
                ("gpu_model", &r.price.gpu_model),
                ("currency", &r.currency),
            ],
            r.rate_per_hour,
        );
    }
    let mut idle_total = MetricFamily::counter(
        m::COST_BARRIER_IDLE_TOTAL,
        "GPU spend idle at NCCL barriers, currency units.",
    );
    let mut idle_gpu_s = MetricFamily::counter(
        m::COST_BARRIER_IDLE_GPU_SECONDS_TOTAL,
        "GPU-seconds idle at NCCL barriers.",
    );
    let mut straggler_total = MetricFamily::counter(
        m::COST_STRAGGLER_TOTAL,
        "GPU spend held back by stragglers, currency units.",
    );
    for (key, t) in &snap.totals {
        match key {
            SeriesKey::Barrier {
                cluster,
                price,
                currency,
            } => {
                idle_total.push(
                    &[
                        ("cluster_id", cluster),
                        ("provider", &price.provider),
                        ("gpu_model", &price.gpu_model),
                        ("currency", currency),
                    ],
                    t.money,
                );
                idle_gpu_s.push(
                    &[
                        ("cluster_id", cluster),
                        ("provider", &price.provider),
                        ("gpu_model", &price.gpu_model),
                    ],
                    t.gpu_seconds,
                );
            }
            SeriesKey::Straggler {
                cluster,
                node,
                price,
                currency,
            } => straggler_total.push(
                &[
                    ("cluster_id", cluster),
                    ("node_id", node),
                    ("provider", &price.provider),
                    ("gpu_model", &price.gpu_model),
                    ("currency", currency),
                ],
                t.money,
            ),
        }
    }
    let mut hourly = MetricFamily::gauge(
        m::GPU_HOURLY_RATE,
        "Rate per GPU-hour in use for the GPUs of live nodes.",
    );
    for (price, currency, rate) in &snap.gpu_rates {
        hourly.push(
            &[
                ("provider", &price.provider),
                ("gpu_model", &price.gpu_model),
                ("currency", currency),
            ],
            *rate,
        );
    }
    let mut nodes = MetricFamily::gauge(m::PROVIDER_NODES, "Live nodes per cluster and provider.");
    for (cluster, provider, n) in &snap.provider_nodes {
        nodes.push(
            &[("cluster_id", cluster), ("provider", provider)],
            *n as f64,
        );
    }
    let mut stragglers =
        MetricFamily::gauge(m::PROVIDER_STRAGGLERS, "Current stragglers per cluster.");
    for (cluster, n) in &snap.straggler_counts {
        stragglers.push(&[("cluster_id", cluster)], *n as f64);
    }
    vec![
        idle_rate,
        idle_gpus,
        idle_total,
        idle_gpu_s,
        straggler_rate,
        straggler_total,
        hourly,
        nodes,
        stragglers,
    ]
}
