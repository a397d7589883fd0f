//! GPU rate tables: per provider and GPU model, in currency units per GPU-hour.
//!
//! The file format is the agent's `gpu_rates.yaml` (`docs/agent-protocol.md`, "Provider and
//! cost"):
//!
//! ```yaml
//! currency_name: USD          # ISO 4217, required
//! currency_symbol: "$"        # required
//! fallback_rate: 0.0          # required, >= 0; used for (provider, model) pairs not listed
//! providers:                  # at least one
//!   ec2:                      # provider keys go through the alias table (aws == ec2)
//!     "NVIDIA H100 80GB HBM3": 12.29   # model exactly as nvidia-smi prints it
//! ```
//!
//! The built-in table (`rates/gpu_rates.yaml`, embedded) covers the major clouds,
//! neoclouds and on-prem estimates; a user file overrides it entry by entry.

use std::collections::HashMap;
use std::sync::Arc;

use component::config::{ConfigError, ConfigErrors, ConfigValue};

use crate::provider::ProviderAliases;

/// Largest rates file read, in bytes (the agent's `rates update` cap).
pub const MAX_RATES_FILE_BYTES: u64 = 1 << 20;
/// Most providers in one table.
pub const MAX_PROVIDERS: usize = 256;
/// Most (provider, model) entries in one table.
pub const MAX_RATE_ENTRIES: usize = 16_384;
/// Longest GPU model key, in bytes.
pub const MAX_MODEL_LEN: usize = 256;
/// Largest accepted rate (per GPU-hour); anything above is a typo, not a price.
pub const MAX_RATE: f64 = 1.0e6;

/// The built-in table's source text.
pub const BUILTIN_RATES_YAML: &str = include_str!("../rates/gpu_rates.yaml");

const TOP_LEVEL_KEYS: &[&str] = &[
    "currency_name",
    "currency_symbol",
    "fallback_rate",
    "providers",
];

/// A validated rate table.
#[derive(Debug, Clone, PartialEq)]
pub struct RateTable {
    currency_name: Arc<str>,
    currency_symbol: String,
    fallback_rate: f64,
    /// provider id -> GPU model -> rate per GPU-hour.
    rates: HashMap<Arc<str>, HashMap<String, f64>>,
}

/// A rate with whether it came from the table or the fallback.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLookup {
    /// Currency units per GPU-hour.
    pub hourly: f64,
    /// False when the fallback rate was used.
    pub known: bool,
}

impl RateTable {
    /// The embedded table. It is parsed by the same code as user files and a unit test
    /// proves it valid; this returns the errors anyway rather than panicking.
    pub fn builtin(aliases: &ProviderAliases) -> Result<RateTable, ConfigErrors> {
        RateTable::parse(BUILTIN_RATES_YAML.as_bytes(), aliases)
    }

    /// Parse and validate a rates file, reporting every problem with its path.
    pub fn parse(bytes: &[u8], aliases: &ProviderAliases) -> Result<RateTable, ConfigErrors> {
        let value = component::config::parse_yaml(bytes).map_err(ConfigErrors::from)?;
        Self::from_value(&value, aliases)
    }

    fn from_value(
        value: &ConfigValue,
        aliases: &ProviderAliases,
    ) -> Result<RateTable, ConfigErrors> {
        let Some(top) = value.as_object() else {
            let what = if value.is_null() {
                "the file is empty"
            } else {
                "must be a mapping with currency_name, currency_symbol, fallback_rate, providers"
            };
            return Err(ConfigError::new("", what).into());
        };
        let mut errs = ConfigErrors::new();
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
        let currency_name = match top.get("currency_name").map(ConfigValue::as_str) {
            None => {
                errs.push("currency_name", "missing (ISO 4217 code such as USD)");
                String::new()
            }
            Some(Some(s)) if s.len() == 3 && s.chars().all(|c| c.is_ascii_uppercase()) => {
                s.to_string()
            }
            Some(_) => {
                errs.push(
                    "currency_name",
                    "must be an ISO 4217 code: three upper-case letters (USD, EUR)",
                );
                String::new()
            }
        };
        let currency_symbol = match top.get("currency_symbol").map(ConfigValue::as_str) {
            None => {
                errs.push("currency_symbol", "missing");
                String::new()
            }
            Some(Some(s)) if !s.trim().is_empty() && s.len() <= 8 => s.to_string(),
            Some(_) => {
                errs.push(
                    "currency_symbol",
                    "must be a non-empty string of at most 8 bytes",
                );
                String::new()
            }
        };
        let fallback_rate = match top.get("fallback_rate") {
            None => {
                errs.push(
                    "fallback_rate",
                    "missing (>= 0; 0 prices unknown models at nothing)",
                );
                0.0
            }
            Some(v) => rate_value(v, "fallback_rate", &mut errs).unwrap_or(0.0),
        };
        let mut rates: HashMap<Arc<str>, HashMap<String, f64>> = HashMap::new();
        let mut entries = 0usize;
        match top.get("providers") {
            None => errs.push("providers", "missing (at least one provider)"),
            Some(ConfigValue::Object(providers)) => {
                if providers.is_empty() {
                    errs.push("providers", "must name at least one provider");
                }
                if providers.len() > MAX_PROVIDERS {
                    errs.push(
                        "providers",
                        format!(
                            "{} providers exceed the cap of {MAX_PROVIDERS}",
                            providers.len()
                        ),
                    );
                }
                // Where each canonical id was first spelled, to report `aws` + `ec2`.
                let mut spelled: HashMap<Arc<str>, String> = HashMap::new();
                // Sorted, so errors come in the same order whatever map the JSON value uses.
                let mut sorted: Vec<_> = providers.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                for (pkey, models) in sorted {
                    let ppath = format!("providers.{pkey}");
                    let id = match aliases.normalise(pkey) {
                        Ok(id) => id,
                        Err(e) => {
                            errs.push(ppath, e.to_string());
                            continue;
                        }
                    };
                    if let Some(first) = spelled.get(&id) {
                        errs.push(
                            ppath,
                            format!("names provider {id:?} again (already as {first:?})"),
                        );
                        continue;
                    }
                    spelled.insert(Arc::clone(&id), pkey.clone());
                    let Some(models) = models.as_object() else {
                        errs.push(ppath, "must map GPU model strings to hourly rates");
                        continue;
                    };
                    let table = rates.entry(id).or_default();
                    let mut sorted_models: Vec<_> = models.iter().collect();
                    sorted_models.sort_by(|a, b| a.0.cmp(b.0));
                    for (model, rate) in sorted_models {
                        let mpath = format!("{ppath}.{model:?}");
                        if model.trim().is_empty() || model.len() > MAX_MODEL_LEN {
                            errs.push(
                                mpath,
                                format!("GPU model must be 1..={MAX_MODEL_LEN} bytes, not blank"),
                            );
                            continue;
                        }
                        if let Some(r) = rate_value(rate, &mpath, &mut errs) {
                            table.insert(model.clone(), r);
                            entries += 1;
                        }
                    }
                }
            }
            Some(_) => errs.push(
                "providers",
                "must be a mapping of provider -> {model: rate}",
            ),
        }
        if entries > MAX_RATE_ENTRIES {
            errs.push(
                "providers",
                format!("{entries} rates exceed the cap of {MAX_RATE_ENTRIES}"),
            );
        }
        errs.into_result()?;
        Ok(RateTable {
            currency_name: Arc::from(currency_name),
            currency_symbol,
            fallback_rate,
            rates,
        })
    }

    /// `user` entries over `self`: per (provider, model) the user's rate wins; currency
    /// and fallback come from `user`. Tables in different currencies do not mix.
    pub fn overridden_by(&self, user: &RateTable) -> Result<RateTable, ConfigError> {
        if self.currency_name != user.currency_name {
            return Err(ConfigError::new(
                "currency_name",
                format!(
                    "is {} but the built-in table is in {}: set include_builtin_rates: false \
                     to use this file alone, or give rates in {}",
                    user.currency_name, self.currency_name, self.currency_name
                ),
            ));
        }
        let mut merged = self.clone();
        for (provider, models) in &user.rates {
            let dst = merged.rates.entry(Arc::clone(provider)).or_default();
            for (model, rate) in models {
                dst.insert(model.clone(), *rate);
            }
        }
        merged.currency_symbol = user.currency_symbol.clone();
        merged.fallback_rate = user.fallback_rate;
        Ok(merged)
    }

    /// The rate for a canonical provider id and a verbatim GPU model.
    pub fn lookup(&self, provider: &str, gpu_model: &str) -> RateLookup {
        match self.rates.get(provider).and_then(|m| m.get(gpu_model)) {
            Some(r) => RateLookup {
                hourly: *r,
                known: true,
            },
            None => RateLookup {
                hourly: self.fallback_rate,
                known: false,
            },
        }
    }

    pub fn currency(&self) -> &Arc<str> {
        &self.currency_name
    }

    pub fn currency_symbol(&self) -> &str {
        &self.currency_symbol
    }

    pub fn fallback_rate(&self) -> f64 {
        self.fallback_rate
    }

    /// Number of (provider, model) rates.
    pub fn len(&self) -> usize {
        self.rates.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every (provider, model, rate), sorted, for diagnostics.
    pub fn entries(&self) -> Vec<(Arc<str>, String, f64)> {
        let mut out: Vec<_> = self
            .rates
            .iter()
            .flat_map(|(p, m)| {
                m.iter()
                    .map(|(model, r)| (Arc::clone(p), model.clone(), *r))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }
}

fn rate_value(v: &ConfigValue, path: &str, errs: &mut ConfigErrors) -> Option<f64> {
    match v.as_f64() {
        Some(r) if r.is_finite() && (0.0..=MAX_RATE).contains(&r) => Some(r),
        Some(r) => {
            errs.push(path, format!("must be a rate in [0, {MAX_RATE}], got {r}"));
            None
        }
        None => {
            errs.push(path, format!("must be a number, got {v}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aliases() -> ProviderAliases {
        ProviderAliases::builtin()
    }

    #[test]
    fn builtin_table_is_valid_and_has_the_spec_entries() {
        let t = RateTable::builtin(&aliases()).unwrap();
        assert_eq!(&**t.currency(), "USD");
        assert_eq!(t.currency_symbol(), "$");
        assert_eq!(t.fallback_rate(), 0.0);
        // Spec 6.2 example entries.
        for (p, m, r) in [
            ("ec2", "NVIDIA H100 80GB HBM3", 12.29),
            ("ec2", "NVIDIA A100-SXM4-40GB", 3.27),
            ("gcp", "NVIDIA A100-SXM4-80GB", 4.12),
            ("azure", "NVIDIA A100-SXM4-80GB", 3.40),
            ("lambda", "NVIDIA GH200 480GB", 2.29),
            ("coreweave", "NVIDIA L40S", 1.50),
        ] {
            assert_eq!(
                t.lookup(p, m),
                RateLookup {
                    hourly: r,
                    known: true
                },
                "{p} {m}"
            );
        }
        assert!(t.lookup("on-prem", "NVIDIA H100 80GB HBM3").known);
        // Verbatim keys: a normalised spelling is not the nvidia-smi string.
        assert!(!t.lookup("ec2", "h100-80gb").known);
    }

    #[test]
    fn provider_keys_go_through_aliases() {
        let t = RateTable::parse(
            b"currency_name: USD\ncurrency_symbol: $\nfallback_rate: 1.5\nproviders:\n  aws: {\"NVIDIA L4\": 0.8}\n",
            &aliases(),
        )
        .unwrap();
        assert_eq!(t.lookup("ec2", "NVIDIA L4").hourly, 0.8);
        assert_eq!(
            t.lookup("ec2", "NVIDIA B200"),
            RateLookup {
                hourly: 1.5,
                known: false
            }
        );
    }

    #[test]
    fn every_error_is_reported() {
        let errs = RateTable::parse(
            br#"
currency_name: usd
fallback_rate: -1
extra: true
providers:
  aws: {"NVIDIA L4": 0.8}
  ec2: {"NVIDIA L4": 0.9}
  gcp: {"": 1.0, "NVIDIA T4": "cheap", "NVIDIA A10": .nan}
  "bad id!": {}
  lambda: 3
"#,
            &aliases(),
        )
        .unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "extra",
                "currency_name",
                "currency_symbol",
                "fallback_rate",
                "providers.bad id!",
                "providers.ec2",
                "providers.gcp.\"\"",
                "providers.gcp.\"NVIDIA A10\"",
                "providers.gcp.\"NVIDIA T4\"",
                "providers.lambda",
            ],
            "{errs}"
        );
    }

    #[test]
    fn user_entries_override_builtin_ones() {
        let builtin = RateTable::builtin(&aliases()).unwrap();
        let user = RateTable::parse(
            b"currency_name: USD\ncurrency_symbol: US$\nfallback_rate: 2.0\nproviders:\n  aws: {\"NVIDIA H100 80GB HBM3\": 9.99}\n  nebius: {\"NVIDIA H100 80GB HBM3\": 2.95}\n",
            &aliases(),
        )
        .unwrap();
        let merged = builtin.overridden_by(&user).unwrap();
        assert_eq!(merged.lookup("ec2", "NVIDIA H100 80GB HBM3").hourly, 9.99);
        assert_eq!(merged.lookup("ec2", "NVIDIA A100-SXM4-80GB").hourly, 4.10);
        assert_eq!(
            merged.lookup("nebius", "NVIDIA H100 80GB HBM3").hourly,
            2.95
        );
        assert_eq!(merged.lookup("nebius", "NVIDIA B200").hourly, 2.0);
        assert_eq!(merged.currency_symbol(), "US$");
        assert_eq!(merged.len(), builtin.len() + 1);

        let eur = RateTable::parse(
            b"currency_name: EUR\ncurrency_symbol: E\nfallback_rate: 0\nproviders: {gcp: {x: 1}}\n",
            &aliases(),
        )
        .unwrap();
        let err = builtin.overridden_by(&eur).unwrap_err();
        assert_eq!(err.path, "currency_name");
        assert!(err.message.contains("include_builtin_rates: false"));
    }

    #[test]
    fn empty_and_non_mapping_files_are_refused() {
        assert!(RateTable::parse(b"", &aliases()).is_err());
        assert!(RateTable::parse(b"[1, 2]", &aliases()).is_err());
        let errs = RateTable::parse(
            b"currency_name: USD\ncurrency_symbol: $\nfallback_rate: 0\nproviders: {}\n",
            &aliases(),
        )
        .unwrap_err();
        assert_eq!(errs.0[0].path, "providers");
    }
}
