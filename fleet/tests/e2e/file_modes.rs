//! Secret files on disk (issue 22, item 6): the audit log the binary creates is 0600, and a
//! tokens file its group or others can read is a warning at load (`validate` and start),
//! as a readable TLS key is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::*;

fn config(dir: &Path) -> String {
    let cfg = test_config("1s", &[])
        .replace(
            "    admin_endpoint: 127.0.0.1:0\n",
            &format!(
                "    admin_endpoint: 127.0.0.1:0\n  ingero_auth:\n    tokens_file: {}\n    audit_log: {}\n",
                dir.join("tokens.yaml").display(),
                dir.join("audit.jsonl").display()
            ),
        )
        .replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            "      http:\n        endpoint: 127.0.0.1:0\n        auth: { authenticator: ingero_auth }\n",
        )
        .replace(
            "extensions: [ingero_threshold, health_check]",
            "extensions: [ingero_auth, ingero_threshold, health_check]",
        );
    assert!(cfg.contains("ingero_auth:"), "{cfg}");
    cfg
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn validate(cfg: &Path) -> (bool, String) {
    let out = std::process::Command::new(bin())
        .args(["validate", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_loose_tokens_file_is_a_warning_and_the_audit_log_is_created_owner_only() {
    let dir = tempdir::TempDir::new("file-modes");
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        "- name: a\n  token: tokA-7f3c9a1e5b2d4c6f8a0b\n  clusters: [alpha]\n",
    )
    .unwrap();
    let cfg_path = dir.path().join("fleet.yaml");
    std::fs::write(&cfg_path, config(dir.path())).unwrap();

    // Readable by others: valid, with a warning naming the key and the fix.
    set_mode(&tokens, 0o644);
    let (ok, err) = validate(&cfg_path);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: extensions.ingero_auth.tokens_file: ")
            && err.contains("readable by group or others (mode 0644); chmod 600 it"),
        "{err}"
    );
    // Owner only: no warning about the file (the open self-telemetry endpoint still is one).
    set_mode(&tokens, 0o600);
    let (ok, err) = validate(&cfg_path);
    assert!(ok, "{err}");
    assert!(!err.contains("readable by group"), "{err}");
    assert!(!err.contains("tokens_file"), "{err}");

    // Started with a group-readable file, the warning is logged; the audit log the
    // binary creates is 0600.
    set_mode(&tokens, 0o640);
    let audit = dir.path().join("audit.jsonl");
    assert!(!audit.exists());
    let f = Fleet::spawn(&["--config", cfg_path.to_str().unwrap()], &[]);
    assert!(
        f.log_text().contains("tokens_file:") && f.log_text().contains("(mode 0640)"),
        "{}",
        f.log_text()
    );
    // The audit log exists once the extension has loaded (before ready); a refused push
    // is recorded in it.
    let r = push_json(f.http(), "alpha", "{}");
    assert_eq!(r.status, 401);
    let mode = std::fs::metadata(&audit).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "audit log mode {mode:04o}");
    let written = wait_for(Duration::from_secs(10), || {
        let t = std::fs::read_to_string(&audit).unwrap();
        (!t.is_empty()).then_some(t)
    });
    assert!(written.is_some(), "nothing audited");

    // An existing audit log others can read is reported too (its mode is left alone).
    drop(f);
    set_mode(&audit, 0o644);
    let (ok, err) = validate(&cfg_path);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: extensions.ingero_auth.audit_log: ") && err.contains("(mode 0644)"),
        "{err}"
    );
}
