//! The files generated from the component registry are current: the Go shim's
//! `generated_component.go` files, the OCB manifest's shim entries, the root README's
//! component table and the crate READMEs' stability rows. A failure names the stale files;
//! `cargo run -p ingero-fleet --example generate` rewrites them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use ingero_fleet_dist::generate;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn generated_files_match_the_registry() {
    let stale = generate::stale(&repo()).unwrap();
    assert!(
        stale.is_empty(),
        "generated files differ from the component registry: {stale:?}; run `{}` and commit \
         the result",
        generate::COMMAND
    );
}

/// Every `.go` file under `dir` except tests and generated files, with its text.
fn hand_written_go(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            hand_written_go(&p, out);
        } else if name.ends_with(".go")
            && !name.ends_with("_test.go")
            && name != "generated_component.go"
        {
            out.push((p.clone(), std::fs::read_to_string(&p).unwrap()));
        }
    }
}

/// The generated `Type` and `Stability` are the only ones: a hand-written Go file that
/// spelled its own type or level could disagree with the registry unnoticed.
#[test]
fn go_factories_take_type_and_stability_from_the_generated_file() {
    let mut files = Vec::new();
    for dir in ["go-shim/processor", "go-shim/extension"] {
        hand_written_go(&repo().join(dir), &mut files);
    }
    assert!(files.len() >= 4, "{files:?}");
    for (path, text) in &files {
        for spelled in [
            "const Type",
            "component.StabilityLevel",
            "component.MustNewType(\"",
        ] {
            assert!(
                !text.contains(spelled),
                "{}: spells `{spelled}`; use the generated Type / Stability",
                path.display()
            );
        }
    }
    for m in ingero_fleet_components::metadata() {
        let (_, dir) = generate::go_package(m);
        assert!(
            repo().join(&dir).join("generated_component.go").is_file(),
            "{dir}: no generated_component.go for {}",
            m.type_name
        );
    }
}
