//! Multi-replica Fleet behind a real nginx (`examples/nginx/ingero-fleet-replicas.conf`):
//! consistent hashing on `cluster_id` pins each cluster to one replica; when a replica is
//! killed, its clusters move to the survivor, which rebuilds them from the next pushes. The
//! test measures how long until every cluster's agents get valid thresholds again, and
//! checks that clusters on the surviving replica never lose theirs.
//!
//! nginx reaches the replicas over TLS, as the example file says: each replica serves its
//! OTLP/HTTP and threshold listeners with a certificate for its name and requires a client
//! certificate of the test CA, which nginx shows.
//!
//! Needs `nginx` on PATH or in /usr/sbin (Debian package `nginx`; `scripts/test-all.sh`
//! installs it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;
use crate::tls_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use testkit::AgentPush;
use tls_support::*;

const CLUSTERS: usize = 16;
const NODES: usize = 5;

fn nginx_bin() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("nginx is required for this test (Debian package nginx; scripts/test-all.sh installs it)")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Nginx {
    child: Child,
    dir: PathBuf,
    otlp: SocketAddr,
    threshold: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers before exiting (SIGKILL would orphan them).
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The test's PKI: one CA, a server certificate per replica (its name in the example file,
/// and 127.0.0.1), nginx's client certificate, and the test's own (for asking replicas
/// directly).
struct Certs {
    pki: Pki,
    test_client: Leaf,
}

fn certs() -> Certs {
    let pki = Pki::new("replicas-tls");
    for i in 0..2u64 {
        let name = format!("fleet-{i}.fleet");
        let l = leaf(
            &pki.ca,
            &[&name, "127.0.0.1"],
            300 + i,
            false,
            Validity::Current,
        );
        write_private(&pki.path(&format!("fleet-{i}.pem")), &l.cert_pem);
        write_private(&pki.path(&format!("fleet-{i}.key")), &l.key_pem);
    }
    let nginx = leaf(&pki.ca, &["nginx"], 310, true, Validity::Current);
    write_private(&pki.path("nginx.pem"), &nginx.cert_pem);
    write_private(&pki.path("nginx.key"), &nginx.key_pem);
    let test_client = leaf(&pki.ca, &["test"], 311, true, Validity::Current);
    Certs { pki, test_client }
}

/// Replica `i`'s config: `test_config` with its OTLP/HTTP and threshold listeners on TLS,
/// requiring client certificates of the test CA.
fn replica_config(certs: &Certs, i: usize, push_interval: &str) -> String {
    let p = &certs.pki;
    let tls = format!(
        "{{cert_file: {}, key_file: {}, client_ca_file: {}}}",
        p.p(&format!("fleet-{i}.pem")),
        p.p(&format!("fleet-{i}.key")),
        p.p("ca.pem")
    );
    // Nodes stay for 10 intervals: on a loaded machine one round of 80 pushes through nginx
    // (a debug build, TLS on both hops) can take longer than the default 3, and a survivor's
    // nodes would expire between rounds for reasons that have nothing to do with failover.
    let cfg = test_config(push_interval, &[]).replace("ttl_multiplier: 3", "ttl_multiplier: 10");
    let http = "      http:\n        endpoint: 127.0.0.1:0\n";
    let admin = "    admin_endpoint: 127.0.0.1:0\n";
    assert!(cfg.contains(http) && cfg.contains(admin));
    cfg.replace(http, &format!("{http}        tls: {tls}\n"))
        .replace(admin, &format!("{admin}    tls: {tls}\n"))
}

/// nginx running the example file, with the example's replica addresses replaced by the
/// test replicas', its certificate paths by the test's and its listen ports by free
/// loopback ports.
fn start_nginx(replicas: &[&Fleet], certs: &Certs) -> Nginx {
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nginx/ingero-fleet-replicas.conf");
    let mut conf = std::fs::read_to_string(&example).unwrap();
    for (i, f) in replicas.iter().enumerate() {
        let otlp = format!("server fleet-{i}.fleet:4318;");
        let api = format!("server fleet-{i}.fleet:8080;");
        assert!(
            conf.contains(&otlp) && conf.contains(&api),
            "example names {otlp} and {api}"
        );
        conf = conf
            .replace(&otlp, &format!("server {};", f.http()))
            .replace(&api, &format!("server {};", f.agent_api()));
    }
    assert!(
        conf.contains("proxy_pass https://ingero_fleet_0_otlp;"),
        "the example proxies over TLS"
    );
    for (path, ours) in [
        ("/etc/nginx/ingero-tls/ca.crt", "ca.pem"),
        ("/etc/nginx/ingero-tls/nginx-client.crt", "nginx.pem"),
        ("/etc/nginx/ingero-tls/nginx-client.key", "nginx.key"),
    ] {
        assert!(conf.contains(path), "example names {path}");
        conf = conf.replace(path, &certs.pki.p(ours));
    }
    let otlp = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let threshold = SocketAddr::from(([127, 0, 0, 1], free_port()));
    assert!(conf.contains("listen 4318;") && conf.contains("listen 8080;"));
    let dir = std::env::temp_dir().join(format!("fleet-nginx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    assert!(conf.contains("unix:/run/nginx/"));
    conf = conf
        .replace("listen 4318;", &format!("listen {otlp};"))
        .replace("listen 8080;", &format!("listen {threshold};"))
        .replace("unix:/run/nginx/", &format!("unix:{}/", dir.display()));
    // Workers may run as an unprivileged user: let them use the temp directories.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(dir.join("replicas.conf"), conf).unwrap();
    let d = dir.display();
    let main = format!(
        "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
         include {d}/replicas.conf;\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), main).unwrap();
    let conf_path = dir.join("nginx.conf");
    let check = Command::new(nginx_bin())
        .args(["-t", "-p"])
        .arg(&dir)
        .arg("-c")
        .arg(&conf_path)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "nginx -t: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let child = Command::new(nginx_bin())
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf_path)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ng = Nginx {
        child,
        dir,
        otlp,
        threshold,
    };
    wait_for(Duration::from_secs(10), || {
        std::net::TcpStream::connect(ng.otlp).ok()
    })
    .expect("nginx listens");
    ng
}

/// A threshold header pair an agent accepts: a value in [0.1, 0.99] with quorum.
fn valid_thresholds(r: &Resp) -> bool {
    let t = r
        .header("X-Ingero-Threshold")
        .and_then(|v| v.parse::<f64>().ok());
    r.status == 200
        && matches!(t, Some(t) if (0.1..=0.99).contains(&t))
        && r.header("X-Ingero-Quorum-Met") == Some("true")
}

fn cluster(c: usize) -> String {
    format!("train-{c:02}")
}

/// One push from every node of every cluster through nginx; per cluster, whether every
/// node's response carried valid thresholds, and how many responses were not 200.
fn push_round(ng: &Nginx, round: usize) -> (BTreeMap<String, bool>, usize) {
    let mut valid = BTreeMap::new();
    let mut failed = 0;
    for c in 0..CLUSTERS {
        let id = cluster(c);
        let mut all = true;
        for n in 0..NODES {
            // Healthy noise around 0.93; one node in each cluster slightly low.
            let score = 0.93 + 0.004 * ((n + round) % 3) as f64 - if n == 0 { 0.01 } else { 0.0 };
            let body = AgentPush::new(&id, &format!("{id}-node-{n}"), score).to_json();
            let r = push_json(ng.otlp, &id, &body);
            if r.status != 200 {
                failed += 1;
            }
            all &= valid_thresholds(&r);
        }
        valid.insert(id, all);
    }
    (valid, failed)
}

/// Which replica computed a threshold for the cluster (asked directly over TLS, past
/// nginx).
fn owners(replicas: &[&Fleet], certs: &Certs, id: &str) -> Vec<usize> {
    let cfg = client_config(&certs.pki.ca.pem, Some(&certs.test_client), &[], false);
    replicas
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            let req = get_req(f.agent_api(), &format!("/api/v1/threshold?cluster_id={id}"));
            let x = https(f.agent_api(), "127.0.0.1", cfg.clone(), &req)
                .unwrap_or_else(|e| panic!("GET threshold of {id} from the replica: {e}"));
            x.resp.json()["quorum_met"] == true
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn killing_a_replica_moves_its_clusters_and_they_get_thresholds_again() {
    let interval = std::env::var("FLEET_REPLICA_PUSH_INTERVAL").unwrap_or_else(|_| "1s".into());
    let push_every = component::config::parse_duration(&interval).unwrap();
    let certs = certs();
    let a = Fleet::start_with(&replica_config(&certs, 0, &interval), &[]);
    let b = Fleet::start_with(&replica_config(&certs, 1, &interval), &[]);
    let ng = start_nginx(&[&a, &b], &certs);

    // Warm-up: agents push every interval until every cluster gets valid thresholds.
    let mut round = 0;
    let warm = wait_for(Duration::from_secs(60), || {
        let started = Instant::now();
        let (valid, failed) = push_round(&ng, round);
        round += 1;
        assert_eq!(failed, 0, "pushes through nginx failed before any fault");
        std::thread::sleep(push_every.saturating_sub(started.elapsed()));
        valid.values().all(|v| *v).then_some(())
    });
    assert!(
        warm.is_some(),
        "every cluster gets a threshold through nginx"
    );

    // Consistent hashing: each cluster lives on exactly one replica, and the GET through
    // nginx reaches the replica that owns it.
    let mut on: [BTreeSet<String>; 2] = [BTreeSet::new(), BTreeSet::new()];
    for c in 0..CLUSTERS {
        let id = cluster(c);
        let o = owners(&[&a, &b], &certs, &id);
        assert_eq!(o.len(), 1, "{id} owned by replicas {o:?}");
        on[o[0]].insert(id.clone());
        let g = get(ng.threshold, &format!("/api/v1/threshold?cluster_id={id}"));
        assert_eq!(g.json()["quorum_met"], true, "{id} via nginx: {}", g.text());
    }
    assert!(
        !on[0].is_empty() && !on[1].is_empty(),
        "both replicas serve clusters: {on:?}"
    );

    // Kill replica a (SIGKILL: no drain, state lost).
    let mut a = a;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();

    let mut recovered: BTreeMap<String, Duration> = BTreeMap::new();
    let mut failed_pushes = 0;
    let mut rounds_after = 0;
    while recovered.len() < on[0].len() {
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "clusters of the killed replica never recovered: {:?} of {:?}",
            recovered.keys().collect::<Vec<_>>(),
            on[0]
        );
        let started = Instant::now();
        let (valid, failed) = push_round(&ng, round);
        round += 1;
        rounds_after += 1;
        failed_pushes += failed;
        for id in &on[1] {
            assert!(
                valid[id],
                "{id} lives on the surviving replica and lost its thresholds (round {rounds_after} after the kill)"
            );
        }
        for id in &on[0] {
            if valid[id] && !recovered.contains_key(id) {
                recovered.insert(id.clone(), killed.elapsed());
            }
        }
        std::thread::sleep(push_every.saturating_sub(started.elapsed()));
    }
    // The moved clusters now live on the survivor, and the GET through nginx agrees.
    for id in &on[0] {
        assert_eq!(
            owners(&[&b], &certs, id),
            vec![0],
            "{id} rebuilt on the survivor"
        );
        let g = get(ng.threshold, &format!("/api/v1/threshold?cluster_id={id}"));
        assert_eq!(g.json()["quorum_met"], true, "{id} via nginx: {}", g.text());
    }
    let worst = recovered.values().max().copied().unwrap_or_default();
    eprintln!(
        "replica kill at push_interval {interval}: {} clusters moved, {} stayed; every moved \
         cluster had valid thresholds again after {:.2} s ({rounds_after} push rounds); \
         {failed_pushes} pushes failed during failover",
        on[0].len(),
        on[1].len(),
        worst.as_secs_f64()
    );
}
