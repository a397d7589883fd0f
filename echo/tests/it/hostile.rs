//! Hostile queries: per-query row, byte and time budgets, queries side by side, shutdown
//! while a query runs.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;

fn with_query(q: Value) -> Opts {
    Opts {
        api: json!({ "query": q }),
        ..Opts::default()
    }
}

async fn tool_at(port: u16, name: &str, args: Value) -> (u16, Value) {
    let r = post(
        port,
        &format!("/api/v1/tools/{name}"),
        "application/json",
        args.to_string().into_bytes(),
        None,
    )
    .await;
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_slice(r.body()).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_refuses_steps_beyond_the_row_budget_and_bounds_its_answer() {
    let e = Echo::start(with_query(json!({"max_rows": 50}))).await;
    seed_cluster(&e, "prod", 4, 1).await;
    // One step per nanosecond over an hour: 3.6e12 buckets per node.
    let (s, v) = e
        .tool(
            "fleet.cluster.history",
            json!({"cluster_id": "prod", "window": "1h", "step": "1ns"}),
            None,
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("step"), "{v}");
    // 60 one-minute steps are within 50 rows per answer only when cut: 4 nodes per bucket.
    let (s, v) = e
        .tool(
            "fleet.cluster.history",
            json!({"cluster_id": "prod", "window": "45m", "step": "1m"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(v["scores"].as_array().unwrap().len() <= 50, "{v}");
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_analysis_builds_no_more_rows_than_it_answers() {
    // Three billion rows would take minutes and gigabytes to materialise; only 11 are built.
    let e = Echo::start(with_query(json!({"max_rows": 10, "timeout": "5s"}))).await;
    let (s, v) = e
        .tool(
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT i FROM range(3000000000) t(i)"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 10, "{v}");
    assert_eq!(v["truncated"], true);
    // A trailing semicolon and comment-free CTEs still run.
    let rows = e
        .sql("WITH x AS (SELECT 41 AS a) SELECT a + 1 FROM x;")
        .await;
    assert_eq!(rows, vec![vec![json!(42)]]);
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_stop_at_the_byte_budget() {
    let e = Echo::start(with_query(json!({"max_result_bytes": 100_000}))).await;
    let (s, v) = e
        .tool(
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT repeat('x', 10000) FROM range(100)"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let n = v["rows"].as_array().unwrap().len();
    assert!(n < 10, "{n} rows of 10 kB under a 100 kB budget");
    assert_eq!(v["truncated"], true);
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_table_functions_and_zero_limits_are_refused() {
    let e = Echo::start(Opts::default()).await;
    seed_cluster(&e, "prod", 2, 1).await;
    for sql in [
        "SELECT * FROM checkpoint()",
        "SELECT * FROM force_checkpoint()",
        "SELECT * FROM \"CHECKPOINT\" ( )",
    ] {
        let (s, v) = e
            .tool("fleet.cluster.run_analysis", json!({"sql": sql}), None)
            .await;
        assert_eq!(s, 400, "{sql}: {v}");
    }
    let (s, v) = e
        .tool(
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT 1", "max_rows": 0}),
            None,
        )
        .await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = e
        .tool(
            "fleet.cluster.event_history",
            json!({"cluster_id": "prod", "limit": 0}),
            None,
        )
        .await;
    assert_eq!(s, 400, "{v}");
    e.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_query_is_answered_at_its_limit_and_queues_no_other_client() {
    let e = Echo::start(with_query(json!({"timeout": "1s"}))).await;
    let api = e.api;
    // One scalar call of a billion steps (within the SQL check's 64 KiB of generated
    // text), which DuckDB also runs while preparing the statement (constant folding):
    // seconds of work no interrupt reaches.
    let slow = tokio::spawn(async move {
        tool_at(
            api,
            "fleet.cluster.run_analysis",
            json!({"sql": "SELECT levenshtein(repeat('a', 32000), repeat('b', 32000))"}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = tool_at(
        api,
        "fleet.cluster.run_analysis",
        json!({"sql": "SELECT 42"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert!(
        !slow.is_finished(),
        "the slow query answered before the quick one"
    );
    // Answered at its 1 s limit (plus the interrupt's grace), not when the work ends: a
    // hang detector with a wide margin, not a speed check.
    let (s, v) = tokio::time::timeout(Duration::from_secs(8), slow)
        .await
        .expect("the slow query was not answered at its time limit")
        .unwrap();
    assert_eq!(s, 408, "{v}");
    e.stop().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_echo_while_a_long_query_runs() {
    let dir = temp_dir("sigterm");
    let [http, grpc, api] = free_ports::<3>();
    let o = with_query(json!({"timeout": "1h"}));
    let cfg = config(&o, &dir, http, grpc, api);
    let path = dir.join("echo.yaml");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ingero-echo"))
        .arg("--config")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..3000 {
        // The receiver binds after the store opened.
        if tokio::net::TcpStream::connect(("127.0.0.1", http))
            .await
            .is_ok()
            && tokio::net::TcpStream::connect(("127.0.0.1", api))
                .await
                .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(up, "ingero-echo did not start");
    // Hours of work: only an interrupt ends it.
    let long = tokio::spawn(async move {
        let r = tokio::time::timeout(
            Duration::from_secs(120),
            request(
                api,
                http::Method::POST,
                "/api/v1/tools/fleet.cluster.run_analysis",
                "application/json",
                json!({"sql": "SELECT sum(i) FROM range(1000000000000) t(i)"})
                    .to_string()
                    .into_bytes(),
                None,
                None,
            ),
        )
        .await;
        r.map(|r| (r.status(), String::from_utf8_lossy(r.body()).into_owned()))
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    if long.is_finished() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the long query ended by itself: {:?}", long.await);
    }
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut exited = None;
    for _ in 0..600 {
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    long.abort();
    let status = exited.expect("ingero-echo still running 60 s after SIGTERM");
    assert!(status.success(), "{status}");
}

/// The child's peak resident memory (`VmHWM`) in MiB.
#[cfg(target_os = "linux")]
fn peak_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb / 1024
}

/// Queries that build huge values outside DuckDB's `memory_limit` (one huge string, a
/// million-byte string per row, a geometric fold) are refused before they run, and those
/// that grow across vectors stop at DuckDB's limit; the process's peak stays far below the
/// gigabytes they reached unchecked. Echo runs as its own process so its peak is its own.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_query_grows_the_process_past_its_memory_budget() {
    let dir = temp_dir("memory");
    let [http, grpc, api] = free_ports::<3>();
    let o = Opts {
        store: json!({"memory_limit": "128MB"}),
        api: json!({"query": {"timeout": "120s"}}),
        ..Opts::default()
    };
    let path = dir.join("echo.yaml");
    std::fs::write(&path, config(&o, &dir, http, grpc, api).to_string()).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ingero-echo"))
        .arg("--config")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..3000 {
        if tokio::net::TcpStream::connect(("127.0.0.1", http))
            .await
            .is_ok()
            && tokio::net::TcpStream::connect(("127.0.0.1", api))
                .await
                .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(up, "ingero-echo did not start");
    let pid = child.id();
    let sql = |q: &str| {
        let body = json!({"sql": q}).to_string().into_bytes();
        async move {
            let r = tokio::time::timeout(
                Duration::from_secs(150),
                tool_at(
                    api,
                    "fleet.cluster.run_analysis",
                    serde_json::from_slice(&body).unwrap(),
                ),
            )
            .await
            .expect("no answer within 150 s");
            (r.0, r.1, peak_mib(pid))
        }
    };
    let mut failures = Vec::new();
    // One scalar of 3 GB, one of 1 MB per row over 10,000 rows, a geometric fold: refused
    // before anything runs.
    for (q, names) in [
        ("SELECT length(repeat('x', 3000000000))", "repeat"),
        ("SELECT repeat('x', 1000000) FROM range(10000)", "repeat"),
        (
            "SELECT length(list_reduce(range(40), (a, x) -> a || a))",
            "list_reduce",
        ),
        ("SELECT length(lpad('', 2000000000, 'x'))", "lpad"),
        ("SELECT len(range(3000000000))", "range"),
        ("SELECT length(printf('%0900000000d', 1))", "printf"),
        (
            "SELECT length(string_agg(repeat('x', 100), ',') OVER (ORDER BY i)) FROM range(100000) t(i)",
            "string_agg",
        ),
    ] {
        let (s, v, peak) = sql(q).await;
        if s != 400 || !v["error"].as_str().unwrap_or("").contains(names) {
            failures.push(format!("{q}: {s} {v} (peak {peak} MiB)"));
        }
    }
    // Growing across vectors (3 GB of string_agg, a string doubled 40 times): DuckDB's
    // own limit stops them.
    for q in [
        "SELECT length(string_agg(repeat('x', 1000), ',')) FROM range(3000000)",
        "WITH RECURSIVE t(s, n) AS (SELECT 'x', 0 UNION ALL SELECT s || s, n + 1 FROM t WHERE n < 40) \
         SELECT max(length(s)) FROM t",
    ] {
        let (s, v, peak) = sql(q).await;
        if s != 422 || !v["error"].as_str().unwrap_or("").contains("Out of Memory") {
            failures.push(format!("{q}: {s} {v} (peak {peak} MiB)"));
        }
    }
    // What stays allowed, and the process answers normally afterwards.
    let (s, v, _) = sql(
        "SELECT lpad('7', 3, '0') AS a, repeat('ab', 3) AS b, printf('%05d', 42) AS c, \
         len(range(10)) AS d, string_agg(i::VARCHAR, ',') AS e FROM range(3) t(i)",
    )
    .await;
    if s != 200 || v["rows"] != json!([["007", "ababab", "00042", 10, "0,1,2"]]) {
        failures.push(format!("allowed query: {s} {v}"));
    }
    let peak = peak_mib(pid);
    let _ = child.kill();
    let _ = child.wait();
    assert!(failures.is_empty(), "{failures:#?}");
    // The budget plus what one vector builds: far below the gigabytes unchecked.
    assert!(peak < 1024, "peak resident memory {peak} MiB");
}
