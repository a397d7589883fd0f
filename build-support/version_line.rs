// Included (`include!`) by the build scripts of ingero-fleet, ingero-agent and ingero-echo.
//
// Stamps the version line `--version` prints: the Cargo version, plus the git commit when
// the build was given one in `INGERO_GIT_COMMIT` (scripts/release.sh sets it). Builds
// without it (development, tests) print the Cargo version alone, so a rebuild never depends
// on the state of `.git`.

/// Sets `INGERO_VERSION_LINE` for the crate; `Err` names a malformed `INGERO_GIT_COMMIT`.
fn stamp_version() -> Result<(), String> {
    println!("cargo:rerun-if-env-changed=INGERO_GIT_COMMIT");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let line = match std::env::var("INGERO_GIT_COMMIT") {
        Ok(commit) if !commit.is_empty() => {
            if !(7..=40).contains(&commit.len()) || !commit.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(format!(
                    "INGERO_GIT_COMMIT must be 7 to 40 hex digits, got {commit:?}"
                ));
            }
            format!("{version} (commit {commit})")
        }
        _ => version,
    };
    println!("cargo:rustc-env=INGERO_VERSION_LINE={line}");
    Ok(())
}
