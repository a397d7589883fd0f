//! `ingero-agent sink`: the reference straggler-event consumer (spec 4.3). It reads the
//! remediation socket (reconnecting forever) and serves Prometheus metrics:
//!
//! - `ingero_sink_events_total{type}` counter
//! - `ingero_sink_parse_errors_total` counter
//! - `ingero_sink_connected` gauge 0/1
//! - `ingero_sink_last_event_timestamp_seconds` gauge (3 decimals)
//! - `ingero_sink_active_stragglers{cluster_id,node_id}` gauge 1 per active straggler
//! - `ingero_sink_dropped_total{reason="cap_reached"}` counter
//!
//! `/healthz` is always 200; `/readyz` is 200 while connected or within the readiness
//! window of the last event, else 503 `not ready: uds_disconnected`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use component::{Clock, Timestamp};
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::messages::{KNOWN_TYPES, TYPE_STRAGGLER_RESOLVED, TYPE_STRAGGLER_STATE};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
pub const DEFAULT_RECONNECT_DELAY: Duration = Duration::from_secs(2);
pub const DEFAULT_MAX_TRACKED_NODES: usize = 10_000;
pub const DEFAULT_READINESS_WINDOW: Duration = Duration::from_secs(60);
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
pub const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub socket_path: PathBuf,
    pub listen: SocketAddr,
    pub reconnect_delay: Duration,
    pub max_tracked_nodes: usize,
    pub readiness_window: Duration,
}

#[derive(Deserialize)]
struct Head {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    node_id: String,
    #[serde(default)]
    cluster_id: String,
}

/// Everything the sink counts; pure, driven by lines and `now`.
#[derive(Debug, Default)]
pub struct SinkState {
    events: BTreeMap<&'static str, u64>,
    parse_errors: u64,
    connected: bool,
    last_event: Option<Timestamp>,
    order: VecDeque<(String, String)>,
    active: HashSet<(String, String)>,
    dropped_cap: u64,
    cap: usize,
}

impl SinkState {
    pub fn new(cap: usize) -> Self {
        SinkState {
            cap,
            ..Default::default()
        }
    }

    pub fn set_connected(&mut self, c: bool) {
        self.connected = c;
    }

    pub fn parse_errors(&self) -> u64 {
        self.parse_errors
    }

    pub fn active(&self) -> Vec<(String, String)> {
        self.order.iter().cloned().collect()
    }

    /// Process one line (without its newline).
    pub fn handle_line(&mut self, line: &[u8], now: Timestamp) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let head: Head = match serde_json::from_slice(line) {
            Ok(h) => h,
            Err(_) => {
                self.parse_errors += 1;
                return;
            }
        };
        let Some(kind) = head.kind else {
            self.parse_errors += 1;
            return;
        };
        let label = KNOWN_TYPES
            .iter()
            .find(|t| **t == kind)
            .copied()
            .unwrap_or("unknown");
        *self.events.entry(label).or_default() += 1;
        self.last_event = Some(now);
        let key = (head.cluster_id, head.node_id);
        if kind == TYPE_STRAGGLER_STATE {
            if self.active.contains(&key) {
                return;
            }
            if self.active.len() >= self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.active.remove(&old);
                }
                self.dropped_cap += 1;
            }
            self.active.insert(key.clone());
            self.order.push_back(key);
        } else if kind == TYPE_STRAGGLER_RESOLVED && self.active.remove(&key) {
            self.order.retain(|k| *k != key);
        }
    }

    /// A line longer than [`MAX_LINE`] was skipped.
    pub fn oversized_line(&mut self) {
        self.parse_errors += 1;
    }

    pub fn ready(&self, now: Timestamp, window: Duration) -> bool {
        self.connected || self.last_event.is_some_and(|t| now.since(t) < window)
    }

    /// Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        use crate::metrics::sink::*;
        let mut s = String::new();
        let head = |s: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} {kind}");
        };
        head(
            &mut s,
            EVENTS_TOTAL,
            "counter",
            "Events read from the remediation socket, by type.",
        );
        for (t, n) in &self.events {
            let _ = writeln!(s, "{EVENTS_TOTAL}{{type=\"{t}\"}} {n}");
        }
        head(
            &mut s,
            PARSE_ERRORS_TOTAL,
            "counter",
            "Lines that were not a JSON object with a type.",
        );
        let _ = writeln!(s, "{PARSE_ERRORS_TOTAL} {}", self.parse_errors);
        head(
            &mut s,
            CONNECTED,
            "gauge",
            "1 while connected to the remediation socket.",
        );
        let _ = writeln!(s, "{CONNECTED} {}", u8::from(self.connected));
        head(
            &mut s,
            LAST_EVENT_TIMESTAMP_SECONDS,
            "gauge",
            "Unix time of the last event.",
        );
        let last = self.last_event.map_or(0.0, |t| t.as_secs_f64());
        let _ = writeln!(s, "{LAST_EVENT_TIMESTAMP_SECONDS} {last:.3}");
        head(
            &mut s,
            ACTIVE_STRAGGLERS,
            "gauge",
            "1 for each node currently reported as a straggler.",
        );
        for (c, n) in &self.order {
            let _ = writeln!(
                s,
                "{ACTIVE_STRAGGLERS}{{cluster_id=\"{}\",node_id=\"{}\"}} 1",
                escape(c),
                escape(n)
            );
        }
        head(
            &mut s,
            DROPPED_TOTAL,
            "counter",
            "Stragglers evicted from tracking, by reason.",
        );
        let _ = writeln!(
            s,
            "{DROPPED_TOTAL}{{reason=\"cap_reached\"}} {}",
            self.dropped_cap
        );
        s
    }
}

/// Escape a Prometheus label value.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Split complete lines out of `buf`, handing each to `f`; lines over the cap are skipped
/// (`oversized`). `skipping` carries "inside an oversized line" across reads.
fn drain_lines(buf: &mut Vec<u8>, skipping: &mut bool, mut f: impl FnMut(Option<&[u8]>)) {
    loop {
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                if *skipping {
                    *skipping = false;
                } else {
                    f(Some(&buf[..i]));
                }
                buf.drain(..=i);
            }
            None => {
                if buf.len() > MAX_LINE {
                    if !*skipping {
                        f(None);
                    }
                    *skipping = true;
                    buf.clear();
                }
                return;
            }
        }
    }
}

/// Read the socket forever, reconnecting after `reconnect_delay`.
pub async fn read_socket(cfg: SinkConfig, state: Arc<Mutex<SinkState>>, clock: Arc<dyn Clock>) {
    loop {
        let dial = tokio::time::timeout(
            DIAL_TIMEOUT,
            tokio::net::UnixStream::connect(&cfg.socket_path),
        )
        .await;
        match dial {
            Ok(Ok(mut stream)) => {
                tracing::info!(socket = %cfg.socket_path.display(), "sink connected");
                state.lock().set_connected(true);
                let mut buf = Vec::with_capacity(4096);
                let mut chunk = vec![0u8; 8192];
                let mut skipping = false;
                loop {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            buf.extend_from_slice(&chunk[..n]);
                            let now = clock.now();
                            let mut st = state.lock();
                            drain_lines(&mut buf, &mut skipping, |l| match l {
                                Some(line) => st.handle_line(line, now),
                                None => st.oversized_line(),
                            });
                        }
                    }
                }
                state.lock().set_connected(false);
                tracing::info!("sink disconnected");
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "sink dial failed"),
            Err(_) => tracing::debug!("sink dial timed out"),
        }
        tokio::time::sleep(cfg.reconnect_delay).await;
    }
}

/// Serve `/metrics`, `/healthz`, `/readyz` until `shutdown`.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    cfg: SinkConfig,
    state: Arc<Mutex<SinkState>>,
    clock: Arc<dyn Clock>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    crate::httpserve::serve(listener, shutdown, move |path| {
        let st = state.lock();
        match path {
            "/metrics" => (200, "text/plain; version=0.0.4; charset=utf-8", st.render()),
            "/healthz" => (200, "text/plain", "ok".to_string()),
            "/readyz" => {
                if st.ready(clock.now(), cfg.readiness_window) {
                    (200, "text/plain", "ok".to_string())
                } else {
                    (503, "text/plain", "not ready: uds_disconnected".to_string())
                }
            }
            _ => (404, "text/plain", "not found".to_string()),
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timestamp = Timestamp::from_nanos(1_779_185_472_123_456_789);

    #[test]
    fn tracks_active_stragglers_and_counts_everything() {
        let mut s = SinkState::new(10);
        s.handle_line(
            br#"{"type":"straggler_state","node_id":"n1","cluster_id":"c"}"#,
            T,
        );
        s.handle_line(
            br#"{"type":"straggler_state","node_id":"n2","cluster_id":"c"}"#,
            T,
        );
        s.handle_line(
            br#"{"type":"straggler_state","node_id":"n1","cluster_id":"c"}"#,
            T,
        );
        s.handle_line(
            br#"{"type":"straggler_resolved","node_id":"n1","cluster_id":"c"}"#,
            T,
        );
        s.handle_line(br#"{"type":"memory","pid":1}"#, T);
        s.handle_line(br#"{"type":"something_new"}"#, T);
        s.handle_line(b"garbage", T);
        s.handle_line(br#"{"no_type":1}"#, T);
        s.handle_line(b"   ", T);
        assert_eq!(s.active(), vec![("c".to_string(), "n2".to_string())]);
        let text = s.render();
        for want in [
            "ingero_sink_events_total{type=\"straggler_state\"} 3",
            "ingero_sink_events_total{type=\"straggler_resolved\"} 1",
            "ingero_sink_events_total{type=\"memory\"} 1",
            "ingero_sink_events_total{type=\"unknown\"} 1",
            "ingero_sink_parse_errors_total 2",
            "ingero_sink_connected 0",
            "ingero_sink_last_event_timestamp_seconds 1779185472.123",
            "ingero_sink_active_stragglers{cluster_id=\"c\",node_id=\"n2\"} 1",
            "ingero_sink_dropped_total{reason=\"cap_reached\"} 0",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn exposition_passes_promtool_when_available() {
        use std::io::Write;
        let mut s = SinkState::new(10);
        s.handle_line(
            br#"{"type":"straggler_state","node_id":"n1","cluster_id":"c"}"#,
            T,
        );
        let Ok(mut child) = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!(
                "SKIP exposition check: promtool not installed (scripts/test-all.sh installs it)"
            );
            return;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(s.render().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn cap_evicts_the_oldest_and_counts_it() {
        let mut s = SinkState::new(2);
        for n in ["a", "b", "c"] {
            let l = format!(r#"{{"type":"straggler_state","node_id":"{n}","cluster_id":"x\"y"}}"#);
            s.handle_line(l.as_bytes(), T);
        }
        assert_eq!(
            s.active()
                .iter()
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>(),
            ["b", "c"]
        );
        let text = s.render();
        assert!(text.contains("ingero_sink_dropped_total{reason=\"cap_reached\"} 1"));
        assert!(text.contains(r#"cluster_id="x\"y""#), "{text}");
    }

    #[test]
    fn readiness_follows_connection_and_recent_events() {
        let mut s = SinkState::new(2);
        let w = Duration::from_secs(60);
        assert!(!s.ready(T, w));
        s.set_connected(true);
        assert!(s.ready(T, w));
        s.set_connected(false);
        s.handle_line(br#"{"type":"straggle"}"#, T);
        assert!(s.ready(T.saturating_add(Duration::from_secs(59)), w));
        assert!(!s.ready(T.saturating_add(Duration::from_secs(61)), w));
    }

    #[test]
    fn line_splitting_skips_oversized_lines() {
        let mut buf = Vec::new();
        let mut skipping = false;
        let mut got = Vec::new();
        buf.extend_from_slice(b"one\ntw");
        drain_lines(&mut buf, &mut skipping, |l| got.push(l.map(|x| x.to_vec())));
        buf.extend_from_slice(b"o\n");
        drain_lines(&mut buf, &mut skipping, |l| got.push(l.map(|x| x.to_vec())));
        buf.extend(std::iter::repeat_n(b'x', MAX_LINE + 1));
        drain_lines(&mut buf, &mut skipping, |l| got.push(l.map(|x| x.to_vec())));
        buf.extend_from_slice(b"xxx\nthree\n");
        drain_lines(&mut buf, &mut skipping, |l| got.push(l.map(|x| x.to_vec())));
        assert_eq!(
            got,
            vec![
                Some(b"one".to_vec()),
                Some(b"two".to_vec()),
                None,
                Some(b"three".to_vec())
            ]
        );
    }
}
