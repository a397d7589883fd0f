//! `fleet-sim demo` as a user runs it: the binary starts the real Fleet service (embedded
//! default config) and the 64-node cluster, and its output names the straggler, the late
//! NCCL rank and the live-view URL. (`--auto-ports` so parallel test runs do not collide on
//! the default ports.) The demo's own clock decides when it ends; nothing here times it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn demo_prints_the_straggler_the_late_rank_and_the_view_url() {
    let out = Command::new(env!("CARGO_BIN_EXE_fleet-sim"))
        .args(["demo", "--auto-ports"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let view = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("live view:"))
        .expect("the live-view URL is printed")
        .trim();
    assert!(
        view.starts_with("http://127.0.0.1:") && view.ends_with("/view/"),
        "{view}"
    );
    assert!(
        stdout.contains("quorum met: Fleet serves threshold 0."),
        "{stdout}"
    );
    assert!(
        stdout.contains("FLEET  gpu-node-00023 flagged as a straggler"),
        "{stdout}"
    );
    assert!(
        stdout.contains("AGENT  gpu-node-00023 classifies itself"),
        "{stdout}"
    );
    assert!(stdout.contains("NCCL rank 41 named: "), "{stdout}");
    assert!(!stdout.contains("(false positive)"), "{stdout}");
    assert!(stdout.contains("false positives: Fleet 0 of "), "{stdout}");
    assert!(
        stdout.contains("NCCL rank 41 (80 ms every 1 steps): named "),
        "{stdout}"
    );
    assert!(stdout.contains(" (within 10 %)"), "{stdout}");
    assert!(
        stdout.contains("demo: straggler and late rank caught"),
        "{stdout}"
    );
}
