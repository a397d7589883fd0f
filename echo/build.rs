//! Stamps the version line `--version` prints: the Cargo version, plus the git commit when
//! the build was given one in `INGERO_GIT_COMMIT` (scripts/release.sh sets it). Builds
//! without it (development, tests) print the Cargo version alone, so a rebuild never
//! depends on the state of `.git`.

fn main() {
    println!("cargo:rerun-if-env-changed=INGERO_GIT_COMMIT");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let line = match std::env::var("INGERO_GIT_COMMIT") {
        Ok(commit) if !commit.is_empty() => {
            let hex = commit.len() >= 7
                && commit.len() <= 40
                && commit.bytes().all(|b| b.is_ascii_hexdigit());
            // A build script's panic fails the build with this message.
            assert!(
                hex,
                "INGERO_GIT_COMMIT must be 7 to 40 hex digits, got {commit:?}"
            );
            format!("{version} (commit {commit})")
        }
        _ => version,
    };
    println!("cargo:rustc-env=INGERO_VERSION_LINE={line}");
}
