//! The causal chains an agent attaches to a straggler: the data-point attribute
//! `ingero.causal_chains` of `ingero.node.straggler_event` and the span attribute of
//! `ingero.detection.straggler`, a compact JSON array of at most [`MAX_CHAINS`] chains (most
//! severe first, at most [`MAX_BYTES`] bytes), under one `ingero.causal_chain_id` per
//! straggler episode. What does not match that shape exactly is refused as a whole (the
//! event itself is kept); pure, no I/O.

use serde_json::Value;

/// The attribute holding the chains.
pub const CHAINS_KEY: &str = "ingero.causal_chains";

/// The span whose attributes may carry chains.
pub const DETECTION_SPAN: &str = "ingero.detection.straggler";

/// At most this many chains per event.
pub const MAX_CHAINS: usize = 3;

/// At most this many bytes of JSON per event.
pub const MAX_BYTES: usize = 4000;

/// At most this many bytes in a chain's id or in the episode's `causal_chain_id`.
pub const MAX_ID_BYTES: usize = 256;

/// At most this many entries in `causes` or `recommendations`.
pub const MAX_LIST: usize = 16;

/// Severities, most severe first.
pub const SEVERITIES: [&str; 3] = ["HIGH", "MEDIUM", "LOW"];

/// One chain as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    pub id: String,
    pub severity: &'static str,
    pub causes: Vec<String>,
    pub summary: String,
    pub root_cause: String,
    pub explanation: Option<String>,
    pub recommendations: Vec<String>,
    pub cuda_op: String,
    pub cuda_p99_us: i64,
    pub tail_ratio: f64,
}

/// Why an attribute's chains were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("ingero.causal_chains is not a string")]
    NotAString,
    #[error("ingero.causal_chains is longer than {MAX_BYTES} bytes")]
    TooLong,
    #[error("ingero.causal_chains is not JSON")]
    NotJson,
    #[error("ingero.causal_chains is not an array of at most {MAX_CHAINS} objects")]
    NotAnArray,
    #[error("chain {index}: {what}")]
    Field { index: usize, what: String },
    #[error(
        "chains without ingero.causal_chain_id (a non-empty string of at most {MAX_ID_BYTES} bytes without control characters)"
    )]
    NoEpisodeId,
}

/// Whether `s` holds a character a terminal, log viewer or browser could act on rather
/// than show: C0/C1 controls other than newline and tab, and the Unicode bidirectional
/// overrides and isolates (text that displays differently from what it says).
pub fn hostile_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

/// An episode id (`ingero.causal_chain_id`) fit to key chains by.
pub fn valid_episode_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_BYTES
        && !s.chars().any(|c| hostile_char(c) || c == '\n' || c == '\t')
}

fn field_err(index: usize, what: impl Into<String>) -> ChainError {
    ChainError::Field {
        index,
        what: what.into(),
    }
}

fn text(o: &serde_json::Map<String, Value>, index: usize, key: &str) -> Result<String, ChainError> {
    match o.get(key) {
        Some(Value::String(s)) if !s.chars().any(hostile_char) => Ok(s.clone()),
        Some(Value::String(_)) => Err(field_err(index, format!("{key} holds control characters"))),
        _ => Err(field_err(index, format!("{key} must be a string"))),
    }
}

fn texts(
    o: &serde_json::Map<String, Value>,
    index: usize,
    key: &str,
) -> Result<Vec<String>, ChainError> {
    let Some(Value::Array(a)) = o.get(key) else {
        return Err(field_err(
            index,
            format!("{key} must be an array of strings"),
        ));
    };
    if a.len() > MAX_LIST {
        return Err(field_err(
            index,
            format!("{key} has more than {MAX_LIST} entries"),
        ));
    }
    a.iter()
        .map(|v| match v {
            Value::String(s) if !s.chars().any(hostile_char) => Ok(s.clone()),
            Value::String(_) => Err(field_err(index, format!("{key} holds control characters"))),
            _ => Err(field_err(
                index,
                format!("{key} must be an array of strings"),
            )),
        })
        .collect()
}

fn chain(v: &Value, index: usize) -> Result<Chain, ChainError> {
    let Some(o) = v.as_object() else {
        return Err(ChainError::NotAnArray);
    };
    let id = text(o, index, "id")?;
    if id.is_empty() || id.len() > MAX_ID_BYTES || id.contains(['\n', '\t']) {
        return Err(field_err(
            index,
            format!("id must be a non-empty line of at most {MAX_ID_BYTES} bytes"),
        ));
    }
    let severity = match o.get("severity").and_then(Value::as_str) {
        Some(s) => SEVERITIES
            .iter()
            .find(|k| **k == s)
            .copied()
            .ok_or_else(|| field_err(index, "severity must be HIGH, MEDIUM or LOW"))?,
        None => return Err(field_err(index, "severity must be HIGH, MEDIUM or LOW")),
    };
    let explanation = match o.get("explanation") {
        None | Some(Value::Null) => None,
        Some(_) => Some(text(o, index, "explanation")?),
    };
    let cuda_p99_us = o
        .get("cuda_p99_us")
        .and_then(Value::as_i64)
        .filter(|n| *n >= 0)
        .ok_or_else(|| field_err(index, "cuda_p99_us must be a non-negative integer"))?;
    let tail_ratio = o
        .get("tail_ratio")
        .and_then(Value::as_f64)
        .filter(|r| r.is_finite() && *r >= 0.0)
        .ok_or_else(|| field_err(index, "tail_ratio must be a non-negative number"))?;
    Ok(Chain {
        id,
        severity,
        causes: texts(o, index, "causes")?,
        summary: text(o, index, "summary")?,
        root_cause: text(o, index, "root_cause")?,
        explanation,
        recommendations: texts(o, index, "recommendations")?,
        cuda_op: text(o, index, "cuda_op")?,
        cuda_p99_us,
        tail_ratio,
    })
}

/// The chains of one attribute value (`None` when the value is not a string).
pub fn parse(value: Option<&str>) -> Result<Vec<Chain>, ChainError> {
    let s = value.ok_or(ChainError::NotAString)?;
    if s.len() > MAX_BYTES {
        return Err(ChainError::TooLong);
    }
    let v: Value = serde_json::from_str(s).map_err(|_| ChainError::NotJson)?;
    let Value::Array(a) = v else {
        return Err(ChainError::NotAnArray);
    };
    if a.len() > MAX_CHAINS {
        return Err(ChainError::NotAnArray);
    }
    a.iter().enumerate().map(|(i, c)| chain(c, i)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({"id": "cpu-contention", "severity": "HIGH", "causes": ["cpu.runqueue"],
               "summary": "cudaStreamSynchronize p99 8x its median", "root_cause": "CPU contention",
               "explanation": "another process held the core",
               "recommendations": ["pin the training process"], "cuda_op": "cudaStreamSynchronize",
               "cuda_p99_us": 8123, "tail_ratio": 8.4})
    }

    #[test]
    fn the_contract_shape_parses_and_keeps_its_order() {
        let mut second = good();
        second["id"] = json!("mem");
        second["severity"] = json!("LOW");
        second.as_object_mut().unwrap().remove("explanation");
        let s = json!([good(), second]).to_string();
        let c = parse(Some(&s)).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].id, "cpu-contention");
        assert_eq!(c[0].severity, "HIGH");
        assert_eq!(c[0].cuda_p99_us, 8123);
        assert_eq!(c[1].explanation, None);
        assert_eq!(parse(Some("[]")).unwrap(), vec![]);
    }

    #[test]
    fn every_wrong_shape_is_refused() {
        let cases: Vec<(Option<String>, &str)> = vec![
            (None, "not a string"),
            (Some("{".into()), "not JSON"),
            (Some("{}".into()), "an object"),
            (
                Some(json!([good(), good(), good(), good()]).to_string()),
                "four chains",
            ),
            (Some(json!([1]).to_string()), "a number"),
            (Some("x".repeat(MAX_BYTES + 1)), "too long"),
        ];
        for (v, what) in cases {
            assert!(parse(v.as_deref()).is_err(), "{what}");
        }
        let broken = |f: &dyn Fn(&mut Value)| {
            let mut c = good();
            f(&mut c);
            parse(Some(&json!([c]).to_string()))
        };
        assert!(broken(&|c| c["severity"] = json!("CRITICAL")).is_err());
        assert!(broken(&|c| c["causes"] = json!("cpu")).is_err());
        assert!(broken(&|c| c["causes"] = json!([1])).is_err());
        assert!(broken(&|c| c["cuda_p99_us"] = json!(-1)).is_err());
        assert!(broken(&|c| c["cuda_p99_us"] = json!(1.5)).is_err());
        assert!(broken(&|c| c["tail_ratio"] = json!("8")).is_err());
        assert!(broken(&|c| c["summary"] = json!("\u{1b}[31mred")).is_err());
        assert!(broken(&|c| c["root_cause"] = json!("evil\u{202E}txt.exe")).is_err());
        assert!(broken(&|c| c["recommendations"] = json!(["a\u{0}b"])).is_err());
        assert!(broken(&|c| c["id"] = json!("")).is_err());
        assert!(
            broken(&|c| {
                c.as_object_mut().unwrap().remove("root_cause");
            })
            .is_err()
        );
        assert!(broken(&|c| c["explanation"] = json!(["x"])).is_err());
        // Newlines and tabs in prose are text, not controls.
        assert!(broken(&|c| c["explanation"] = json!("line 1\n\tline 2")).is_ok());
    }

    #[test]
    fn episode_ids_are_single_lines_of_bounded_length() {
        assert!(valid_episode_id("node-3:1764262800000"));
        assert!(!valid_episode_id(""));
        assert!(!valid_episode_id("a\nb"));
        assert!(!valid_episode_id(&"x".repeat(MAX_ID_BYTES + 1)));
    }
}
