//! `ingero-agent query|explain|export --nodes ...`: the fan-out behind the CLI. Answers go to
//! `out`; skew warnings and failed nodes to `err`. The exit status: 0 every node answered,
//! 3 some did not (the answers of the others are printed), 1 none did.

use std::io::Write;
use std::time::Duration;

use super::merge::Outcome;
use super::{FanoutClient, FanoutConfig, actions};
use crate::investigate::{explain, query};

/// Where to fan out and how.
#[derive(Debug, Clone)]
pub struct Target {
    pub nodes: Vec<String>,
    pub config: FanoutConfig,
}

fn client(t: &Target) -> Result<FanoutClient, String> {
    let mut errs = component::config::ConfigErrors::new();
    t.config.validate_into(&mut errs, "fleet.query");
    if !errs.is_empty() {
        return Err(errs.to_string());
    }
    FanoutClient::new(&t.config)
}

fn finish(o: &Outcome, err: &mut dyn Write) -> u8 {
    let _ = err.write_all(o.notes().as_bytes());
    o.exit_code()
}

fn io(e: std::io::Error) -> String {
    format!("write: {e}")
}

pub async fn query(
    t: &Target,
    statement: &str,
    since: Option<Duration>,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, String> {
    let c = client(t)?;
    let since = since.map(component::config::format_duration);
    let (table, truncated, o) = actions::sql(
        &c,
        &t.nodes,
        statement,
        since.as_deref(),
        None,
        t.config.clock_skew_threshold,
    )
    .await?;
    if json {
        writeln!(out, "{}", query::render_json(&table)).map_err(io)?;
    } else {
        out.write_all(query::render_table(&table).as_bytes())
            .map_err(io)?;
    }
    if truncated {
        let _ = writeln!(
            err,
            "note: some nodes had more rows than their limit (api.max_rows); the answer is cut"
        );
    }
    Ok(finish(&o, err))
}

pub async fn explain(
    t: &Target,
    since: Duration,
    per_process: bool,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, String> {
    let c = client(t)?;
    let (report, o) = actions::chains(
        &c,
        &t.nodes,
        &component::config::format_duration(since),
        per_process,
        t.config.clock_skew_threshold,
    )
    .await?;
    if json {
        let v = serde_json::json!({
            "nodes": report.nodes, "chains": report.chains, "unexplained": report.unexplained,
            "calls": report.calls, "answered": o.answered, "failed": o.failed,
            "clock_skew": o.clock_skew, "warnings": o.warnings,
        });
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        )
        .map_err(io)?;
    } else {
        out.write_all(explain::render(&report).as_bytes())
            .map_err(io)?;
    }
    Ok(finish(&o, err))
}

pub async fn export(
    t: &Target,
    since: Option<Duration>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, String> {
    let c = client(t)?;
    let since = since.map(component::config::format_duration);
    let (trace, o) = actions::perfetto(
        &c,
        &t.nodes,
        since.as_deref(),
        t.config.clock_skew_threshold,
    )
    .await?;
    serde_json::to_writer(&mut *out, &trace).map_err(|e| e.to_string())?;
    out.flush().map_err(io)?;
    let n = trace["traceEvents"].as_array().map_or(0, Vec::len);
    let _ = writeln!(
        err,
        "exported {n} trace events from {} node(s)",
        o.answered.len()
    );
    Ok(finish(&o, err))
}
