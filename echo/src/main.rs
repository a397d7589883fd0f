//! `ingero-echo`: the collector-host command line over Echo's distribution, plus
//! `ingero-echo mcp`: the same service that also serves MCP on stdin/stdout and stops when
//! stdin closes.

use std::ffi::OsString;
use std::process::ExitCode;

use collector_host::cli;

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let dist = ingero_echo::distribution();
    if args.get(1).is_some_and(|a| a == "mcp") {
        args.remove(1);
        ingero_echo::request_stdio_mcp();
        return cli::main_with(&dist, args, ingero_echo::stdio_closed());
    }
    cli::main_with(&dist, args, std::future::pending())
}
