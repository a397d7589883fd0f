//! Writes the files generated from the component registry (see
//! `ingero_fleet_dist::generate`): run from anywhere in the repository with
//! `cargo run -p ingero-fleet --example generate`; `--check` only lists stale files and
//! exits 1 when there are any.

#![allow(clippy::print_stdout)]

use std::path::Path;
use std::process::ExitCode;

use ingero_fleet_dist::generate;

fn main() -> ExitCode {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let check = std::env::args().skip(1).any(|a| a == "--check");
    let files = match generate::files(&repo) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("generate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stale = 0;
    for g in files {
        let path = repo.join(&g.path);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(g.text.as_str()) {
            continue;
        }
        stale += 1;
        if check {
            println!("stale: {}", g.path.display());
        } else if let Err(e) = std::fs::write(&path, &g.text) {
            eprintln!("generate: {}: {e}", g.path.display());
            return ExitCode::FAILURE;
        } else {
            println!("wrote {}", g.path.display());
        }
    }
    if check && stale > 0 {
        eprintln!(
            "{stale} generated file(s) differ from the registry: run `{}`",
            generate::COMMAND
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
