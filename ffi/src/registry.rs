//! The component types this library provides, built from config bytes by the same code the
//! Rust host uses: [`component::config::parse_yaml`] and each crate's `create`.

use std::sync::Arc;
use std::time::Duration;

use component::{ComponentId, ConfigErrors, ConfigValue, Processor};
use ingero_extension::ThresholdExtension;
use ingero_fleet_components::{EXTENSIONS, PROCESSORS};

use crate::result::{
    Failure, INGERO_ERR_INVALID_ARGUMENT, INGERO_ERR_INVALID_CONFIG, INGERO_ERR_UNKNOWN_TYPE,
    INGERO_ERR_WRONG_KIND,
};
use crate::select::Selection;

/// A processor built from config, with what the host needs to drive it.
pub(crate) struct BuiltProcessor {
    pub inner: Arc<dyn Processor>,
    /// How often the host calls `tick`.
    pub tick_interval: Duration,
    /// `Some(reads)`: the component's metadata says `process` never changes the batch and
    /// reads only `reads` of it (`ingero`, `nccl_peer_lag`). The C ABI then decodes only that
    /// ([`crate::select`]), skips re-encoding and tells the caller to keep its own bytes;
    /// debug builds verify that the batch stays unchanged.
    pub passes_through: Option<Selection>,
}

impl std::fmt::Debug for BuiltProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltProcessor")
            .field("tick_interval", &self.tick_interval)
            .field("passes_through", &self.passes_through)
            .finish_non_exhaustive()
    }
}

/// Parse `type[/name]`.
pub(crate) fn parse_id(id: &str) -> Result<ComponentId, Failure> {
    ComponentId::parse(id).map_err(|e| Failure::with(INGERO_ERR_INVALID_ARGUMENT, e))
}

/// Parse config bytes (YAML or JSON; empty or whitespace means all defaults).
pub(crate) fn parse_config(bytes: &[u8]) -> Result<ConfigValue, Failure> {
    component::config::parse_yaml(bytes)
        .map_err(|e| Failure::with(INGERO_ERR_INVALID_CONFIG, e.to_string()))
}

/// Every config problem, one `path: message` per line (paths relative to the component).
pub(crate) fn config_failure(errs: ConfigErrors) -> Failure {
    Failure::with(INGERO_ERR_INVALID_CONFIG, errs.to_string())
}

fn names<F: ?Sized>(list: &[&F], name: impl Fn(&F) -> &'static str) -> String {
    list.iter().map(|f| name(f)).collect::<Vec<_>>().join(", ")
}

fn unknown(kind: &str) -> Failure {
    Failure::with(
        INGERO_ERR_UNKNOWN_TYPE,
        format!(
            "unknown component type {kind:?}: this library provides the processors {} and the \
             extension {}",
            names(&PROCESSORS, |f| f.metadata().type_name),
            names(&EXTENSIONS, |f| f.metadata().type_name),
        ),
    )
}

/// Build a processor of `kind` from a config tree, through its crate's factory (the one
/// `ingero-fleet` registers).
pub(crate) fn build_processor(kind: &str, cfg: &ConfigValue) -> Result<BuiltProcessor, Failure> {
    let Some(factory) = ingero_fleet_components::processor(kind) else {
        return Err(match ingero_fleet_components::extension(kind) {
            Some(_) => Failure::with(
                INGERO_ERR_WRONG_KIND,
                format!("{kind} is an extension type, not a processor"),
            ),
            None => unknown(kind),
        });
    };
    let created = factory.create(cfg).map_err(config_failure)?;
    Ok(BuiltProcessor {
        inner: created.processor,
        tick_interval: created.tick_interval,
        passes_through: factory.metadata().reads,
    })
}

/// Build an extension of `kind` from a config tree.
pub(crate) fn build_extension(
    kind: &str,
    cfg: &ConfigValue,
) -> Result<Arc<ThresholdExtension>, Failure> {
    // The C ABI hands out the store itself (threshold reads, push headers), so it builds
    // the concrete extension rather than the factory's `dyn Extension`.
    match kind {
        ingero_extension::TYPE => {
            let ext = ingero_extension::create(cfg).map_err(config_failure)?;
            // Bearer tokens are checked by ingero-fleet's listeners; the Go collector serves
            // these routes itself, so accepting the key would silently leave them open.
            if ext.config().auth.is_some() {
                return Err(config_failure(component::ConfigErrors::from(
                    component::ConfigError::new(
                        "auth",
                        "is enforced by ingero-fleet only; in the Go collector put an authenticating proxy in front",
                    ),
                )));
            }
            Ok(Arc::new(ext))
        }
        k if ingero_fleet_components::processor(k).is_some() => Err(Failure::with(
            INGERO_ERR_WRONG_KIND,
            format!("{k} is a processor type, not an extension"),
        )),
        k => Err(unknown(k)),
    }
}

/// Validate a config for a component type of either kind, exactly as creating it would.
pub(crate) fn validate(kind: &str, cfg: &ConfigValue) -> Result<(), Failure> {
    if ingero_fleet_components::extension(kind).is_some() {
        build_extension(kind, cfg).map(drop)
    } else {
        build_processor(kind, cfg).map(drop)
    }
}
