//! `fuzz-tool seeds DIR`: write every target's seed corpus to `DIR/<target>/`.
//! `fuzz-tool replay TARGET PATH...`: run saved inputs (files, or every file of a
//! directory) through a target outside AFL; a failing invariant panics with its message,
//! which is how a crash AFL found is reproduced and debugged.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ingero_fleet_fuzz::{TARGETS, seeds, target};

fn files(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.retain(|p| p.is_file());
        v.sort();
        v
    } else {
        vec![path.to_path_buf()]
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    match args.first().map(String::as_str) {
        Some("seeds") if args.len() == 2 => {
            for name in &names {
                let dir = Path::new(&args[1]).join(name);
                if let Err(e) = std::fs::create_dir_all(&dir) {
                    eprintln!("{}: {e}", dir.display());
                    return ExitCode::FAILURE;
                }
                for (file, bytes) in seeds::seeds(name) {
                    if let Err(e) = std::fs::write(dir.join(&file), bytes) {
                        eprintln!("{file}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Some("replay") if args.len() >= 3 => {
            let Some(run) = target(&args[1]) else {
                eprintln!(
                    "unknown target {:?}; targets: {}",
                    args[1],
                    names.join(", ")
                );
                return ExitCode::from(2);
            };
            let mut n = 0;
            for arg in &args[2..] {
                for f in files(Path::new(arg)) {
                    let data = match std::fs::read(&f) {
                        Ok(d) => d,
                        Err(e) => {
                            eprintln!("{}: {e}", f.display());
                            return ExitCode::FAILURE;
                        }
                    };
                    eprintln!("replay {} ({} bytes)", f.display(), data.len());
                    run(&data);
                    n += 1;
                }
            }
            eprintln!(
                "replayed {n} input(s) through {}: no invariant failed",
                args[1]
            );
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "usage: fuzz-tool seeds DIR | fuzz-tool replay TARGET PATH...  (targets: {})",
                names.join(", ")
            );
            ExitCode::from(2)
        }
    }
}
