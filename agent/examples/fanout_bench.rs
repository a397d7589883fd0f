//! Fan-out latency (numbers in docs/benchmarks.md): N query APIs in this process, each on
//! its own loopback address (127.0.x.y), TLS 1.3 with mTLS, all over one store of 20,000
//! events; one fan-out of a SQL aggregate to all of them (with the clock samples beside
//! it, as the CLI does), repeated.
//!
//! `cargo run --release -p ingero-agent --example fanout_bench -- [agents...]`
//! (default: 50 500; 7 rounds each, the first a warm-up that opens the connections).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ingero_agent::api::{ApiConfig, ApiServer, ServeOptions};
use ingero_agent::fanout::{FanoutClient, FanoutConfig, actions};
use ingero_agent::store::schema::{op, source};
use ingero_agent::store::{EventRow, Store, StoreOptions};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

const ROUNDS: usize = 7;

fn write_store(path: &Path) {
    let now = i64::try_from(component::Timestamp::now().as_nanos()).unwrap();
    let mut o = StoreOptions::new(path, "bench-node");
    o.queue = 1 << 16;
    let st = Store::start(o).unwrap();
    let sink = st.sink();
    for i in 0..20_000i64 {
        sink.event(EventRow {
            timestamp: now - 60_000_000_000 + i * 2_000_000,
            pid: 4242,
            tid: 4242,
            source: source::CUDA,
            op: op::CUDA_STREAM_SYNC,
            duration: 2_000_000 + (i % 13) * 1000,
            comm: "train".into(),
            ..Default::default()
        });
    }
    st.close();
}

fn ip(i: usize) -> String {
    format!("127.0.{}.{}", 1 + i / 250, 1 + i % 250)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let counts: Vec<usize> = {
        let a: Vec<usize> = std::env::args()
            .skip(1)
            .map(|a| a.parse().expect("agent count"))
            .collect();
        if a.is_empty() { vec![50, 500] } else { a }
    };
    let max = counts.iter().copied().max().unwrap();
    let dir = std::env::temp_dir().join(format!("ingero-fanout-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("bench.db");
    write_store(&db);

    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, "bench CA");
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let leaf = |sans: Vec<String>| {
        let k = KeyPair::generate().unwrap();
        let c = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&k, &ca)
            .unwrap();
        (c.pem(), k.serialize_pem())
    };
    let (spem, skey) = leaf((0..max).map(ip).collect());
    let (cpem, ckey) = leaf(vec![]);
    let w = |n: &str, t: &str, private: bool| {
        let p = dir.join(n);
        std::fs::write(&p, t).unwrap();
        if private {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        p
    };
    let ca_path = w("ca.pem", &ca.pem(), false);
    let (sc, sk) = (w("s.pem", &spem, false), w("s.key", &skey, true));
    let (cc, ck) = (w("c.pem", &cpem, false), w("c.key", &ckey, true));

    let (_tx, rx) = tokio::sync::watch::channel(false);
    let mut nodes = Vec::new();
    for i in 0..max {
        let s = ApiServer::bind(ServeOptions {
            config: ApiConfig {
                enabled: true,
                listen: format!("{}:0", ip(i)),
                tls_cert: Some(sc.clone()),
                tls_key: Some(sk.clone()),
                client_ca: Some(ca_path.clone()),
                generated_cert_path: Default::default(),
                ..Default::default()
            },
            db: db.clone(),
            node: format!("node-{i}"),
            clock_offset_ns: 0,
        })
        .await
        .unwrap();
        nodes.push(s.local_addr.to_string());
        tokio::spawn(s.run(rx.clone()));
    }
    let sql = "SELECT count(*) AS n, avg(duration) AS avg_ns FROM events";
    println!(
        "agents  rounds  first (connect)  median  max   (ms, fan-out of `{sql}` with 3 clock samples per node)"
    );
    for &n in &counts {
        // A fresh client per size: the first round opens every connection.
        let c = FanoutClient::new(&FanoutConfig {
            ca_cert: Some(ca_path.clone()),
            client_cert: Some(cc.clone()),
            client_key: Some(ck.clone()),
            timeout: Duration::from_secs(30),
            ..Default::default()
        })
        .unwrap();
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let (table, _, o) =
                actions::sql(&c, &nodes[..n], sql, None, None, Duration::from_secs(1))
                    .await
                    .unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(table.rows.len(), n, "{}", o.notes());
        }
        let first = times[0];
        let mut rest = times[1..].to_vec();
        rest.sort_by(f64::total_cmp);
        println!(
            "{n:>6}  {:>6}  {first:>15.1}  {:>6.1}  {:>5.1}",
            ROUNDS - 1,
            rest[rest.len() / 2],
            rest[rest.len() - 1]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
