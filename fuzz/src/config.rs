//! Config documents as `ingero-fleet validate` reads them: the text is parsed as YAML and as
//! TOML (`collector_host::config::source::parse_document`), `${env:...}` references are
//! expanded against a fixed environment, and every tree that parses is validated and
//! planned with `Plan::build_with` (Fleet's components) (pure: no sockets).
//!
//! Invariants checked beyond "no panic":
//! - a refused config has at least one error, every error has a message, and when the
//!   document is a mapping every error carries a key path whose first segment is a
//!   top-level key of the document or a section the host knows;
//! - `Plan::build_with` is deterministic (the same tree gives the same errors);
//! - an accepted config survives `print-config`: written as YAML and read back it is the
//!   same tree, and still valid.

use collector_host::config::Plan;
use collector_host::config::source;
use component::ConfigValue;

/// Top-level sections `Plan::build_with` may name in an error path even when the document
/// lacks them (`service.pipelines: at least one metrics pipeline is required`).
const SECTIONS: [&str; 6] = [
    "receivers",
    "processors",
    "exporters",
    "extensions",
    "connectors",
    "service",
];

/// A fixed environment for `${env:...}` expansion.
fn env(name: &str) -> Option<String> {
    match name {
        "HOST" => Some("127.0.0.1".into()),
        "PORT" => Some("4318".into()),
        "K" => Some("2.5".into()),
        "EMPTY" => Some(String::new()),
        "LIST" => Some("[a, b]".into()),
        _ => None,
    }
}

pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for name in ["fuzz.yaml", "fuzz.toml"] {
        let Ok(mut root) = source::parse_document(name, text) else {
            continue;
        };
        if source::expand_env(&mut root, &env).is_err() {
            continue;
        }
        check_plan(&root);
    }
}

fn check_plan(root: &ConfigValue) {
    match Plan::build_with(root, &ingero_fleet_dist::components()) {
        Ok(_) => {
            // print-config (YAML) and back.
            let yaml = serde_norway::to_string(root)
                .unwrap_or_else(|e| panic!("valid config does not serialize to YAML: {e}"));
            let back = source::parse_document("print-config.yaml", &yaml)
                .unwrap_or_else(|e| panic!("print-config output does not parse: {e}\n{yaml}"));
            assert_eq!(
                &back, root,
                "print-config YAML reads back differently:\n{yaml}"
            );
            assert!(
                Plan::build_with(&back, &ingero_fleet_dist::components()).is_ok(),
                "print-config output is invalid:\n{yaml}"
            );
        }
        Err(errs) => {
            assert!(!errs.is_empty(), "refused without an error");
            for e in errs.iter() {
                assert!(
                    !e.message.is_empty(),
                    "error without a message at {:?}",
                    e.path
                );
                if let ConfigValue::Object(map) = root {
                    // Keys may contain dots themselves, so match whole keys as prefixes (serde's
                    // structural errors write list indexes as `key[0]`).
                    let under = |k: &str| {
                        e.path == k
                            || e.path
                                .strip_prefix(k)
                                .is_some_and(|rest| rest.starts_with(['.', '[']))
                    };
                    // An empty path is only right for an empty key (`"": 1`).
                    assert!(
                        (!e.path.is_empty() || map.contains_key(""))
                            && (map.keys().any(|k| under(k)) || SECTIONS.iter().any(|k| under(k))),
                        "config error without a usable key path: {e:?}"
                    );
                }
            }
            let again = Plan::build_with(root, &ingero_fleet_dist::components()).err();
            assert_eq!(
                again.as_ref(),
                Some(&errs),
                "Plan::build_with is not deterministic"
            );
        }
    }
}
