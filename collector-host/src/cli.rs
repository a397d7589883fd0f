//! The command line of a collector binary, reusable by any distribution: a binary picks
//! its components and embedded default config ([`Distribution`]) and calls [`main`].

// `components` and `print-config` write their output to stdout.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::config::{Plan, source};
use crate::registry::Components;
use crate::service::{self, RunOptions};

/// What makes a collector binary: its name, its components and its embedded default.
#[derive(Debug, Clone)]
pub struct Distribution {
    /// The binary's name (`--help`, `components`' `buildinfo.command`, log lines).
    pub command: &'static str,
    pub version: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// `--help`'s longer text.
    pub long_about: &'static str,
    /// `components`' `buildinfo.description`.
    pub description: &'static str,
    /// The config used when no `--config` is given.
    pub default_config: &'static str,
    pub components: Components,
}

#[derive(Debug, Parser)]
#[command(name = "collector", version)]
struct Cli {
    /// Config file (YAML, or TOML by .toml extension). Repeatable: later files are
    /// deep-merged over earlier ones. Without it, the embedded default is used.
    #[arg(long = "config", short = 'c', global = true, value_name = "FILE")]
    config: Vec<String>,

    /// Override one key: --set processors.ingero.threshold.k=2.5 (repeatable).
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    set: Vec<String>,

    /// Time in-flight requests get to finish after SIGTERM/SIGINT.
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    shutdown_timeout: Duration,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the config and report every error; exit non-zero when invalid.
    Validate,
    /// List the built-in components and their stability.
    Components,
    /// Print the effective config (after merging, --set and ${env:...} expansion).
    PrintConfig {
        #[arg(long, value_enum, default_value_t = Mode::Redacted)]
        mode: Mode,
        #[arg(long, value_enum, default_value_t = Format::Yaml)]
        format: Format,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    Redacted,
    Unredacted,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    component::config::parse_duration(s)
}

fn load(cli: &Cli, default_config: &str) -> Result<component::ConfigValue, String> {
    let mut root = if cli.config.is_empty() {
        source::parse_document("embedded default", default_config).map_err(|e| e.to_string())?
    } else {
        component::ConfigValue::Null
    };
    for path in &cli.config {
        let doc = source::load_file(path).map_err(|e| e.to_string())?;
        if root.is_null() {
            root = doc;
        } else {
            source::merge(&mut root, doc);
        }
    }
    for s in &cli.set {
        source::apply_set(&mut root, s).map_err(|e| e.to_string())?;
    }
    source::expand_env(&mut root, &|k| std::env::var(k).ok()).map_err(|e| e.to_string())?;
    Ok(root)
}

fn report(errors: &component::ConfigErrors) {
    eprintln!(
        "invalid configuration ({} error{}):",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    for e in errors.iter() {
        eprintln!("  {e}");
    }
}

/// Keys whose string values are secrets in print-config's redacted mode.
fn is_secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    [
        "token",
        "password",
        "secret",
        "authorization",
        "api_key",
        "apikey",
        "bearer",
    ]
    .iter()
    .any(|s| k.contains(s))
}

fn redact(v: &mut component::ConfigValue, parent_is_headers: bool) {
    if let component::ConfigValue::Object(m) = v {
        for (k, val) in m.iter_mut() {
            if (parent_is_headers || is_secret_key(k)) && val.is_string() {
                *val = component::ConfigValue::String("[REDACTED]".into());
            } else {
                redact(val, k == "headers");
            }
        }
    } else if let component::ConfigValue::Array(a) = v {
        for item in a {
            redact(item, false);
        }
    }
}

fn init_logs(plan: Option<&Plan>) {
    use crate::config::model::{LogEncoding, LogLevel};
    use tracing_subscriber::EnvFilter;
    let (level, enc) = plan
        .map(|p| (p.telemetry.logs.level, p.telemetry.logs.encoding))
        .unwrap_or((LogLevel::Info, LogEncoding::Console));
    let level = match level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match enc {
        LogEncoding::Json => b.json().init(),
        LogEncoding::Console => b.with_ansi(false).init(),
    }
}

/// SIGTERM or SIGINT. The handlers are registered when this is called, not when the future
/// is first polled: the service polls it only once it has started, and a signal arriving
/// during startup (after the listeners are up, say) would otherwise take the default action
/// and kill the process without a graceful shutdown. Call it inside the runtime.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            (Ok(mut one), Err(_)) | (Err(_), Ok(mut one)) => {
                one.recv().await;
            }
            (Err(_), Err(_)) => std::future::pending().await,
        }
    }
}

/// Run a collector binary: parse the command line (`validate`, `components`,
/// `print-config`, or run), load the config (`--config` files deep-merged, else the
/// distribution's embedded default; `--set`; `${env:VAR}`), and serve until SIGTERM/SIGINT.
pub fn main(dist: &Distribution) -> ExitCode {
    main_with(dist, std::env::args_os(), std::future::pending())
}

/// [`main`] with the arguments given (the first is the program name) and one more way to
/// stop the service besides SIGTERM/SIGINT: a distribution's own subcommand (e.g. a stdio
/// server whose client went away) runs the same service and ends it with `stop`.
pub fn main_with<I, T>(
    dist: &Distribution,
    args: I,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cmd = Cli::command()
        .name(dist.command)
        .bin_name(dist.command)
        .version(dist.version)
        .about(dist.about)
        .long_about(dist.long_about);
    let cli = match Cli::from_arg_matches(&cmd.get_matches_from(args)) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if let Some(Command::Components) = cli.command {
        print!(
            "{}",
            dist.components
                .components_yaml(dist.command, dist.description, dist.version)
        );
        return ExitCode::SUCCESS;
    }
    let root = match load(&cli, dist.default_config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = Plan::build_with(&root, &dist.components);
    match cli.command {
        Some(Command::Validate) => {
            return match plan {
                Ok(p) => {
                    for w in &p.warnings {
                        eprintln!("warning: {w}");
                    }
                    eprintln!("configuration is valid");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    report(&e);
                    ExitCode::from(1)
                }
            };
        }
        Some(Command::PrintConfig { mode, format }) => {
            if let Err(e) = &plan {
                report(e);
                return ExitCode::from(1);
            }
            let mut v = root;
            if matches!(mode, Mode::Redacted) {
                redact(&mut v, false);
            }
            let text = match format {
                Format::Json => serde_json::to_string_pretty(&v).unwrap_or_default() + "\n",
                Format::Yaml => serde_norway::to_string(&v).unwrap_or_default(),
            };
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Some(Command::Components) | None => {}
    }
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            report(&e);
            return ExitCode::from(1);
        }
    };
    init_logs(Some(&plan));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("fleet")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = RunOptions {
        drain: cli.shutdown_timeout,
        name: dist.command,
    };
    let signal = {
        let _rt = rt.enter();
        shutdown_signal()
    };
    let stop = async move {
        tokio::select! {
            _ = signal => {}
            _ = stop => {}
        }
    };
    match rt.block_on(service::run(plan, opts, stop)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "{} failed", dist.command);
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
