//! The agent's pure core shares Fleet's statistics through `ingero-stats`, not by linking a
//! Fleet component: `cargo tree -e normal` of `ingero-agent-core` and of `ingero-agent`
//! must not list any component crate (they may appear only as dev-dependencies, which the
//! agent's detection tests use to run Fleet's code beside its own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

const COMPONENTS: [&str; 4] = [
    "ingero-processor",
    "ingero-extension",
    "nccl-processor",
    "provider-processor",
];

fn deps(package: &str) -> Vec<String> {
    testkit::crate_graph::normal_dependencies(
        env!("CARGO"),
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        package,
    )
}

#[test]
fn the_agent_links_the_shared_statistics_and_no_fleet_component() {
    for package in ["ingero-agent-core", "ingero-agent"] {
        let deps = deps(package);
        let t = deps.join(" ");
        // Read a real tree: the package itself and the statistics it shares with Fleet.
        assert!(deps.iter().any(|d| d == package), "{t}");
        assert!(
            deps.iter().any(|d| d == "ingero-stats"),
            "{package} lacks ingero-stats:\n{t}"
        );
        for c in COMPONENTS {
            assert!(
                !deps.iter().any(|d| d == c),
                "{package} depends on {c}:\n{t}"
            );
        }
    }
}

#[test]
fn the_processor_does_link_the_shared_statistics() {
    // The other side of the same edge: the check above cannot pass on a tree that lacks
    // the crate names it looks for.
    let deps = deps("ingero-processor");
    let t = deps.join(" ");
    assert!(deps.iter().any(|d| d == "ingero-processor"), "{t}");
    assert!(deps.iter().any(|d| d == "ingero-stats"), "{t}");
}

#[test]
fn the_shared_statistics_depend_on_nothing_but_std() {
    let deps = deps("ingero-stats");
    let t = deps.join(" ");
    assert_eq!(deps, ["ingero-stats"], "{t}");
}
