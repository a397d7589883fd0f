//! The no-GPU parts of `scripts/gpu-e2e.sh` (argument handling, timeline, the report built
//! from agent logs and Fleet diagnostics) as part of `cargo test`: runs the harness's
//! Python unit tests. With `INGERO_FLEET_BIN` set (e.g. `target/debug/ingero-fleet`) they
//! include a ~40 s dry run: six synthetic agents (this build's binary) and the real Fleet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn gpu_e2e_harness_unit_tests() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut cmd = Command::new("python3");
    cmd.current_dir(root)
        .args(["-m", "unittest", "-v", "scripts/gpu/test_e2e.py"])
        .env("INGERO_AGENT_BIN", env!("CARGO_BIN_EXE_ingero-agent"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    if std::env::var_os("INGERO_FLEET_BIN").is_none() {
        eprintln!("dry run skipped: set INGERO_FLEET_BIN to include it");
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIP: python3 not available ({e})");
            return;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // The report and argument tests ran (not everything skipped).
    assert!(
        text.contains("test_detection_recovery_and_false_positives"),
        "{text}"
    );
    assert!(text.contains("Ran 17 tests"), "{text}");
}
