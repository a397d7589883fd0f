//! The agent's own Prometheus endpoint (opt-in, `--metrics` / `--metrics-listen`): what
//! the node believes about itself, rendered from the status board the tick updates.
//!
//! The three names of the seed's "Agent-side metrics" table come first and keep its
//! meaning; `detection_mode` is a state set (one series per mode, 1 for the current one)
//! because Prometheus values are numbers. The rest are additions, all prefixed
//! `ingero_agent_`, and the process's own `process_*` families (`procstats`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use ingero_wire as wire;

use crate::status::{StatusBoard, StatusSnapshot};

/// Where `--metrics` listens unless `--metrics-listen` says otherwise (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9465";

pub const HEALTH_SCORE: &str = "ingero_agent_health_score";
pub const DETECTION_MODE: &str = "ingero_agent_detection_mode";
pub const FLEET_REACHABLE: &str = "ingero_agent_fleet_reachable";
pub const NODE_STATE: &str = "ingero_agent_node_state";
pub const STRAGGLER: &str = "ingero_agent_straggler";
pub const THRESHOLD: &str = "ingero_agent_threshold";
pub const SIGNAL: &str = "ingero_agent_signal";
pub const TICKS_TOTAL: &str = "ingero_agent_ticks_total";
pub const PUSHES_TOTAL: &str = "ingero_agent_pushes_total";
pub const STRAGGLER_EVENTS_TOTAL: &str = "ingero_agent_straggler_events_total";
pub const TLS_RELOADS_TOTAL: &str = "ingero_agent_tls_reloads_total";
pub const API_TOKEN_RELOADS_TOTAL: &str = "ingero_agent_api_token_reloads_total";
pub const SPANS_TOTAL: &str = "ingero_agent_spans_total";
pub const LAUNCHES_TOTAL: &str = "ingero_agent_launches_total";
pub const NESTED_LAUNCHES_TOTAL: &str = "ingero_agent_nested_launches_total";
pub const PROBE_EVENTS_TOTAL: &str = "ingero_agent_probe_events_total";
pub const PROBE_DROPPED_TOTAL: &str = "ingero_agent_probe_dropped_total";
pub const STORE_RECORDS_TOTAL: &str = "ingero_agent_store_records_total";
pub const STORE_DROPPED_TOTAL: &str = "ingero_agent_store_dropped_total";
pub const STORE_ROLLOVERS_TOTAL: &str = "ingero_agent_store_rollovers_total";
pub const HOST_DROPPED_TOTAL: &str = "ingero_agent_host_dropped_total";
pub const PROBE_LIBRARIES: &str = "ingero_agent_probe_libraries";
pub const RUNTIME_LAUNCH_PROBES: &str = "ingero_agent_runtime_launch_probes";
pub const RUNTIME_LAUNCH_CALIBRATION: &str = "ingero_agent_runtime_launch_calibration_launches";
pub const BARRIER_WAIT_SHARE: &str = "ingero_agent_barrier_wait_share";
pub const BARRIER_WAITS_TOTAL: &str = "ingero_agent_nccl_barrier_waits_total";

/// `ingero_agent_launches_total{layer}` in the order of `events::launch`'s counters.
pub const LAUNCH_LAYERS: [&str; 4] = ["runtime", "runtime_graph", "driver", "driver_graph"];
/// `ingero_agent_probe_dropped_total{reason}` in the order of the kernel's drop counters.
pub const DROP_REASONS: [&str; 4] = [
    "ringbuf_full",
    "entry_missing",
    "user_read_failed",
    "counts_full",
];

/// Every mode value `ingero_agent_detection_mode{mode}` carries, in the wire spelling.
pub const MODES: [&str; 5] = [
    wire::mode::NONE,
    wire::mode::FLEET,
    wire::mode::FLEET_CACHED,
    wire::mode::LOCAL_CACHED,
    wire::mode::LOCAL_BASELINE,
];
/// Every state `ingero_agent_node_state{state}` carries (`stale` is never pushed, but it
/// is what the node is while its events cannot be read).
pub const STATES: [&str; 4] = ["calibrating", "active", "idle", "stale"];

fn head(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

fn flag(b: bool) -> u8 {
    u8::from(b)
}

/// Prometheus text format 0.0.4. Label values are fixed spellings (no escaping needed).
pub fn render(s: &StatusSnapshot) -> String {
    let mut o = String::new();
    head(
        &mut o,
        HEALTH_SCORE,
        "gauge",
        "This node's health score in [0, 1] (absent before the first scored tick).",
    );
    if let Some(v) = s.score {
        let _ = writeln!(o, "{HEALTH_SCORE} {v}");
    }
    head(
        &mut o,
        DETECTION_MODE,
        "gauge",
        "Current detection mode: 1 for the mode in force, 0 for the others.",
    );
    for m in MODES {
        let _ = writeln!(o, "{DETECTION_MODE}{{mode=\"{m}\"}} {}", flag(s.mode == m));
    }
    head(
        &mut o,
        FLEET_REACHABLE,
        "gauge",
        "1 if Fleet is reachable (the last pushes did not all fail).",
    );
    let _ = writeln!(o, "{FLEET_REACHABLE} {}", flag(s.fleet_reachable));
    head(
        &mut o,
        NODE_STATE,
        "gauge",
        "Node lifecycle state: 1 for the current state, 0 for the others.",
    );
    for st in STATES {
        let _ = writeln!(o, "{NODE_STATE}{{state=\"{st}\"}} {}", flag(s.state == st));
    }
    head(
        &mut o,
        STRAGGLER,
        "gauge",
        "Whether this node classifies itself as a straggler (1) or not (0).",
    );
    let _ = writeln!(o, "{STRAGGLER} {}", flag(s.straggler));
    head(
        &mut o,
        THRESHOLD,
        "gauge",
        "The threshold the node classifies against (absent in mode none).",
    );
    if let Some(t) = s.threshold {
        let _ = writeln!(o, "{THRESHOLD} {t}");
    }
    head(
        &mut o,
        SIGNAL,
        "gauge",
        "The four clamped score signals of the last scored tick.",
    );
    if s.score.is_some() {
        for (sig, v) in s.signals.named() {
            let _ = writeln!(o, "{SIGNAL}{{signal=\"{}\"}} {v}", sig.as_str());
        }
    }
    head(&mut o, TICKS_TOTAL, "counter", "Ticks run since start.");
    let _ = writeln!(o, "{TICKS_TOTAL} {}", s.ticks);
    head(
        &mut o,
        PUSHES_TOTAL,
        "counter",
        "Pushes to Fleet (health and straggler events), by result.",
    );
    let _ = writeln!(o, "{PUSHES_TOTAL}{{result=\"ok\"}} {}", s.pushes_ok);
    let _ = writeln!(o, "{PUSHES_TOTAL}{{result=\"failed\"}} {}", s.pushes_failed);
    head(
        &mut o,
        TLS_RELOADS_TOTAL,
        "counter",
        "Changed TLS files, by role (client: the CA, certificate and key of the Fleet, span and fan-out clients; server: the query API's certificate, key and client CA) and result: ok when the new files are in use, error when they did not load and the previous ones stayed.",
    );
    for role in crate::tlsfiles::Role::ALL {
        let (r, c) = (role.label(), role.counts());
        let _ = writeln!(
            o,
            "{TLS_RELOADS_TOTAL}{{role=\"{r}\",result=\"ok\"}} {}",
            c.ok()
        );
        let _ = writeln!(
            o,
            "{TLS_RELOADS_TOTAL}{{role=\"{r}\",result=\"error\"}} {}",
            c.error()
        );
    }
    head(
        &mut o,
        API_TOKEN_RELOADS_TOTAL,
        "counter",
        "Changes of the query API's token file (api.token_file), by result: ok when requests must carry the new token, error when the new file gave no token (empty, unreadable) and the previous token stayed.",
    );
    let c = crate::tlsfiles::Source::ApiToken.counts();
    let _ = writeln!(o, "{API_TOKEN_RELOADS_TOTAL}{{result=\"ok\"}} {}", c.ok());
    let _ = writeln!(
        o,
        "{API_TOKEN_RELOADS_TOTAL}{{result=\"error\"}} {}",
        c.error()
    );
    head(
        &mut o,
        STRAGGLER_EVENTS_TOTAL,
        "counter",
        "Straggler events emitted (every straggler tick and each recovery).",
    );
    let _ = writeln!(o, "{STRAGGLER_EVENTS_TOTAL} {}", s.straggler_events);
    head(
        &mut o,
        SPANS_TOTAL,
        "counter",
        "Detection spans by result: exported, failed (no 2xx), dropped (export queue full).",
    );
    for (r, v) in ["exported", "failed", "dropped"].iter().zip(s.spans) {
        let _ = writeln!(o, "{SPANS_TOTAL}{{result=\"{r}\"}} {v}");
    }
    head(
        &mut o,
        BARRIER_WAIT_SHARE,
        "gauge",
        "Share of the signal window this node's ranks spent waiting for peers at NCCL barriers (beyond their usual synchronize); the throughput signal is the launch rate divided by 1 - share (at most 0.9). 0 without NCCL.",
    );
    let _ = writeln!(o, "{BARRIER_WAIT_SHARE} {}", s.barrier_wait_share);
    head(
        &mut o,
        BARRIER_WAITS_TOTAL,
        "counter",
        "NCCL collectives followed by a host synchronize of the same process, whose duration is the collective's barrier wait.",
    );
    let _ = writeln!(o, "{BARRIER_WAITS_TOTAL} {}", s.barrier_waits);
    render_probes(&mut o, s);
    render_store(&mut o, s);
    o
}

/// The event store's and the host layer's counters (zero without `--store`).
fn render_store(o: &mut String, s: &StatusSnapshot) {
    let c = &s.store_counts;
    head(
        o,
        STORE_RECORDS_TOTAL,
        "counter",
        "Records written to the event store, by kind (events: timed calls; aggregates: per-second rows).",
    );
    let _ = writeln!(
        o,
        "{STORE_RECORDS_TOTAL}{{kind=\"events\"}} {}",
        c.events_written
    );
    let _ = writeln!(
        o,
        "{STORE_RECORDS_TOTAL}{{kind=\"aggregates\"}} {}",
        c.aggregates_written
    );
    head(
        o,
        STORE_DROPPED_TOTAL,
        "counter",
        "Records the event store lost, by reason.",
    );
    let _ = writeln!(
        o,
        "{STORE_DROPPED_TOTAL}{{reason=\"queue_full\"}} {}",
        c.dropped_queue_full
    );
    let _ = writeln!(
        o,
        "{STORE_DROPPED_TOTAL}{{reason=\"write_error\"}} {}",
        c.dropped_write_error
    );
    head(
        o,
        STORE_ROLLOVERS_TOTAL,
        "counter",
        "Times the event store's file reached its size bound and was rolled over.",
    );
    let _ = writeln!(o, "{STORE_ROLLOVERS_TOTAL} {}", c.rollovers);
    head(
        o,
        HOST_DROPPED_TOTAL,
        "counter",
        "Host-layer (scheduler, block I/O, TCP, reclaim, OOM) updates lost in the kernel, by the map that was full.",
    );
    for (i, reason) in crate::probes::host::HOST_DROP_REASONS.iter().enumerate() {
        let _ = writeln!(
            o,
            "{HOST_DROPPED_TOTAL}{{reason=\"{reason}\"}} {}",
            c.host_drops[i]
        );
    }
}

/// The eBPF probes' counters. Present for every source (zero with `--synthetic`) so a
/// dashboard's queries never miss a series.
fn render_probes(o: &mut String, s: &StatusSnapshot) {
    let p = &s.probe_counts;
    head(
        o,
        LAUNCHES_TOTAL,
        "counter",
        "Kernel and graph launches of the watched processes, each counted once, by the layer that counted it (runtime launches are counted under driver once the runtime launch probes are detached).",
    );
    for (i, layer) in LAUNCH_LAYERS.iter().enumerate() {
        let _ = writeln!(o, "{LAUNCHES_TOTAL}{{layer=\"{layer}\"}} {}", p.launches[i]);
    }
    head(
        o,
        NESTED_LAUNCHES_TOTAL,
        "counter",
        "Driver launches made inside a runtime launch (the same launch one layer down, not counted again).",
    );
    let _ = writeln!(
        o,
        "{NESTED_LAUNCHES_TOTAL} {}",
        p.launches[crate::events::launch::NESTED]
    );
    head(
        o,
        PROBE_EVENTS_TOTAL,
        "counter",
        "Event records read from the probes' ring buffers, by library.",
    );
    let _ = writeln!(
        o,
        "{PROBE_EVENTS_TOTAL}{{library=\"cuda\"}} {}",
        p.cuda_events
    );
    let _ = writeln!(
        o,
        "{PROBE_EVENTS_TOTAL}{{library=\"nccl\"}} {}",
        p.nccl_events
    );
    head(
        o,
        PROBE_DROPPED_TOTAL,
        "counter",
        "Events the probes lost in the kernel, by reason.",
    );
    for (i, reason) in DROP_REASONS.iter().enumerate() {
        let _ = writeln!(
            o,
            "{PROBE_DROPPED_TOTAL}{{reason=\"{reason}\"}} {}",
            p.kernel_drops[i]
        );
    }
    head(
        o,
        PROBE_LIBRARIES,
        "gauge",
        "Library files the probes are attached to.",
    );
    let _ = writeln!(o, "{PROBE_LIBRARIES} {}", p.libraries);
    let rl = &p.runtime_launch;
    head(
        o,
        RUNTIME_LAUNCH_PROBES,
        "gauge",
        "The runtime's launch probes: 1 for the current state (calibrating, detaching, detached: counted at the driver alone, attached: both layers).",
    );
    for st in crate::probes::runtime_launch::State::ALL {
        let _ = writeln!(
            o,
            "{RUNTIME_LAUNCH_PROBES}{{state=\"{}\"}} {}",
            st.as_str(),
            flag(rl.state == st)
        );
    }
    head(
        o,
        RUNTIME_LAUNCH_CALIBRATION,
        "gauge",
        "The last calibration's runtime launches and the nested driver launches among them.",
    );
    let _ = writeln!(
        o,
        "{RUNTIME_LAUNCH_CALIBRATION}{{counter=\"runtime\"}} {}",
        rl.runtime
    );
    let _ = writeln!(
        o,
        "{RUNTIME_LAUNCH_CALIBRATION}{{counter=\"nested\"}} {}",
        rl.nested
    );
}

/// Bind the endpoint; the bound address is returned (port 0 picks one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let l = tokio::net::TcpListener::bind(addr).await?;
    let bound = l.local_addr()?;
    Ok((l, bound))
}

/// Serve `/metrics` and `/healthz` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    board: Arc<StatusBoard>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    crate::httpserve::serve(listener, shutdown, move |path| match path {
        "/metrics" => {
            let mut text = render(&board.snapshot());
            if let Some(p) = crate::procstats::ProcessStats::read() {
                p.render(&mut text);
            }
            (200, "text/plain; version=0.0.4; charset=utf-8", text)
        }
        "/healthz" => (200, "text/plain", "ok".to_string()),
        _ => (404, "text/plain", "not found".to_string()),
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::SignalSet;

    fn snapshot() -> StatusSnapshot {
        StatusSnapshot {
            state: "active",
            score: Some(0.875),
            signals: SignalSet::new(0.9, 0.8, 0.7, 0.6),
            mode: wire::mode::FLEET_CACHED,
            threshold: Some(0.82),
            fleet_reachable: true,
            straggler: false,
            spans: [4, 0, 1],
            ticks: 12,
            pushes_ok: 11,
            pushes_failed: 1,
            straggler_events: 0,
            barrier_wait_share: 0.25,
            barrier_waits: 640,
            probe_counts: crate::status::ProbeCounts {
                launches: [40, 2, 7, 1, 40],
                kernel_drops: [3, 0, 0, 0],
                cuda_events: 90,
                nccl_events: 5,
                libraries: 3,
                runtime_launch: crate::probes::runtime_launch::Status {
                    state: crate::probes::runtime_launch::State::Detached,
                    runtime: 20_000,
                    nested: 19_990,
                    threshold: 20_000,
                },
            },
            store_counts: crate::status::StoreCounts {
                events_written: 1234,
                aggregates_written: 56,
                dropped_queue_full: 7,
                dropped_write_error: 0,
                rollovers: 1,
                host_drops: [0, 2, 0, 0, 0, 0, 0, 0],
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_seed_names_and_the_current_values() {
        let text = render(&snapshot());
        for want in [
            "ingero_agent_health_score 0.875\n",
            "ingero_agent_detection_mode{mode=\"fleet-cached\"} 1\n",
            "ingero_agent_detection_mode{mode=\"fleet\"} 0\n",
            "ingero_agent_detection_mode{mode=\"none\"} 0\n",
            "ingero_agent_fleet_reachable 1\n",
            "ingero_agent_node_state{state=\"active\"} 1\n",
            "ingero_agent_node_state{state=\"idle\"} 0\n",
            "ingero_agent_straggler 0\n",
            "ingero_agent_threshold 0.82\n",
            "ingero_agent_signal{signal=\"memory\"} 0.7\n",
            "ingero_agent_ticks_total 12\n",
            "ingero_agent_spans_total{result=\"exported\"} 4\n",
            "ingero_agent_spans_total{result=\"dropped\"} 1\n",
            "ingero_agent_pushes_total{result=\"failed\"} 1\n",
            "ingero_agent_barrier_wait_share 0.25\n",
            "ingero_agent_nccl_barrier_waits_total 640\n",
            "ingero_agent_launches_total{layer=\"runtime\"} 40\n",
            "ingero_agent_launches_total{layer=\"runtime_graph\"} 2\n",
            "ingero_agent_launches_total{layer=\"driver\"} 7\n",
            "ingero_agent_launches_total{layer=\"driver_graph\"} 1\n",
            "ingero_agent_nested_launches_total 40\n",
            "ingero_agent_probe_events_total{library=\"nccl\"} 5\n",
            "ingero_agent_probe_dropped_total{reason=\"ringbuf_full\"} 3\n",
            "ingero_agent_probe_libraries 3\n",
            "ingero_agent_runtime_launch_probes{state=\"detached\"} 1\n",
            "ingero_agent_runtime_launch_probes{state=\"calibrating\"} 0\n",
            "ingero_agent_runtime_launch_probes{state=\"attached\"} 0\n",
            "ingero_agent_runtime_launch_calibration_launches{counter=\"runtime\"} 20000\n",
            "ingero_agent_runtime_launch_calibration_launches{counter=\"nested\"} 19990\n",
            "ingero_agent_store_records_total{kind=\"events\"} 1234\n",
            "ingero_agent_store_records_total{kind=\"aggregates\"} 56\n",
            "ingero_agent_store_dropped_total{reason=\"queue_full\"} 7\n",
            "ingero_agent_store_dropped_total{reason=\"write_error\"} 0\n",
            "ingero_agent_store_rollovers_total 1\n",
            "ingero_agent_host_dropped_total{reason=\"procs_full\"} 2\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        // The reload counter: both roles and both results (the values are the process's).
        for role in ["client", "server"] {
            for result in ["ok", "error"] {
                let want = format!(
                    "\ningero_agent_tls_reloads_total{{role=\"{role}\",result=\"{result}\"}} "
                );
                assert!(text.contains(&want), "missing {want:?} in\n{text}");
            }
        }
        for result in ["ok", "error"] {
            let want = format!("\ningero_agent_api_token_reloads_total{{result=\"{result}\"}} ");
            assert!(text.contains(&want), "missing {want:?} in\n{text}");
        }
        // Exactly one mode and one state series at 1.
        assert_eq!(text.matches("_detection_mode{").count(), MODES.len());
        let on = |prefix: &str| {
            text.lines()
                .filter(|l| l.starts_with(prefix) && l.ends_with("} 1"))
                .count()
        };
        assert_eq!(
            (
                on(DETECTION_MODE),
                on(NODE_STATE),
                on(RUNTIME_LAUNCH_PROBES)
            ),
            (1, 1, 1),
            "{text}"
        );
    }

    #[test]
    fn before_the_first_score_the_gauges_without_a_value_are_absent() {
        let text = render(&StatusSnapshot::default());
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        for absent in [HEALTH_SCORE, THRESHOLD, SIGNAL] {
            assert!(
                !samples.iter().any(|l| l.starts_with(absent)),
                "{absent} in\n{text}"
            );
        }
        assert!(samples.contains(&"ingero_agent_fleet_reachable 0"));
    }

    fn promtool(text: &str) -> Option<std::process::Output> {
        use std::io::Write;
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(text.as_bytes())
            .expect("write to promtool");
        Some(child.wait_with_output().expect("promtool output"))
    }

    #[test]
    fn exposition_passes_promtool() {
        for s in [snapshot(), StatusSnapshot::default()] {
            let Some(out) = promtool(&render(&s)) else {
                eprintln!(
                    "SKIP exposition check: promtool not installed (scripts/test-all.sh installs it)"
                );
                return;
            };
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The check can fail: a counter without `_total` is a promtool lint error.
        let bad = "# HELP x_count c\n# TYPE x_count counter\nx_count 1\n";
        let out = promtool(bad).expect("promtool ran above");
        assert!(
            !out.status.success(),
            "promtool accepted a bad counter name"
        );
    }
}
