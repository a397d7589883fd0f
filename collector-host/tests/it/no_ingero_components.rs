//! The host library must build without the Ingero component crates: a binary
//! assembled from it (otlp-debug-collector, the event store) compiles only what it picks.
//! `cargo tree -e normal` lists what the library links; the Ingero crates may appear only
//! as dev-dependencies (the unit tests plan Fleet configs with them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

const INGERO: [&str; 4] = [
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
fn the_library_links_no_ingero_component() {
    let deps = deps("collector-host");
    let host = deps.join(" ");
    assert!(deps.iter().any(|d| d == "collector-host"), "{host}");
    assert!(deps.iter().any(|d| d == "component"), "{host}");
    for c in INGERO {
        assert!(
            !deps.iter().any(|d| d == c),
            "collector-host depends on {c}:\n{host}"
        );
    }
}

#[test]
fn the_fleet_binary_crate_does_link_them() {
    // The same check on the crate that must have them, so the one above cannot pass by
    // reading an empty or unrelated tree.
    let deps = deps("ingero-fleet");
    let fleet = deps.join(" ");
    for c in INGERO {
        assert!(
            deps.iter().any(|d| d == c),
            "ingero-fleet lacks {c}:\n{fleet}"
        );
    }
}
