//! Builds `tests/c/smoke.c` against the committed header and the static library cargo just
//! built (`target/<profile>/libingero_fleet.a`) with `-Wall -Wextra -Werror` and
//! AddressSanitizer (+ UBSan, leak checking on), then runs it. The C program exercises every
//! exported function, including NULL and bad-length calls.
//!
//! Needs a C compiler (`$CC`, else `cc`; Debian's gcc or clang).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::process::Command;

use component::otlp::ExportMetricsServiceRequest;
use prost::Message;
use testkit::AgentPush;

/// `target/<profile>/`, the directory holding this test binary's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap()
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ingero-ffi-c-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn c_smoke_test_passes_under_address_sanitizer() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib = profile_dir().join("libingero_fleet.a");
    assert!(
        lib.exists(),
        "static library not found at {} (cargo builds it with the crate)",
        lib.display()
    );
    let dir = temp_dir();

    let mut req = ExportMetricsServiceRequest::default();
    for (i, s) in [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945, 0.60]
        .iter()
        .enumerate()
    {
        req.resource_metrics.extend(
            AgentPush::new("alpha", &format!("alpha-node-{i:02}"), *s)
                .to_proto()
                .resource_metrics,
        );
    }
    let batch = dir.join("alpha.pb");
    std::fs::write(&batch, req.encode_to_vec()).unwrap();

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let exe = dir.join("smoke");
    let out = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-fno-omit-frame-pointer",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c/smoke.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
    assert!(
        out.status.success(),
        "compiling smoke.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let run = Command::new(&exe)
        .arg(&batch)
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:exitcode=86",
        )
        .env("UBSAN_OPTIONS", "print_stacktrace=1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        run.status.success() && stdout.contains("all checks passed"),
        "smoke test failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        run.status
    );
    assert!(
        !stderr.contains("AddressSanitizer") && !stderr.contains("LeakSanitizer"),
        "sanitizer report:\n{stderr}"
    );
}
