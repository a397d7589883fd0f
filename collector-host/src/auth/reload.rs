//! Token rotation without restart: a task per `ingero_auth` instance re-reads the tokens
//! file every `reload_interval` (its content hash decides whether anything changed) and at
//! once on SIGHUP, and forgets removed tokens whose grace period has passed.
//!
//! Write new token files atomically (write a temporary file, then rename it over the old
//! one): a poll that catches a half-written file refuses it (keeping the previous tokens,
//! counted as a failed reload) and applies the complete file on the next poll.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::AuthExtension;
use super::tokens::{TokenDigest, digest};

/// Start the reload task; it ends when `shutdown` turns true.
pub fn spawn(ext: Arc<AuthExtension>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(authenticator = %ext.id, error = %e, "cannot watch SIGHUP; file polling only");
                None
            }
        };
        let poll_file = ext.config.tokens_env.is_empty();
        let mut last: Option<TokenDigest> = ext.read_source().ok().map(|b| digest(&b));
        let mut iv = tokio::time::interval(ext.config.reload_interval);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        iv.tick().await;
        loop {
            let forced = tokio::select! {
                _ = iv.tick() => false,
                Some(()) = async {
                    match hup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => true,
                _ = shutdown.wait_for(|v| *v) => break,
            };
            ext.store().prune(Instant::now());
            if !forced && !poll_file {
                continue;
            }
            let trigger = if forced { "sighup" } else { "file_changed" };
            let bytes = match ext.read_source() {
                Ok(b) => b,
                Err(e) => {
                    // A missing file while it is being replaced: report once per change.
                    if forced || last.is_some() {
                        ext.reload_failed(trigger, &e);
                        last = None;
                    }
                    continue;
                }
            };
            let d = digest(&bytes);
            if !forced && last.is_some_and(|l| super::tokens::digest_eq(&l, &d)) {
                continue;
            }
            last = Some(d);
            let _ = ext.apply_bytes(&bytes, trigger);
        }
    })
}
