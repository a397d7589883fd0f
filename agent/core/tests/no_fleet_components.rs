//! The agent's pure core shares Fleet's statistics through `ingero-stats`, not by linking a
//! Fleet component: `cargo tree -e normal` of `ingero-agent-core` and of `ingero-agent`
//! must not list any component crate (they may appear only as dev-dependencies, which the
//! agent's detection tests use to run Fleet's code beside its own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const COMPONENTS: [&str; 4] = [
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
fn the_agent_links_the_shared_statistics_and_no_fleet_component() {
    for package in ["ingero-agent-core", "ingero-agent"] {
        let t = tree(package);
        let deps = names(&t);
        // Read a real tree: the package itself and the statistics it shares with Fleet.
        assert!(deps.contains(&package), "{t}");
        assert!(
            deps.contains(&"ingero-stats"),
            "{package} lacks ingero-stats:\n{t}"
        );
        for c in COMPONENTS {
            assert!(!deps.contains(&c), "{package} depends on {c}:\n{t}");
        }
    }
}

#[test]
fn the_processor_does_link_the_shared_statistics() {
    // The other side of the same edge: the check above cannot pass on a tree that lacks
    // the crate names it looks for.
    let t = tree("ingero-processor");
    let deps = names(&t);
    assert!(deps.contains(&"ingero-processor"), "{t}");
    assert!(deps.contains(&"ingero-stats"), "{t}");
}

#[test]
fn the_shared_statistics_depend_on_nothing_but_std() {
    let t = tree("ingero-stats");
    let deps = names(&t);
    assert_eq!(deps, ["ingero-stats"], "{t}");
}
