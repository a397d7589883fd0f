//! The audit log: one JSON line per decision, written by a dedicated thread so a slow disk
//! never blocks a request. Lines go through a bounded queue; when it is full the line is
//! dropped and counted (`<prefix>auth_audit_dropped_total`).
//!
//! Fields: `time` (RFC 3339, UTC, milliseconds), `listener`, `remote`, `token_fingerprint`
//! (first 12 hex digits of the token's SHA-256; `null` when no token was presented),
//! `token_name` (`null` unless the token is known), `cluster` (`null` when the request names
//! none), `action`, `outcome`. A raw token is never part of a line: the line is built from
//! these fields only.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// One audited decision.
#[derive(Debug, Serialize)]
pub struct AuditRecord<'a> {
    pub time: String,
    pub listener: &'a str,
    pub remote: String,
    pub token_fingerprint: Option<&'a str>,
    pub token_name: Option<&'a str>,
    pub cluster: Option<&'a str>,
    pub action: &'a str,
    pub outcome: &'a str,
}

/// Sender side of the audit log (cheap to clone).
#[derive(Debug, Clone)]
pub struct AuditLog {
    tx: Option<SyncSender<String>>,
    pub dropped: Arc<AtomicU64>,
    pub written: Arc<AtomicU64>,
}

impl AuditLog {
    /// A log that writes nothing (`audit_log: ""`).
    pub fn disabled() -> Self {
        AuditLog {
            tx: None,
            dropped: Arc::default(),
            written: Arc::default(),
        }
    }

    /// Start the writer thread on `out`.
    pub fn start(out: Box<dyn Write + Send>, queue: usize) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel::<String>(queue);
        let written = Arc::new(AtomicU64::new(0));
        let w = written.clone();
        std::thread::Builder::new()
            .name("ingero-audit".into())
            .spawn(move || writer(rx, out, &w))?;
        Ok(AuditLog {
            tx: Some(tx),
            dropped: Arc::default(),
            written,
        })
    }

    /// Open `audit_log` ("stderr" or a path, appended to) and start the writer. A file
    /// it creates is mode 0600 (owner only): the log names tokens, clusters and client
    /// addresses. An existing file keeps its mode (see [`super::AuthExtension::file_warnings`]).
    pub fn open(target: &str, queue: usize) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        match target {
            "" => Ok(Self::disabled()),
            "stderr" => Self::start(Box::new(std::io::stderr()), queue),
            path => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(path)?;
                Self::start(Box::new(f), queue)
            }
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Queue a record; never blocks.
    pub fn record(&self, r: &AuditRecord<'_>) {
        let Some(tx) = &self.tx else { return };
        let Ok(mut line) = serde_json::to_string(r) else {
            return;
        };
        line.push('\n');
        match tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

fn writer(rx: Receiver<String>, out: Box<dyn Write + Send>, written: &AtomicU64) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut failed = false;
    while let Ok(line) = rx.recv() {
        let mut batch = vec![line];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
            if batch.len() >= 1024 {
                break;
            }
        }
        let n = batch.len() as u64;
        let ok = batch.iter().all(|l| out.write_all(l.as_bytes()).is_ok()) && out.flush().is_ok();
        if ok {
            written.fetch_add(n, Relaxed);
            failed = false;
        } else if !failed {
            failed = true;
            tracing::error!("audit log write failed; lines are being lost");
        }
    }
}

/// A request's peer for the `remote` field.
pub fn remote(peer: Option<SocketAddr>) -> String {
    peer.map(|p| p.to_string()).unwrap_or_default()
}

/// RFC 3339 UTC with milliseconds: `2026-11-22T07:31:41.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, sod) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_created_audit_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ingero-audit-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&path);
        let log = AuditLog::open(path.to_str().unwrap(), 4).unwrap();
        assert!(log.is_enabled());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "mode {mode:04o}");
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_123); // 2000-02-29
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.123Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_333_901); // 2026-11-22T07:51:41Z
        assert_eq!(rfc3339(t), "2026-11-22T07:51:41.000Z");
    }

    #[test]
    fn lines_are_json_with_every_field() {
        let buf = Shared::default();
        let log = AuditLog::start(Box::new(buf.clone()), 16).unwrap();
        log.record(&AuditRecord {
            time: rfc3339(SystemTime::now()),
            listener: "otlp/http",
            remote: "127.0.0.1:5000".into(),
            token_fingerprint: Some("0123456789ab"),
            token_name: None,
            cluster: Some("a"),
            action: "push_metrics",
            outcome: "forbidden",
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while log.written.load(Relaxed) < 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        for k in [
            "time",
            "listener",
            "remote",
            "token_fingerprint",
            "token_name",
            "cluster",
            "action",
            "outcome",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {text}");
        }
        assert_eq!(v["token_name"], serde_json::Value::Null);
        assert_eq!(v["outcome"], "forbidden");
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        struct Stuck;
        impl Write for Stuck {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = AuditLog::start(Box::new(Stuck), 4).unwrap();
        let rec = AuditRecord {
            time: String::new(),
            listener: "l",
            remote: String::new(),
            token_fingerprint: None,
            token_name: None,
            cluster: None,
            action: "scrape",
            outcome: "allowed",
        };
        let t = std::time::Instant::now();
        for _ in 0..10_000 {
            log.record(&rec);
        }
        assert!(t.elapsed() < Duration::from_secs(5));
        // The writer took at most one batch (1024 lines) before its write blocked; the queue
        // holds 4; every other line was dropped, and no call waited.
        let dropped = log.dropped.load(Relaxed);
        assert!(dropped >= 10_000 - 1024 - 4, "{dropped}");
    }
}
