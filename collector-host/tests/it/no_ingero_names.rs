//! A host built from `collector-host` alone knows no Ingero wire name: the library does not
//! depend on `ingero-wire` (its unit tests may, as a dev-dependency), and its non-test
//! code spells no dotted Ingero name (`"ingero.…"`) and no `ingero_wire` path. What a
//! request's and a resource's scope is (Fleet: the cluster) comes from the distribution's
//! `component::scope::RequestScope`.
//!
//! The same holds for the Prometheus exporter crate it links (`fleet-prometheus`): the
//! scope key, the default `drop_attributes` and the gauges stored under reserved names come
//! from the distribution (`Components::with_request_scope`,
//! `with_prometheus_drop_attributes`, `with_pipeline_gauges`). Self-metric names
//! (`ingero_fleet_…`) are not wire names and are not what this test looks for.

use std::path::{Path, PathBuf};

const NEEDLES: [&str; 2] = ["\"ingero.", "ingero_wire"];

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The package names of one dependency table of a manifest.
fn table(manifest: &Path, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    doc.get(name)
        .and_then(|t| t.as_table())
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

/// The Prometheus exporter crate's directory.
fn exporter_dir() -> PathBuf {
    manifest_dir().join("prometheus")
}

#[test]
fn the_library_does_not_depend_on_the_ingero_wire_crate() {
    let manifest = manifest_dir().join("Cargo.toml");
    let deps = table(&manifest, "dependencies");
    // The table read is the library's: it has the contract crate.
    assert!(deps.iter().any(|d| d == "component"), "{deps:?}");
    assert!(
        !deps.iter().any(|d| d == "ingero-wire"),
        "collector-host's [dependencies] name ingero-wire: {deps:?}"
    );
    // The unit tests run Fleet's scope; that stays a dev-dependency.
    let dev = table(&manifest, "dev-dependencies");
    assert!(dev.iter().any(|d| d == "ingero-wire"), "{dev:?}");
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The lines of `text` outside `#[cfg(test)]` items: a `#[cfg(test)]` module ends the
/// scan of its file (test modules close their files), any other `#[cfg(test)]` item is
/// skipped to its closing brace at the attribute's indentation.
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            out.push((n + 1, line));
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let Some((_, item)) = lines.next() else {
            break;
        };
        let item = item.trim_start();
        if item.starts_with("mod ") || item.starts_with("pub(crate) mod ") {
            break;
        }
        if item.ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        for (_, l) in lines.by_ref() {
            if l == close {
                break;
            }
        }
    }
    out
}

/// Every non-test line under `dir` that holds a needle, as `path:line: text`.
fn findings(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        // A file that is a whole test module (`#[cfg(test)] mod tests;`) is test code.
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in non_test_lines(&text) {
            if NEEDLES.iter().any(|needle| line.contains(needle)) {
                out.push(format!("{}:{n}: {}", f.display(), line.trim()));
            }
        }
    }
    out
}

#[test]
fn the_library_source_spells_no_ingero_wire_name() {
    let found = findings(&manifest_dir().join("src"));
    assert!(
        found.is_empty(),
        "Ingero wire names in collector-host's non-test code (they belong to the \
         distribution's RequestScope or to ingero-wire):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_prometheus_exporter_does_not_depend_on_the_ingero_wire_crate() {
    let manifest = exporter_dir().join("Cargo.toml");
    let deps = table(&manifest, "dependencies");
    // The table read is the exporter's: it has the contract crate.
    assert!(deps.iter().any(|d| d == "component"), "{deps:?}");
    assert!(
        !deps.iter().any(|d| d == "ingero-wire"),
        "fleet-prometheus's [dependencies] name ingero-wire: {deps:?}"
    );
    // Its tests build the exporter as Ingero's distributions do.
    let dev = table(&manifest, "dev-dependencies");
    assert!(dev.iter().any(|d| d == "ingero-wire"), "{dev:?}");
}

#[test]
fn the_prometheus_exporter_source_spells_no_ingero_wire_name() {
    let found = findings(&exporter_dir().join("src"));
    assert!(
        found.is_empty(),
        "Ingero wire names in fleet-prometheus's non-test code (the distribution gives \
         them: Components::with_request_scope, with_prometheus_drop_attributes, \
         with_pipeline_gauges):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_wire_names_where_they_are() {
    // The same scan over the wire crate, which spells them: the check above cannot pass
    // by reading nothing.
    let wire = manifest_dir().join("../wire/src");
    let found = findings(&wire);
    assert!(
        found.iter().any(|f| f.contains("\"ingero.cluster.id\"")),
        "{found:?}"
    );
}

#[test]
fn test_items_are_left_out_of_the_scan() {
    let text = "fn a() {}\n\
                #[cfg(test)]\n\
                pub(crate) fn fleet() -> X {\n    ingero_wire::x()\n}\n\
                fn b() { \"ingero.kept\" }\n\
                #[cfg(test)]\n\
                use ingero_wire::y;\n\
                #[cfg(test)]\n\
                mod tests {\n    \"ingero.gone\"\n}\n";
    let kept: Vec<&str> = non_test_lines(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(kept, ["fn a() {}", "fn b() { \"ingero.kept\" }"]);
}
