//! Glue: OTLP batches in -> provider tag on every resource, observations into the cost
//! ledger; `tick` checks the files and accrues cost; `telemetry` shows it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use component::config::{ConfigError, ConfigErrors};
use component::otlp::{self, KeyValue, ResourceMetrics};
use component::{
    BatchContext, Host, MetricFamily, ProcessOutcome, Processor, StartError, Timestamp,
};
use ingero_wire::resource;
use parking_lot::Mutex;

use crate::config::ProviderConfig;
use crate::cost::{CostLedger, CostSnapshot, LedgerSettings, NodeChange};
use crate::exposition;
use crate::extract::{self, Extracted};
use crate::metrics::{self as m, reason};
use crate::provider::{self, ProviderAliases};
use crate::rates::{MAX_RATES_FILE_BYTES, RateTable};
use crate::resolve::{self, ProviderSource, Resolution, SOURCES};
use crate::rules::{MAX_RULES_FILE_BYTES, RuleSet};
use crate::watch::{Fingerprint, Poll, ReadError, WatchedFile};

/// How many errors of a bad file go into one log line.
const LOGGED_ERRORS: usize = 20;

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
    ledger: Arc<Mutex<CostLedger>>,
    /// The cost of waiting as the live view reads it (shares `ledger`).
    view: Arc<crate::view::LiveCost>,
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

        let ledger = Arc::new(Mutex::new(CostLedger::new(LedgerSettings::from_config(
            &cfg,
        ))));
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
            view: Arc::new(crate::view::LiveCost {
                ledger: Arc::clone(&ledger),
            }),
            ledger,
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
        resolve::resolve(
            &rules,
            &self.aliases,
            &self.default_provider,
            attrs,
            None,
            &mut invalid,
        )
    }

    fn observed_at(&self, ctx: &BatchContext) -> Timestamp {
        if ctx.received_at != Timestamp::ZERO {
            ctx.received_at
        } else {
            Timestamp(self.last_tick.load(Ordering::Relaxed))
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

impl Processor for ProviderLookupProcessor {
    fn start(&self, host: &dyn Host) -> Result<(), StartError> {
        let first = !self.started.swap(true, Ordering::SeqCst);
        if let Some((_, board)) = ingero_wire::view::find_view_board(host) {
            let view: Arc<dyn ingero_wire::view::ClusterViewSource> = self.view.clone();
            board.register(view);
        }
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
            if !resolve::looks_like_agent(rm) {
                continue;
            }
            let attrs = otlp::resource_attrs(rm);
            let own_value = otlp::get_str(attrs, resource::PROVIDER)
                .and_then(|raw| self.aliases.normalise(raw).ok());
            let pinned = if own_value.is_none() {
                let cluster =
                    otlp::get_str(attrs, resource::CLUSTER_ID).or(ctx.cluster_id.as_deref());
                match (cluster, otlp::get_str(attrs, resource::NODE_ID)) {
                    (Some(c), Some(n)) => self.ledger.lock().pinned_provider(c, n),
                    _ => None,
                }
            } else {
                None
            };
            let res = resolve::resolve(
                &rules,
                &self.aliases,
                &self.default_provider,
                attrs,
                pinned,
                &mut invalid,
            );
            by_source[res.source.index()] += 1;
            // What a health push resolved to by rule or agent value is kept for the node's
            // other pushes.
            let pin = matches!(res.source, ProviderSource::Rule(_) | ProviderSource::Agent)
                .then(|| res.clone());
            extract::extract(rm, &res.provider, pin, ctx, &mut ex);
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
            for (obs, pin) in ex.nodes {
                let gpu = obs.gpu.clone();
                let provider = Arc::clone(&obs.provider);
                let key = (Arc::clone(&obs.cluster), Arc::clone(&obs.node));
                let change = ledger.observe_node(obs, at);
                if change != NodeChange::Dropped {
                    ledger.set_pinned_provider(&key.0, &key.1, pin);
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
        out.extend(exposition::cost_families(&snap));

        let mut rules_loaded = m::spec::RULES_LOADED.family();
        rules_loaded.push(&[], self.rules_loaded() as f64);
        out.push(rules_loaded);
        let mut rates_loaded = m::spec::RATES_LOADED.family();
        rates_loaded.push(&[], self.rates.load().len() as f64);
        out.push(rates_loaded);
        for (spec, c) in [
            (&m::spec::RULES_RELOAD_TOTAL, &self.rules_reloads),
            (&m::spec::RATES_RELOAD_TOTAL, &self.rates_reloads),
        ] {
            let mut f = spec.family();
            f.push(
                &[(m::LABEL_OUTCOME, "success")],
                c.success.load(Ordering::Relaxed) as f64,
            );
            f.push(
                &[(m::LABEL_OUTCOME, "failure")],
                c.failure.load(Ordering::Relaxed) as f64,
            );
            out.push(f);
        }

        let mut unknown = m::spec::UNKNOWN_GPU_MODEL_TOTAL.family();
        {
            let u = self.unknown_models.lock();
            for ((p, model), n) in &u.counts {
                unknown.push(
                    &[(m::LABEL_PROVIDER, p), (m::LABEL_GPU_MODEL, model)],
                    *n as f64,
                );
            }
            if u.overflow > 0 {
                unknown.push(
                    &[
                        (m::LABEL_PROVIDER, m::OVERFLOW_LABEL),
                        (m::LABEL_GPU_MODEL, m::OVERFLOW_LABEL),
                    ],
                    u.overflow as f64,
                );
            }
        }
        out.push(unknown);

        let mut resolved = m::spec::RESOLVED_TOTAL.family();
        for (i, s) in SOURCES.iter().enumerate() {
            resolved.push(
                &[(m::LABEL_SOURCE, s)],
                self.resolved[i].load(Ordering::Relaxed) as f64,
            );
        }
        out.push(resolved);

        let mut dropped = m::spec::DROPPED_TOTAL.family();
        {
            let d = self.dropped.lock();
            for why in reason::ALL {
                dropped.push(
                    &[(m::LABEL_REASON, why)],
                    d.get(why).copied().unwrap_or(0) as f64,
                );
            }
        }
        for (why, n) in ledger_drops {
            dropped.push(&[(m::LABEL_REASON, why.as_str())], n as f64);
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
