//! "Why is this node slow" beyond CPU and disk, end to end (root only; skips otherwise): the
//! agent binary records the fake CUDA training loop (`tests/c/why_workload.c`) and its host
//! layers into its store, and `ingero-agent explain` reads the store.
//!
//! - `a_thermally_throttled_gpu_is_named`: the fake NVML (`tests/c/fake_nvml.c`) reports
//!   GPU 1 thermally throttled (clock reason, lower SM clock, higher temperature) while the
//!   fake GPU's synchronize slows down: explain names thermal throttling and nothing else. An
//!   XID reported well before the slowdown is recorded and not blamed.
//! - `tcp_retransmits_are_named`: the loop exchanges 8 KiB per step over TCP on loopback in
//!   its own network namespace; an iptables rule then drops 6 % of the packets: the
//!   `tcp_retransmit_skb` tracepoint's retransmits are stored for the process and explain
//!   names them.
//! - `reclaim_stalls_and_an_oom_kill_are_recorded`: a writer in a memory cgroup smaller than
//!   the file it writes through the page cache stalls in reclaim (the
//!   `mm_vmscan_*_reclaim_*` tracepoints); a process allocating past its cgroup's limit is
//!   OOM-killed (`oom/mark_victim`): both are stored for the watched processes, with no drop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::native;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use native::{TempDir, build_why_workload, is_root, pinned_cpu, pinned_cpu_lock, query};

const BIN: &str = env!("CARGO_BIN_EXE_ingero-agent");

const CLEAN_S: u64 = 5;
const DISTURBED_S: u64 = 6;

/// Spawn and wait for its "started" line.
fn spawn_started(mut cmd: Command) -> Child {
    let mut c = cmd.stdout(Stdio::piped()).spawn().unwrap();
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "started");
    c
}

struct Agent {
    child: Child,
    log: PathBuf,
}

fn start_agent(dir: &Path, node: &str, db: &Path, pids: &[u32], env: &[(&str, &Path)]) -> Agent {
    let log = dir.join(format!("agent-{node}.log"));
    let mut cmd = Command::new(BIN);
    cmd.args(["--store", "--store-path"])
        .arg(db)
        .args(["--node", node]);
    for p in pids {
        cmd.args(["--pid", &p.to_string()]);
    }
    cmd.arg("--probe-library-root")
        .arg(dir)
        .args([
            "--no-nccl",
            "--libnccl-discovery-interval",
            "1s",
            "--fleet-provider",
            "none",
            "--fleet-persist-path",
        ])
        .arg(dir.join(format!("baseline-{node}.json")))
        .env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let agent = Agent { child, log };
    // The host layer is recording once its tracepoints are attached.
    let start = Instant::now();
    while !agent.log_text().contains("host tracepoints attached") {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "host tracepoints not attached\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    agent
}

impl Agent {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, wait for the exit, return the log.
    fn stop(mut self) -> String {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let status = self.child.wait().unwrap();
        let log = self.log_text();
        assert!(status.success(), "agent exit {status:?}\n{log}");
        // Nothing was lost between the kernel, the probes and the store.
        for want in [
            "dropped_queue_full=0",
            "dropped_write_error=0",
            "net_procs_full=0",
            "mem_procs_full=0",
            "reclaim_threads_full=0",
            "oom_ringbuf_full=0",
        ] {
            assert!(log.contains(want), "{want}\n{log}");
        }
        log
    }
}

fn wait_for_events(db: &Path, agent: &Agent) {
    let start = Instant::now();
    loop {
        let out = Command::new(BIN)
            .args(["query", "--json", "--db"])
            .arg(db)
            .arg("SELECT count(*) AS n FROM events WHERE source IN (1, 4)")
            .output()
            .unwrap();
        let n = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v[0]["n"].as_i64())
            .unwrap_or(0);
        if out.status.success() && n >= 50 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no events stored\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// explain's JSON and its text.
fn explain(db: &Path) -> (serde_json::Value, String) {
    let run = |json: bool| {
        let mut c = Command::new(BIN);
        c.args(["explain", "--since", "10m", "--db"]).arg(db);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let v = serde_json::from_slice(&run(true)).unwrap();
    (v, String::from_utf8_lossy(&run(false)).into_owned())
}

fn causes(r: &serde_json::Value) -> Vec<String> {
    r["chains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["causes"].as_array().unwrap().clone())
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

fn stop_child(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn a_thermally_throttled_gpu_is_named() {
    let _pinned = pinned_cpu_lock();
    if !is_root() {
        eprintln!("SKIP a_thermally_throttled_gpu_is_named: uprobes need root");
        return;
    }
    let dir = TempDir::new("why-gpu");
    let fakes = native::build_fakes(dir.path());
    let workload = build_why_workload(dir.path(), &fakes);
    let nvml_dir = native::build_fake_nvml(dir.path());
    // One control directory for the fake GPU: NVML's readings and the runtime's speed.
    let ctl = dir.path().join("gpu-ctl");
    std::fs::create_dir_all(&ctl).unwrap();
    let total = (30 + CLEAN_S + DISTURBED_S).to_string();
    let mut cmd = Command::new(&workload);
    cmd.args(["train", pinned_cpu(), &total, "3000"])
        .env("FAKE_GPU_CTL", &ctl);
    let work = spawn_started(cmd);
    let db = dir.path().join("gpu.db");
    let agent = start_agent(
        dir.path(),
        "gpu-node",
        &db,
        &[work.id()],
        &[("LD_LIBRARY_PATH", &nvml_dir), ("FAKE_NVML_CTL", &ctl)],
    );
    wait_for_events(&db, &agent);
    // An XID early on: recorded, but seconds before the slowdown, so not its cause.
    std::fs::write(ctl.join("xid"), "13").unwrap();
    std::thread::sleep(Duration::from_secs(CLEAN_S));
    // GPU 1 overheats: the thermal clock reasons, a lower SM clock; the GPU's work slows.
    std::fs::write(ctl.join("temp_c"), "93").unwrap();
    std::fs::write(ctl.join("sm_clock"), "1100").unwrap();
    std::fs::write(ctl.join("reasons"), "96").unwrap(); // SW + HW thermal slowdown
    std::fs::write(ctl.join("sync_us"), "12000").unwrap();
    std::thread::sleep(Duration::from_secs(DISTURBED_S));
    let _log = agent.stop();
    stop_child(work);

    let rows = query(
        &db,
        "SELECT gpu_id, max(arg0) AS reasons FROM events WHERE source = 50 AND op = 1 GROUP BY gpu_id ORDER BY gpu_id",
    );
    assert_eq!(rows[0]["reasons"], 0, "{rows}");
    assert_eq!(rows[1]["reasons"], 96, "{rows}");
    let xid = query(
        &db,
        "SELECT gpu_id, arg0 FROM events WHERE source = 50 AND op = 6",
    );
    assert_eq!(xid.as_array().unwrap().len(), 1, "{xid}");
    assert_eq!(
        (xid[0]["gpu_id"].as_i64(), xid[0]["arg0"].as_i64()),
        (Some(1), Some(13))
    );

    let (r, text) = explain(&db);
    eprintln!("{text}");
    assert_eq!(r["chains"].as_array().unwrap().len(), 1, "{text}");
    assert_eq!(causes(&r), vec!["gpu_thermal_throttle"], "{text}");
    assert!(text.contains("GPU 1 thermally throttled"), "{text}");
}

/// A network namespace, deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Option<Self> {
        let name = format!("ingero-why-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return None;
        }
        let ns = Netns(name);
        ns.exec(&["ip", "link", "set", "lo", "up"]).then_some(ns)
    }

    fn exec(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn tcp_retransmits_are_named() {
    let _pinned = pinned_cpu_lock();
    if !is_root() {
        eprintln!("SKIP tcp_retransmits_are_named: tracepoints and uprobes need root");
        return;
    }
    let Some(ns) = Netns::new() else {
        eprintln!("SKIP tcp_retransmits_are_named: cannot create a network namespace (ip netns)");
        return;
    };
    let dir = TempDir::new("why-net");
    let fakes = native::build_fakes(dir.path());
    let workload = build_why_workload(dir.path(), &fakes);
    let total = (30 + CLEAN_S + DISTURBED_S).to_string();
    // `ip netns exec` and `env` exec the workload: the child's pid is the workload's.
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.0, "env", "WHY_NET=1"])
        .arg(&workload)
        .args(["train", pinned_cpu(), &total, "3000"]);
    let work = spawn_started(cmd);
    let db = dir.path().join("net.db");
    let agent = start_agent(dir.path(), "net-node", &db, &[work.id()], &[]);
    wait_for_events(&db, &agent);
    std::thread::sleep(Duration::from_secs(CLEAN_S));
    // A lossy path: 6 % of the namespace's TCP packets dropped.
    assert!(
        ns.exec(&[
            "iptables",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.06",
            "-j",
            "DROP",
        ]),
        "iptables rule"
    );
    std::thread::sleep(Duration::from_secs(DISTURBED_S));
    agent.stop();
    stop_child(work);

    let tcp = query(
        &db,
        "SELECT sum(count) AS n, count(DISTINCT pid) AS pids, min(pid) AS pid FROM event_aggregates WHERE source = 6 AND op = 1",
    );
    assert!(tcp[0]["n"].as_i64().unwrap_or(0) >= 5, "{tcp}");
    assert_eq!(tcp[0]["pids"], 1, "{tcp}");
    let (r, text) = explain(&db);
    // Per second: synchronizes and retransmits (what explain compared), for a failure.
    let per_s = query(
        &db,
        "SELECT s, sum(calls) AS calls, sum(retrans) AS retrans FROM (
           SELECT timestamp / 1000000000 AS s, 1 AS calls, 0 AS retrans FROM events WHERE source = 1 AND op = 5
           UNION ALL SELECT bucket / 1000000000, 0, count FROM event_aggregates WHERE source = 6)
         GROUP BY s ORDER BY s",
    );
    let text = format!("{text}\nper second: {per_s}");
    eprintln!("{text}");
    assert_eq!(r["chains"].as_array().unwrap().len(), 1, "{text}");
    assert!(
        causes(&r).contains(&"tcp_retransmits".to_string()),
        "{text}"
    );
    assert!(!causes(&r).contains(&"block_io".to_string()), "{text}");
}

/// A memory cgroup with a limit (cgroup v1's memory controller, or v2's), removed on drop.
struct MemCgroup(PathBuf);

impl MemCgroup {
    fn new(tag: &str, limit_mb: u64) -> Option<Self> {
        let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"));
        let (root, file) = if v2 {
            ("/sys/fs/cgroup", "memory.max")
        } else if Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        } else {
            return None;
        };
        let p = Path::new(root).join(format!("ingero-why-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&p);
        std::fs::create_dir(&p).ok()?;
        let cg = MemCgroup(p);
        std::fs::write(cg.0.join(file), (limit_mb << 20).to_string()).ok()?;
        Some(cg)
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // The processes have exited; the directory is empty of tasks.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn reclaim_stalls_and_an_oom_kill_are_recorded() {
    let _pinned = pinned_cpu_lock();
    if !is_root() {
        eprintln!("SKIP reclaim_stalls_and_an_oom_kill_are_recorded: tracepoints need root");
        return;
    }
    let (Some(small), Some(tiny)) = (MemCgroup::new("cache", 48), MemCgroup::new("oom", 32)) else {
        eprintln!("SKIP reclaim_stalls_and_an_oom_kill_are_recorded: no memory cgroup controller");
        return;
    };
    let dir = TempDir::new("why-mem");
    let fakes = native::build_fakes(dir.path());
    let workload = build_why_workload(dir.path(), &fakes);
    let file = dir.path().join("cache.bin");
    let mut cmd = Command::new(&workload);
    cmd.args(["cache", file.to_str().unwrap(), "160", "4"]);
    let writer = spawn_started(cmd);
    small.add(writer.id());
    let mut cmd = Command::new(&workload);
    cmd.args(["oom", "512"]).current_dir(dir.path());
    let mut victim = spawn_started(cmd);
    tiny.add(victim.id());
    let (writer_pid, victim_pid) = (writer.id(), victim.id());

    let db = dir.path().join("mem.db");
    let agent = start_agent(dir.path(), "mem-node", &db, &[writer_pid, victim_pid], &[]);
    std::fs::write(dir.path().join("cache.bin.go"), b"").unwrap();
    std::fs::write(dir.path().join("oom.go"), b"").unwrap();
    let status = victim.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let mut writer = writer;
    let st = writer.wait().unwrap();
    assert!(st.success(), "{st:?}");
    // One more drain of the host layer.
    std::thread::sleep(Duration::from_millis(2500));
    let log = agent.stop();
    assert!(log.contains("OOM kill"), "{log}");

    let oom = query(
        &db,
        "SELECT pid, comm, arg0 FROM events WHERE source = 3 AND op = 4",
    );
    let oom = oom.as_array().unwrap();
    assert_eq!(oom.len(), 1, "{oom:?}");
    assert_eq!(oom[0]["pid"].as_i64(), Some(i64::from(victim_pid)));
    assert_eq!(oom[0]["comm"], "why_workload");
    assert!(oom[0]["arg0"].as_i64().unwrap() >= 16 << 20, "{oom:?}");

    let rec = query(
        &db,
        &format!(
            "SELECT sum(count) AS stalls, sum(sum_dur) AS ns, sum(sum_arg0) AS pages FROM event_aggregates
             WHERE source = 3 AND op = 50 AND pid = {writer_pid}"
        ),
    );
    assert!(rec[0]["stalls"].as_i64().unwrap_or(0) > 0, "{rec}");
    assert!(rec[0]["ns"].as_i64().unwrap_or(0) > 0, "{rec}");
    assert!(rec[0]["pages"].as_i64().unwrap_or(0) > 0, "{rec}");
}
