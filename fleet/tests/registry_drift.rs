//! The component registry is the one source of component types and stability: the root
//! README's component table, the crate READMEs' status tables, the Go shim's factories and
//! the C ABI's type lists must agree with it. A drift fails here, naming the file to fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use collector_host::registry::{Kind, Metadata};
use ingero_fleet_dist::components;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every `.go` file (tests excluded) under `dir`, with its text.
fn go_files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            go_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "go")
            && !p.to_string_lossy().ends_with("_test.go")
        {
            out.push((p.clone(), std::fs::read_to_string(&p).unwrap()));
        }
    }
}

/// The components the Fleet binary and the Go shim both ship (from component crates).
fn shipped() -> Vec<&'static Metadata> {
    components()
        .all()
        .into_iter()
        .filter(|m| matches!(m.kind, Kind::Processor | Kind::Extension))
        .filter(|m| !m.module.starts_with("collector-host"))
        .collect()
}

#[test]
fn crate_readme_status_tables_match_the_registry() {
    let mut checked = 0;
    for m in components().all() {
        let readme = format!("{}/README.md", m.module);
        if !repo().join(&readme).is_file() {
            continue; // host built-ins without a crate of their own
        }
        let text = read(&readme);
        let row = text
            .lines()
            .find(|l| l.starts_with("| Stability"))
            .unwrap_or_else(|| panic!("{readme}: no Stability row in the status table"));
        let level = m.first_stability().unwrap().to_string().to_lowercase();
        assert!(
            row.to_lowercase().contains(&level),
            "{readme}: the status table says {row:?}, the registry says {level} for {}",
            m.type_name
        );
        checked += 1;
    }
    // ingero, nccl_peer_lag, provider_lookup, ingero_threshold, prometheus.
    assert_eq!(checked, 5);
}

#[test]
fn go_shim_factories_match_the_registry() {
    let mut files = Vec::new();
    for dir in ["go-shim/processor", "go-shim/extension"] {
        go_files(&repo().join(dir), &mut files);
    }
    let shipped = shipped();
    assert_eq!(shipped.len(), 4);
    for m in shipped {
        let decl = format!("const Type = \"{}\"", m.type_name);
        let (path, _) = files
            .iter()
            .find(|(_, t)| t.contains(&decl))
            .unwrap_or_else(|| panic!("no Go shim package declares {decl}"));
        // The factory is in the same package (directory) as the Type constant.
        let dir = path.parent().unwrap();
        let level = m.first_stability().unwrap().to_string();
        let want = format!("component.StabilityLevel{level}");
        let pkg_text: String = files
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(_, t)| t.as_str())
            .collect();
        let mut found: Vec<String> = pkg_text
            .split("component.StabilityLevel")
            .skip(1)
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect::<String>()
            })
            .collect();
        found.dedup();
        assert!(!found.is_empty(), "{}: no stability level", dir.display());
        assert_eq!(
            found,
            [level],
            "{}: the Go factory of {} says {found:?}, the registry says {want}",
            dir.display(),
            m.type_name
        );
    }
}

#[test]
fn the_c_abi_offers_exactly_the_shipped_types() {
    let text = read("ffi/src/registry.rs");
    let list = |name: &str| -> Vec<String> {
        let start = text
            .find(&format!("const {name}"))
            .unwrap_or_else(|| panic!("ffi/src/registry.rs: no {name}"));
        let block = &text[start..];
        let block = &block[block.find('=').unwrap()..];
        let block = &block[..block.find(';').unwrap()];
        block
            .split(|c: char| c == ',' || c.is_whitespace() || c == '[' || c == ']' || c == '=')
            .filter_map(|s| s.strip_suffix("::TYPE"))
            .map(|s| s.replace('_', "-"))
            .collect()
    };
    let mut processors = list("PROCESSOR_TYPES");
    let mut extensions = list("EXTENSION_TYPES");
    processors.sort();
    extensions.sort();
    let modules = |kind: Kind| {
        let mut v: Vec<String> = shipped()
            .into_iter()
            .filter(|m| m.kind == kind)
            .map(|m| m.module.to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(processors, modules(Kind::Processor), "ffi PROCESSOR_TYPES");
    assert_eq!(extensions, modules(Kind::Extension), "ffi EXTENSION_TYPES");
}

/// The package name of the crate that holds `module` (the nearest Cargo.toml above it).
fn crate_of(module: &str) -> String {
    let mut dir = repo().join(module);
    loop {
        let manifest = dir.join("Cargo.toml");
        if manifest.is_file() {
            let text = std::fs::read_to_string(&manifest).unwrap();
            let name = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .unwrap_or_else(|| panic!("{}: no package name", manifest.display()));
            return name.trim_matches('"').to_string();
        }
        assert!(dir.pop(), "{module}: no Cargo.toml above it");
    }
}

/// The root README's component table: (type, kind, crate) for every type a row names.
fn readme_component_rows() -> Vec<(String, String, String)> {
    let text = read("README.md");
    let section = text
        .split("\n## Components\n")
        .nth(1)
        .expect("README.md: no `## Components` section");
    let mut rows = Vec::new();
    for line in section
        .lines()
        .skip_while(|l| !l.starts_with("| Type"))
        .skip(2)
    {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (types, kind, krate) = (cells[1], cells[2], cells[3].trim_matches('`'));
        for t in types.split(',') {
            rows.push((
                t.trim().trim_matches('`').to_string(),
                kind.to_string(),
                krate.to_string(),
            ));
        }
    }
    rows
}

#[test]
fn readme_component_table_matches_the_registry() {
    let mut from_readme = readme_component_rows();
    let mut from_registry: Vec<(String, String, String)> = components()
        .all()
        .into_iter()
        .map(|m| {
            (
                m.type_name.to_string(),
                m.kind.singular().to_string(),
                crate_of(m.module),
            )
        })
        .collect();
    from_readme.sort();
    from_registry.sort();
    assert_eq!(
        from_readme, from_registry,
        "README.md's component table (left) disagrees with ingero-fleet's registry (right): \
         type, kind and crate of every row must match `ingero-fleet components`"
    );
}
