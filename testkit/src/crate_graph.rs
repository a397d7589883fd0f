//! What a package links: `cargo tree -e normal` (dev-dependencies left out), for the tests
//! that keep crates from depending on what they must not.

use std::path::Path;
use std::process::Command;

/// The crate names in `cargo tree -e normal -p <package>`, run with the `cargo` the test
/// was built by (`env!("CARGO")`) from `dir` (the caller's `CARGO_MANIFEST_DIR`). Panics
/// with cargo's message when the tree cannot be read.
pub fn normal_dependencies(cargo: &str, dir: &Path, package: &str) -> Vec<String> {
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--locked", "-e", "normal"])
        .args(["--prefix", "none", "-p", package])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run {cargo} tree: {e}"));
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}
