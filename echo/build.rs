//! Stamps the version line `--version` prints (see build-support/version_line.rs).

include!("../build-support/version_line.rs");

fn main() -> Result<(), String> {
    stamp_version()
}
