//! Compiles the eBPF programs in `bpf/*.bpf.c` with clang into `$OUT_DIR/<name>.bpf.o`;
//! `src/probes/loader.rs` embeds them with `aya::include_bytes_aligned!`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

include!("../build-support/version_line.rs");

fn main() -> anyhow::Result<()> {
    stamp_version().map_err(anyhow::Error::msg)?;
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let bpf_dir = manifest.join("bpf");
    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    println!("cargo:rerun-if-env-changed=CLANG");

    let arch = std::env::var("CARGO_CFG_TARGET_ARCH")?;
    let (target_arch, multiarch) = match arch.as_str() {
        "x86_64" => ("x86", "x86_64-linux-gnu"),
        "aarch64" => ("arm64", "aarch64-linux-gnu"),
        other => bail!("ingero-agent eBPF programs support x86_64 and aarch64, not {other}"),
    };
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let version = Command::new(&clang).arg("--version").output();
    if !version.as_ref().is_ok_and(|o| o.status.success()) {
        bail!(
            "`{clang}` not found: the agent's eBPF programs need clang and libbpf-dev \
             (apt-get install -y clang libbpf-dev llvm; scripts/test-all.sh installs them)"
        );
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        bail!("/usr/include/bpf/bpf_helpers.h not found: install libbpf-dev");
    }

    for entry in std::fs::read_dir(&bpf_dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".bpf.c") else {
            continue;
        };
        let obj = out.join(format!("{stem}.bpf.o"));
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .arg(format!("-D__TARGET_ARCH_{target_arch}"))
            .arg(format!("-I{}", bpf_dir.display()))
            .arg(format!("-I/usr/include/{multiarch}"))
            .arg("-c")
            .arg(&path)
            .arg("-o")
            .arg(&obj)
            .status()
            .with_context(|| format!("running {clang} on {}", path.display()))?;
        if !status.success() {
            bail!("clang failed on {}", path.display());
        }
    }
    Ok(())
}
