//! Loading the config tree: files (YAML or TOML by extension), a binary's embedded default,
//! deep merge of repeated `--config`, `--set key.path=value`, and `${env:VAR}` expansion.

use std::path::Path;

use component::ConfigValue;
use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("--set {arg:?}: {message}")]
    Set { arg: String, message: String },
    #[error("{path}: {message}")]
    Expand { path: String, message: String },
}

/// Parse one config document. `.toml` files are TOML; everything else is YAML (JSON is YAML).
pub fn parse_document(name: &str, text: &str) -> Result<ConfigValue, SourceError> {
    let err = |message: String| SourceError::File {
        path: name.to_string(),
        message,
    };
    if Path::new(name)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    {
        let v: toml::Value = toml::from_str(text).map_err(|e| err(format!("invalid TOML: {e}")))?;
        serde_json::to_value(v).map_err(|e| err(format!("invalid TOML: {e}")))
    } else {
        component::config::parse_yaml(text.as_bytes()).map_err(|e| err(e.message))
    }
}

/// Read and parse a config file.
pub fn load_file(path: &str) -> Result<ConfigValue, SourceError> {
    let text = std::fs::read_to_string(path).map_err(|e| SourceError::File {
        path: path.to_string(),
        message: e.to_string(),
    })?;
    parse_document(path, &text)
}

/// Deep-merge `over` into `base`: maps merge key by key, anything else is replaced
/// (lists included), as otelcol merges repeated `--config`.
pub fn merge(base: &mut ConfigValue, over: ConfigValue) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Apply `key.path=value` (value parsed as YAML, so `2.5` is a number and `[a]` a list).
pub fn apply_set(root: &mut ConfigValue, arg: &str) -> Result<(), SourceError> {
    let err = |message: &str| SourceError::Set {
        arg: arg.to_string(),
        message: message.to_string(),
    };
    let (path, raw) = arg
        .split_once('=')
        .ok_or_else(|| err("expected key.path=value"))?;
    if path.is_empty() || path.split('.').any(str::is_empty) {
        return Err(err("empty key in path"));
    }
    let value = component::config::parse_yaml(raw.as_bytes()).map_err(|e| err(&e.message))?;
    let mut nested = value;
    for key in path.rsplit('.') {
        let mut m = Map::new();
        m.insert(key.to_string(), nested);
        nested = Value::Object(m);
    }
    merge(root, nested);
    Ok(())
}

/// Expand `${env:VAR}`, `${env:VAR:-default}` and `${VAR}` in every string value; `$$`
/// is a literal `$`. A string that is exactly one reference takes the variable's YAML type
/// (`${env:K}` with K=2.5 becomes a number), as otelcol does. An unset variable without a
/// default expands to the empty string, like otelcol.
pub fn expand_env(
    root: &mut ConfigValue,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), SourceError> {
    expand_at(root, "", lookup)
}

fn expand_at(
    v: &mut ConfigValue,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), SourceError> {
    match v {
        Value::String(s) => {
            if !s.contains('$') {
                return Ok(());
            }
            let whole = single_reference(s);
            let expanded = expand_str(s, lookup).map_err(|message| SourceError::Expand {
                path: path.to_string(),
                message,
            })?;
            *v = if whole {
                match component::config::parse_yaml(expanded.as_bytes()) {
                    Ok(Value::Null) if !expanded.trim().is_empty() => Value::String(expanded),
                    Ok(Value::Null) => Value::String(String::new()),
                    Ok(typed @ (Value::Number(_) | Value::Bool(_) | Value::String(_))) => typed,
                    _ => Value::String(expanded),
                }
            } else {
                Value::String(expanded)
            };
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                expand_at(item, &join(path, &i.to_string()), lookup)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                expand_at(item, &join(path, k), lookup)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn single_reference(s: &str) -> bool {
    s.starts_with("${") && s.ends_with('}') && s.matches("${").count() == 1
}

fn expand_str(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| format!("unterminated reference in {s:?}"))?;
            let reference = &body[..end];
            let reference = reference.strip_prefix("env:").unwrap_or(reference);
            let (name, default) = match reference.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (reference, None),
            };
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(format!(
                    "invalid environment variable name {name:?} in {s:?}"
                ));
            }
            match lookup(name) {
                Some(val) if !(val.is_empty() && default.is_some()) => out.push_str(&val),
                _ => out.push_str(default.unwrap_or("")),
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "K" => Some("2.5".into()),
            "HOST" => Some("10.0.0.1".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn merge_is_deep_and_lists_replace() {
        let mut a = json!({"a": {"x": 1, "y": [1, 2]}, "b": 1});
        merge(&mut a, json!({"a": {"y": [3], "z": true}}));
        assert_eq!(a, json!({"a": {"x": 1, "y": [3], "z": true}, "b": 1}));
    }

    #[test]
    fn set_builds_nested_typed_values() {
        let mut a = json!({"processors": {"ingero": {"threshold": {"k": 2.0}}}});
        apply_set(&mut a, "processors.ingero.threshold.k=3").unwrap();
        apply_set(&mut a, "processors.ingero.push_interval=5s").unwrap();
        assert_eq!(a["processors"]["ingero"]["threshold"]["k"], json!(3));
        assert_eq!(a["processors"]["ingero"]["push_interval"], json!("5s"));
        assert!(apply_set(&mut a, "novalue").is_err());
        assert!(apply_set(&mut a, "a..b=1").is_err());
    }

    #[test]
    fn env_expansion_types_whole_references() {
        let mut v = json!({
            "k": "${env:K}",
            "ep": "${env:HOST}:4318",
            "d": "${env:MISSING:-7}",
            "e": "${EMPTY:-fallback}",
            "lit": "cost $$5",
            "unset": "${env:MISSING}",
        });
        expand_env(&mut v, &env).unwrap();
        assert_eq!(v["k"], json!(2.5));
        assert_eq!(v["ep"], json!("10.0.0.1:4318"));
        assert_eq!(v["d"], json!(7));
        assert_eq!(v["e"], json!("fallback"));
        assert_eq!(v["lit"], json!("cost $5"));
        assert_eq!(v["unset"], json!(""));
    }

    #[test]
    fn env_expansion_errors_name_the_key() {
        let mut v = json!({"a": {"b": "${env:BAD-NAME}"}});
        let e = expand_env(&mut v, &env).unwrap_err();
        assert!(e.to_string().starts_with("a.b:"), "{e}");
        let mut v = json!({"a": "${env:OPEN"});
        assert!(expand_env(&mut v, &env).is_err());
    }

    #[test]
    fn toml_and_yaml_give_the_same_tree() {
        let y = parse_document(
            "a.yaml",
            "processors:\n  ingero:\n    threshold:\n      k: 2.5\n",
        )
        .unwrap();
        let t = parse_document("a.toml", "[processors.ingero.threshold]\nk = 2.5\n").unwrap();
        assert_eq!(y, t);
        assert!(parse_document("bad.toml", "[[x").is_err());
    }
}
