//! The host library must build without the Ingero component crates (issue 18): a binary
//! assembled from it (otlp-debug-collector, the event store) compiles only what it picks.
//! `cargo tree -e normal` lists what the library links; the Ingero crates may appear only
//! as dev-dependencies (the unit tests plan Fleet configs with them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const INGERO: [&str; 4] = [
    "ingero-processor",
    "ingero-extension",
    "nccl-processor",
    "provider-processor",
];

fn tree(package: &str) -> String {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn names(tree: &str) -> Vec<&str> {
    tree.lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

#[test]
fn the_library_links_no_ingero_component() {
    let host = tree("collector-host");
    let deps = names(&host);
    assert!(deps.contains(&"collector-host"), "{host}");
    assert!(deps.contains(&"component"), "{host}");
    for c in INGERO {
        assert!(!deps.contains(&c), "collector-host depends on {c}:\n{host}");
    }
}

#[test]
fn the_fleet_binary_crate_does_link_them() {
    // The same check on the crate that must have them, so the one above cannot pass by
    // reading an empty or unrelated tree.
    let fleet = tree("ingero-fleet");
    let deps = names(&fleet);
    for c in INGERO {
        assert!(deps.contains(&c), "ingero-fleet lacks {c}:\n{fleet}");
    }
}
