//! The live run: virtual agents push over OTLP/HTTP to a real Fleet on wall-clock time.
//!
//! Pushes go through `testkit::push` connections (the ones `fleet-loadgen` uses): a fixed
//! pool, each connection carrying its share of the agents. Each health push's response
//! headers go through the agent's own parsing into its cache. Once per push interval the
//! run reads what Fleet says: `GET /api/v1/diagnostics?cluster_id=` on the admin listener
//! (each node's straggler flag, panic mode, threshold) and, with NCCL, the named ranks from
//! the Prometheus exporter (`ingero_nccl_rank_lag_seconds`).
//!
//! [`EmbeddedFleet`] runs the real Fleet service (the host library with Fleet's component
//! set and its embedded default config) in this process, for `demo` and the tests.

use std::collections::HashMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use bytes::Bytes;
use component::Timestamp;
use http_body_util::{BodyExt, Full};
use prost::Message;
use testkit::push::{Connection, Encoding, Target};

use crate::agent::{HealthAnswer, Outgoing, PushKind, VirtualAgent};
use crate::inproc::cluster_view_of;
use crate::record::{Event, NamedRank, Recorder, Report};
use crate::run::{SLOTS, communicator, core_config, identities};
use crate::scenario::Scenario;
use crate::world::World;

/// Where the Fleet under test listens (all plain HTTP on loopback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// OTLP/HTTP receiver, e.g. `127.0.0.1:4318`.
    pub otlp_http: String,
    /// The threshold extension's admin listener (diagnostics, the live view).
    pub admin: String,
    /// The Prometheus exporter: pipeline data and the components' own families (named
    /// NCCL ranks among them).
    pub exporter: String,
}

impl Default for Endpoints {
    /// The embedded default config's ports.
    fn default() -> Self {
        Endpoints {
            otlp_http: "127.0.0.1:4318".into(),
            admin: "127.0.0.1:8081".into(),
            exporter: "127.0.0.1:8889".into(),
        }
    }
}

/// The live-view URL on an admin listener.
pub fn view_url(admin: &str) -> String {
    format!("http://{admin}/view/")
}

/// A free loopback port (bound, read, released; another process could take it in between).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The real Fleet service in this process, on its own runtime thread.
#[derive(Debug)]
pub struct EmbeddedFleet {
    pub endpoints: Endpoints,
    push_interval: Duration,
    /// Every other listener of the default config (gRPC, agent API, health check, the
    /// host's self-telemetry), moved along when `auto_ports` is used.
    auto_ports: Option<[u16; 4]>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl EmbeddedFleet {
    /// Start Fleet with the embedded default config and the scenario's push interval
    /// (`processors.ingero.push_interval`). `auto_ports`: every listener on a free port
    /// instead of the default ones.
    pub fn start(push_interval: Duration, auto_ports: bool) -> anyhow::Result<Self> {
        let (endpoints, others) = if auto_ports {
            let p = (0..8).map(|_| free_port()).collect::<Result<Vec<_>, _>>()?;
            (
                Endpoints {
                    otlp_http: format!("127.0.0.1:{}", p[0]),
                    admin: format!("127.0.0.1:{}", p[1]),
                    exporter: format!("127.0.0.1:{}", p[2]),
                },
                Some([p[3], p[4], p[5], p[6]]),
            )
        } else {
            (Endpoints::default(), None)
        };
        let mut f = EmbeddedFleet {
            endpoints,
            push_interval,
            auto_ports: others,
            stop: None,
            thread: None,
        };
        f.launch()?;
        Ok(f)
    }

    /// The config: the embedded default with the push interval (and ports) replaced.
    pub fn config(&self) -> anyhow::Result<component::ConfigValue> {
        let mut v = collector_host::config::source::parse_document(
            "embedded default",
            ingero_fleet_dist::EMBEDDED_DEFAULT,
        )?;
        let secs = self.push_interval.as_secs_f64();
        v["processors"]["ingero"]["push_interval"] = format!("{}ms", (secs * 1e3).round()).into();
        // Quiet: the simulator prints what matters.
        v["service"]["telemetry"]["logs"]["level"] = "warn".into();
        if let Some([grpc, agent, health, telemetry]) = self.auto_ports {
            let e = &self.endpoints;
            v["receivers"]["otlp"]["protocols"]["http"]["endpoint"] = e.otlp_http.clone().into();
            v["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] =
                format!("127.0.0.1:{grpc}").into();
            v["extensions"]["ingero_threshold"]["admin_endpoint"] = e.admin.clone().into();
            v["extensions"]["ingero_threshold"]["agent_endpoint"] =
                format!("127.0.0.1:{agent}").into();
            v["extensions"]["health_check"]["endpoint"] = format!("127.0.0.1:{health}").into();
            v["exporters"]["prometheus"]["endpoint"] = e.exporter.clone().into();
            v["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
                ["port"] = telemetry.into();
        }
        Ok(v)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let v = self.config()?;
        let plan = collector_host::config::Plan::build_with(&v, &ingero_fleet_dist::components())
            .map_err(|errs| {
            anyhow::anyhow!(
                "{}",
                errs.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("fleet".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()?;
                let opts = collector_host::service::RunOptions {
                    drain: Duration::from_millis(200),
                    ..Default::default()
                };
                rt.block_on(collector_host::service::run(plan, opts, async move {
                    let _ = rx.await;
                }))
            })?;
        self.stop = Some(tx);
        self.thread = Some(thread);
        self.wait_ready()
    }

    /// Wait until the OTLP/HTTP and admin listeners accept connections (10 s at most).
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = |a: &str| std::net::TcpStream::connect(a).is_ok();
            if up(&self.endpoints.otlp_http) && up(&self.endpoints.admin) {
                return Ok(());
            }
            if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                let r = self.thread.take().map(|t| t.join());
                return match r {
                    Some(Ok(Err(e))) => Err(e.context("Fleet did not start")),
                    _ => Err(anyhow::anyhow!("Fleet did not start")),
                };
            }
            if Instant::now() > deadline {
                anyhow::bail!("Fleet did not open its listeners within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop the service (graceful drain) and wait for it.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(anyhow::anyhow!("Fleet thread panicked")),
            None => Ok(()),
        }
    }

    /// Stop and start again on the same ports with empty state.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop()?;
        self.launch()
    }
}

impl Drop for EmbeddedFleet {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A plain GET on loopback: `(status, body)`.
pub async fn get(host: &str, path_and_query: &str) -> anyhow::Result<(u16, Bytes)> {
    let mut sender = testkit::push::connect(host).await?;
    let mut req = http::Request::new(Full::new(Bytes::new()));
    *req.uri_mut() = path_and_query.parse()?;
    req.headers_mut()
        .insert(http::header::HOST, http::HeaderValue::from_str(host)?);
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// Named ranks from a Prometheus text page (`ingero_nccl_rank_lag_seconds` and
/// `ingero_nccl_rank_lag_period_steps`, labelled by `rank`).
pub fn named_ranks_from_prometheus(page: &str) -> Vec<NamedRank> {
    let label = |line: &str, key: &str| -> Option<String> {
        let start = line.find(&format!("{key}=\""))? + key.len() + 2;
        let end = line[start..].find('"')? + start;
        Some(line[start..end].to_string())
    };
    let value = |line: &str| line.rsplit(' ').next()?.parse::<f64>().ok();
    let mut lags: HashMap<u32, f64> = HashMap::new();
    let mut periods: HashMap<u32, u32> = HashMap::new();
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some(rank) = label(line, "rank").and_then(|r| r.parse::<u32>().ok()) else {
            continue;
        };
        if line.starts_with("ingero_nccl_rank_lag_seconds{") {
            if let Some(v) = value(line) {
                lags.insert(rank, v * 1e3);
            }
        } else if line.starts_with("ingero_nccl_rank_lag_period_steps{")
            && let Some(v) = value(line).filter(|v| *v >= 1.0)
        {
            periods.insert(rank, v as u32);
        }
    }
    let mut out: Vec<NamedRank> = lags
        .into_iter()
        .map(|(rank, ms)| NamedRank {
            rank,
            median_lag_ms: ms,
            period_steps: periods.get(&rank).copied(),
            chronic: !periods.contains_key(&rank),
        })
        .collect();
    out.sort_by_key(|r| r.rank);
    out
}

/// Options of a live run.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    pub endpoints: Endpoints,
    pub connections: usize,
    pub encoding: Encoding,
    /// End the run early once Fleet flagged every straggler and named every late rank.
    pub stop_when_caught: bool,
    /// End the run (with its report) once this is set, e.g. on Ctrl-C.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// End the run after this long instead of the scenario's duration.
    pub duration: Option<Duration>,
}

/// Push one agent's requests on one connection; the health answer and what it cost.
async fn push_all(
    conn: &mut Connection,
    cluster: &str,
    out: Vec<Outgoing>,
    encoding: Encoding,
) -> (Option<HealthAnswer>, u64, u64) {
    let (mut health, mut pushes, mut errors) = (None, 0u64, 0u64);
    let Some(uri) = conn.target().uri_for(cluster) else {
        return (health, 0, 0);
    };
    for o in out {
        let body = match encoding {
            Encoding::Protobuf => Bytes::from(o.request.encode_to_vec()),
            Encoding::Json => match ingero_agent_core::json::encode(&o.request) {
                Ok(b) => Bytes::from(b),
                Err(_) => continue,
            },
        };
        pushes += 1;
        let a = match conn.push(&uri, body, encoding).await {
            Ok(a) => HealthAnswer {
                ok: a.ok(),
                threshold: a.threshold,
                quorum_met: a.quorum_met,
            },
            Err(_) => HealthAnswer::default(),
        };
        errors += u64::from(!a.ok);
        if o.kind == PushKind::Health {
            health = Some(a);
        }
    }
    (health, pushes, errors)
}

/// Run a scenario against a live Fleet on wall-clock time. `restart` is called at each of
/// the scenario's Fleet restarts (an embedded Fleet restarts; an external one cannot).
pub async fn run_live(
    s: &Scenario,
    opts: &LiveOptions,
    mut restart: impl FnMut() -> anyhow::Result<()>,
    mut on_event: impl FnMut(&Event),
) -> anyhow::Result<Report> {
    let mut world = World::new(s).map_err(anyhow::Error::msg)?;
    let n = world.len();
    let ids = identities(s);
    let index: HashMap<String, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.node_id.clone(), i))
        .collect();
    let core_cfg = core_config(s);
    let mut rec = Recorder::new(s, world.timeline.clone(), "live");
    let mut comm = communicator(s);
    let mut restarts: Vec<Duration> = s.fleet_restarts.iter().map(|r| r.at).collect();
    restarts.sort();
    restarts.reverse();
    let target = Target::parse(&format!("http://{}", opts.endpoints.otlp_http))?;
    let conns = opts.connections.max(1);
    let mut pool: Vec<Option<Connection>> = (0..conns)
        .map(|_| Some(Connection::new(target.clone())))
        .collect();
    let step = s.push_interval / SLOTS;
    let mut by_slot: Vec<Vec<usize>> = vec![Vec::new(); SLOTS as usize];
    for i in 0..n {
        by_slot[i * SLOTS as usize / n.max(1)].push(i);
    }
    let duration = opts.duration.unwrap_or(s.duration);
    let steps = (duration.as_nanos() / step.as_nanos().max(1)) as u64;
    let mut agents: Vec<Option<VirtualAgent>> = (0..n).map(|_| None).collect();
    let diag_path = format!("/api/v1/diagnostics?cluster_id={}", s.cluster_id);
    let start = Instant::now();
    let wall0 = Timestamp::now();

    for k in 1..=steps {
        let t = step * u32::try_from(k)?;
        tokio::time::sleep_until((start + t).into()).await;
        if opts
            .stop
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
        {
            break;
        }
        let now = Timestamp::now();
        if restarts.last().is_some_and(|&r| r <= t) {
            restarts.pop();
            restart()?;
        }
        if let Some(c) = comm.as_mut() {
            let tl = &world.timeline;
            for (node, p) in c.steps_until(t, wall0, |node| !tl.is_down(node, t)) {
                if let Some(a) = agents.get_mut(node).and_then(Option::as_mut) {
                    a.record_nccl(p);
                }
            }
        }
        // This step's agents tick, then push on the pool, a share per connection.
        let mut due: Vec<(usize, Vec<Outgoing>)> = Vec::new();
        for &i in &by_slot[(k % u64::from(SLOTS)) as usize] {
            if world.timeline.is_down(i, t) {
                agents[i] = None;
                continue;
            }
            let (raw, launches) = world.sample(i, t);
            let agent =
                agents[i].get_or_insert_with(|| VirtualAgent::new(ids[i].clone(), core_cfg));
            let (_outcome, out) = agent.tick(raw, launches, now);
            due.push((i, out));
        }
        let mut shares: Vec<Vec<(usize, Vec<Outgoing>)>> = (0..conns).map(|_| Vec::new()).collect();
        for (j, d) in due.into_iter().enumerate() {
            shares[j % conns].push(d);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (c, share) in shares.into_iter().enumerate() {
            if share.is_empty() {
                continue;
            }
            let Some(mut conn) = pool[c].take() else {
                continue;
            };
            let cluster = s.cluster_id.clone();
            let enc = opts.encoding;
            tasks.spawn(async move {
                let mut answers = Vec::with_capacity(share.len());
                for (i, out) in share {
                    let r = push_all(&mut conn, &cluster, out, enc).await;
                    answers.push((i, r));
                }
                (c, conn, answers)
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let (c, conn, answers) = joined?;
            pool[c] = Some(conn);
            for (i, (health, pushes, errors)) in answers {
                rec.count_pushes(pushes, errors, 0);
                if let (Some(a), Some(agent)) = (health, agents[i].as_mut()) {
                    agent.answer(&a, Timestamp::now());
                }
                if let Some(agent) = agents[i].as_ref() {
                    rec.agent_tick(i, t, agent.is_straggler());
                }
            }
        }
        for p in pool.iter_mut() {
            if p.is_none() {
                *p = Some(Connection::new(target.clone()));
            }
        }
        if k % u64::from(SLOTS) == 0 {
            let mut flagged = vec![false; n];
            let mut panic = false;
            if let Ok((200, body)) = get(&opts.endpoints.admin, &diag_path).await
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
            {
                let view = cluster_view_of(&v);
                panic = view.panic;
                rec.quorum(t, view.quorum_met, view.threshold);
                for node in v["diagnostics"]["nodes"].as_array().into_iter().flatten() {
                    let id = node["node_id"].as_str().unwrap_or("");
                    if node["straggler"].as_bool() == Some(true)
                        && let Some(&i) = index.get(id)
                    {
                        flagged[i] = true;
                    }
                }
            }
            rec.fleet_tick(t, &flagged, panic);
            if comm.is_some()
                && let Ok((200, body)) = get(&opts.endpoints.exporter, "/metrics").await
            {
                let page = String::from_utf8_lossy(&body);
                rec.nccl_named(t, &named_ranks_from_prometheus(&page));
            }
        }
        for e in rec.take_events() {
            on_event(&e);
        }
        if opts.stop_when_caught && rec.all_caught() {
            break;
        }
    }
    Ok(rec.finish(start.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn named_ranks_are_read_from_the_telemetry_page() {
        let page = "# HELP ingero_nccl_rank_lag_seconds x\n\
            ingero_nccl_rank_lag_seconds{cluster_id=\"demo\",comm_id_hash=\"00ab\",op_type=\"ncclAllReduce\",rank=\"41\"} 0.0805\n\
            ingero_nccl_rank_lag_seconds{cluster_id=\"demo\",comm_id_hash=\"00ab\",op_type=\"ncclAllReduce\",rank=\"5\"} 0.29\n\
            ingero_nccl_rank_lag_period_steps{cluster_id=\"demo\",comm_id_hash=\"00ab\",op_type=\"ncclAllReduce\",rank=\"5\"} 14\n\
            ingero_nccl_rank_series{cluster_id=\"demo\"} 64\n";
        let r = named_ranks_from_prometheus(page);
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].rank, r[0].period_steps, r[0].chronic),
            (5, Some(14), false)
        );
        assert!((r[1].median_lag_ms - 80.5).abs() < 1e-9);
        assert!(r[1].chronic);
    }
}
