//! End-to-end harness: runs the real `ingero-fleet` binary, learns its bound addresses
//! from the `listening` log lines, and talks to it over loopback with a minimal raw HTTP
//! client (so bad-input tests control every byte on the wire).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ingero-fleet"))
}

/// A running `ingero-fleet`.
pub struct Fleet {
    pub child: Child,
    pub addrs: HashMap<String, SocketAddr>,
    pub log: Arc<Mutex<Vec<String>>>,
    _dir: Option<tempdir::TempDir>,
}

pub mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A directory removed on drop.
    #[derive(Debug)]
    pub struct TempDir(PathBuf);

    impl TempDir {
        /// Unique within the run: the tests share one process, so the pid alone does not
        /// tell two of them apart; a counter does.
        pub fn new(tag: &str) -> TempDir {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "ingero-fleet-test-{tag}-{}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            std::fs::create_dir_all(&p).expect("create temp dir");
            TempDir(p)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A config with every listener on 127.0.0.1:0 and a fast tick, for tests.
pub fn test_config(push_interval: &str, extra_processors: &[&str]) -> String {
    let procs = std::iter::once("ingero")
        .chain(extra_processors.iter().copied())
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
processors:
  ingero:
    threshold:
      k: 2.0
      ema_alpha: 0.2
    quorum:
      statistical_min: 5
      coverage_fraction: 0.80
    push_interval: {push_interval}
    ttl_multiplier: 3
  nccl_peer_lag:
  provider_lookup:
    tick_interval: 1s
extensions:
  ingero_threshold:
    agent_endpoint: 127.0.0.1:0
    admin_endpoint: 127.0.0.1:0
  health_check:
    endpoint: 127.0.0.1:0
exporters:
  prometheus:
    endpoint: 127.0.0.1:0
service:
  extensions: [ingero_threshold, health_check]
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [{procs}]
      exporters: [prometheus]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: 0
"#
    )
}

impl Fleet {
    /// Start with a config text written to a temp file (plus extra args).
    pub fn start_with(config: &str, extra: &[&str]) -> Fleet {
        let dir = tempdir::TempDir::new("cfg");
        let path = dir.path().join("fleet.yaml");
        std::fs::write(&path, config).expect("write config");
        let path_str = path.to_string_lossy().to_string();
        let mut args = vec!["--config", path_str.as_str()];
        args.extend_from_slice(extra);
        let mut f = Fleet::spawn(&args, &[]);
        f._dir = Some(dir);
        f
    }

    /// Spawn the binary with raw args and wait until it is ready (or exits).
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Fleet {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn ingero-fleet");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<Option<String>>();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                log2.lock().unwrap().push(line.clone());
                let _ = tx.send(Some(line));
            }
            let _ = tx.send(None);
        });
        let mut addrs = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Some(line)) => {
                    if line.contains(" listening")
                        && let (Some(name), Some(addr)) =
                            (field(&line, "listener"), field(&line, "addr"))
                    {
                        addrs.insert(name, addr.parse().expect("addr"));
                    }
                    if line.contains("ingero-fleet is ready") {
                        break;
                    }
                }
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "ingero-fleet did not become ready; log:\n{}",
                        log.lock().unwrap().join("\n")
                    );
                }
            }
        }
        Fleet {
            child,
            addrs,
            log,
            _dir: None,
        }
    }

    pub fn addr(&self, name: &str) -> SocketAddr {
        *self
            .addrs
            .get(name)
            .unwrap_or_else(|| panic!("no listener {name}; have {:?}", self.addrs.keys()))
    }

    pub fn http(&self) -> SocketAddr {
        self.addr("otlp/http")
    }

    pub fn grpc(&self) -> SocketAddr {
        self.addr("otlp/grpc")
    }

    pub fn agent_api(&self) -> SocketAddr {
        self.addr("ingero_threshold/agent")
    }

    pub fn admin_api(&self) -> SocketAddr {
        self.addr("ingero_threshold/admin")
    }

    pub fn prometheus(&self) -> SocketAddr {
        self.addr("prometheus")
    }

    pub fn telemetry(&self) -> SocketAddr {
        self.addr("telemetry")
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGTERM and wait; returns the exit status and how long it took.
    pub fn terminate(&mut self) -> (std::process::ExitStatus, Duration) {
        let t = Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = self.child.wait().expect("wait");
        (status, t.elapsed())
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` or `key="value"` from a log line.
fn field(line: &str, key: &str) -> Option<String> {
    let pat = format!("{key}=");
    let start = line.find(&pat)? + pat.len();
    let rest = &line[start..];
    if let Some(stripped) = rest.strip_prefix('"') {
        Some(stripped.split('"').next()?.to_string())
    } else {
        Some(rest.split_whitespace().next()?.to_string())
    }
}

/// A parsed HTTP/1.1 response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Send raw bytes as one request on a fresh connection; read the whole response.
pub fn raw(addr: SocketAddr, request: &[u8]) -> Resp {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.set_nodelay(true);
    // The server may answer (413) and stop reading before the body is sent: keep the
    // write error and read the response anyway.
    let _ = s.write_all(request);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_response(&buf)
}

pub fn parse_response(buf: &[u8]) -> Resp {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(pos) = b.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&b[..pos]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = pos + 2;
        out.extend_from_slice(&b[start..start + size]);
        b = &b[start + size + 2..];
    }
    out
}

/// POST with `Connection: close`.
pub fn post(
    addr: SocketAddr,
    path: &str,
    content_type: &str,
    body: &[u8],
    extra_headers: &[(&str, &str)],
) -> Resp {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra_headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(addr, &bytes)
}

/// GET with `Connection: close` and, given a token, `Authorization: Bearer`.
pub fn get_as(addr: SocketAddr, token: Option<&str>, path: &str) -> Resp {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: fleet\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
}

/// Everything a client can observe of a response but the `Date` header.
pub fn observable(r: &Resp) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let h = r
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("date"))
        .cloned()
        .collect();
    (r.status, h, r.body.clone())
}

pub fn get(addr: SocketAddr, path_and_query: &str) -> Resp {
    raw(
        addr,
        format!("GET {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// The agent's health push (JSON) to `/v1/metrics?cluster_id=`.
pub fn push_json(addr: SocketAddr, cluster: &str, body: &str) -> Resp {
    post(
        addr,
        &format!("/v1/metrics?cluster_id={cluster}"),
        "application/json",
        body.as_bytes(),
        &[],
    )
}

/// Poll `f` until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Value of one Prometheus series (exact name+labels text as rendered).
pub fn prom_value(text: &str, series_prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(series_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Now, in nanoseconds since the Unix epoch (OTLP timestamps).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Whether `python3` has the OpenTelemetry SDK's OTLP exporters (HTTP and gRPC); the tests
/// that drive it print `SKIP:` without them.
pub fn python_has_otel() -> bool {
    Command::new("python3")
        .args(["-c", "import opentelemetry.exporter.otlp.proto.http.metric_exporter, opentelemetry.exporter.otlp.proto.grpc.metric_exporter"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
