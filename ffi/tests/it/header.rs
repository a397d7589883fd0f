//! The committed header is exactly what the pinned cbindgen generates from the crate.
//! `INGERO_BLESS=1 cargo test -p ingero-ffi --test it header::` rewrites it.

use std::path::PathBuf;

#[test]
fn committed_header_is_up_to_date() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut generated);
    let path = crate_dir.join("include/ingero_fleet.h");
    if std::env::var_os("INGERO_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "ffi/include/ingero_fleet.h is stale: run `INGERO_BLESS=1 cargo test -p ingero-ffi --test it header::` and commit it"
    );
}
