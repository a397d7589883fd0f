//! The processor through its public interface: provider precedence and aliases on real
//! batch shapes, unknown GPU models, cost from process + tick, refused inputs counted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may unwrap

use crate::common;

use common::*;
use component::config::{self, ConfigValue};
use component::otlp::{self, kv_str};
use component::{Processor, Timestamp};
use ingero_wire::resource;
use provider_processor::{ProviderSource, create, metrics as m};

fn with_rules(dir: &str, rules: &str, extra: &str) -> provider_processor::ProviderLookupProcessor {
    let d = temp_dir(dir);
    let path = d.join("node_providers.yaml");
    write_at(&path, rules, 1_700_000_000);
    let yaml = format!("rules_file: {}\n{extra}", path.display());
    create(&config::parse_yaml(yaml.as_bytes()).unwrap()).unwrap()
}

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn telemetry(p: &dyn Processor) -> Vec<component::MetricFamily> {
    let mut f = Vec::new();
    p.telemetry(&mut f);
    f
}

#[test]
fn precedence_rule_then_agent_then_semconv_then_default() {
    let p = with_rules(
        "precedence",
        "rules:\n  - {provider: coreweave, node_id: \"cw-*\"}\n",
        "default_provider: On Prem\n",
    );
    let mut batch = vec![
        // Rule beats the agent's own value and semantic conventions.
        resource_with(vec![
            kv_str(resource::NODE_ID, "cw-7"),
            kv_str(resource::PROVIDER, "aws"),
            kv_str(resource::CLOUD_PROVIDER, "gcp"),
        ]),
        // Agent value beats semantic conventions.
        resource_with(vec![
            kv_str(resource::NODE_ID, "gpu-1"),
            kv_str(resource::PROVIDER, "azure"),
            kv_str(resource::CLOUD_PROVIDER, "gcp"),
        ]),
        // cloud.provider beats cloud.platform and host.type.
        resource_with(vec![
            kv_str(resource::NODE_ID, "sc-1"),
            kv_str(resource::CLOUD_PROVIDER, "gcp"),
            kv_str(resource::CLOUD_PLATFORM, "azure_vm"),
            kv_str(resource::HOST_TYPE, "p5.48xlarge"),
        ]),
        // cloud.platform, then host.type.
        resource_with(vec![
            kv_str(resource::NODE_ID, "sc-2"),
            kv_str(resource::CLOUD_PLATFORM, "aws_eks"),
        ]),
        resource_with(vec![
            kv_str(resource::CLUSTER_ID, "prod"),
            kv_str(resource::HOST_TYPE, "Standard_ND96isr_H100_v5"),
        ]),
        // Nothing: the default, normalised.
        resource_with(vec![kv_str(resource::NODE_ID, "x")]),
    ];
    p.process(&mut batch, &ctx(t(1)));
    let got: Vec<_> = batch.iter().map(|rm| provider_of(rm).unwrap()).collect();
    assert_eq!(
        got,
        ["coreweave", "azure", "gcp", "ec2", "azure", "on-prem"]
    );
    let f = telemetry(&p);
    for (source, n) in [
        ("rule", 1.0),
        ("agent", 1.0),
        ("semconv", 3.0),
        ("default", 1.0),
    ] {
        assert_eq!(
            sample(&f, m::RESOLVED_TOTAL, &[("source", source)]),
            Some(n),
            "{source}"
        );
    }
    // resolve() says why.
    let r = p.resolve(&[kv_str(resource::NODE_ID, "cw-1")]);
    assert_eq!(
        (&*r.provider, r.source),
        ("coreweave", ProviderSource::Rule(0))
    );
}

/// Regression (issue 18): `ingero_provider="unknown"` landed on every series and on
/// `target_info`, SDK and telemetrygen data included. Only agent-looking resources get it.
#[test]
fn only_resources_that_look_like_agents_get_a_provider() {
    let p = create(&config::parse_yaml(b"default_provider: unknown\n").unwrap()).unwrap();
    let sdk_metric = |name: &str| {
        otlp::resource_metrics(
            vec![
                kv_str(resource::SERVICE_NAME, "checkout"),
                kv_str(resource::CLOUD_PROVIDER, "gcp"),
            ],
            "sdk",
            vec![otlp::gauge_f64(
                name,
                "1",
                vec![otlp::point_f64(vec![], 1, 1.0)],
            )],
        )
    };
    let mut batch = vec![
        // Not agents: an OTel SDK's resource (even one with cloud.provider), a
        // telemetrygen-like one, a batch without a resource.
        sdk_metric("http.server.duration"),
        resource_with(vec![kv_str(resource::SERVICE_NAME, "telemetrygen")]),
        component::ResourceMetrics::default(),
        // Agents: by identifier, by an own provider value, by the agent's metric names.
        resource_with(vec![kv_str(resource::NODE_ID, "gpu-1")]),
        resource_with(vec![kv_str(resource::CLUSTER_ID, "prod")]),
        resource_with(vec![kv_str(resource::PROVIDER, "aws")]),
        sdk_metric("ingero.node.health_score"),
        sdk_metric("nccl.collective.duration_ms"),
    ];
    let before: Vec<_> = batch[..3].to_vec();
    p.process(&mut batch, &ctx(t(1)));
    assert_eq!(
        &batch[..3],
        &before[..],
        "non-agent resources pass unchanged"
    );
    let got: Vec<_> = batch[3..].iter().map(provider_of).collect();
    assert_eq!(
        got,
        [
            Some("unknown".to_string()),
            Some("unknown".to_string()),
            Some("ec2".to_string()),
            Some("gcp".to_string()),
            Some("gcp".to_string())
        ]
    );
    let f = telemetry(&p);
    let resolved: f64 = ["rule", "agent", "semconv", "default"]
        .iter()
        .filter_map(|s| sample(&f, m::RESOLVED_TOTAL, &[("source", s)]))
        .sum();
    assert_eq!(
        resolved, 5.0,
        "only the agent resources are counted as tagged"
    );
}

#[test]
fn aliases_normalise_agent_semconv_and_rates_to_one_id() {
    let p = create(&config::parse_yaml(b"aliases: {Crusoe Cloud: crusoe}").unwrap()).unwrap();
    let mut batch = vec![
        health_push("c", "a", Some("aws"), Some((H100, 8)), 0),
        health_push("c", "b", Some("AWS"), Some((H100, 8)), 0),
        resource_with(vec![
            kv_str(resource::NODE_ID, "k"),
            kv_str(resource::CLOUD_PROVIDER, "aws"),
        ]),
        resource_with(vec![kv_str(resource::PROVIDER, "crusoe-cloud")]),
    ];
    p.process(&mut batch, &ctx(t(1)));
    let got: Vec<_> = batch.iter().map(|rm| provider_of(rm).unwrap()).collect();
    assert_eq!(got, ["ec2", "ec2", "ec2", "crusoe"]);
    p.tick(t(2));
    let f = telemetry(&p);
    // The agent said aws; the built-in rates are keyed ec2: they meet.
    assert_eq!(
        sample(
            &f,
            m::GPU_HOURLY_RATE,
            &[
                ("provider", "ec2"),
                ("gpu_model", H100),
                ("currency", "USD")
            ]
        ),
        Some(12.29)
    );
    assert_eq!(
        sample(
            &f,
            m::PROVIDER_NODES,
            &[("cluster_id", "c"), ("provider", "ec2")]
        ),
        Some(2.0)
    );
}

#[test]
fn other_pushes_of_a_node_take_the_provider_its_agent_reported() {
    let p = create(&ConfigValue::Null).unwrap();
    let mut push = vec![health_push("c", "n1", Some("gcp"), Some((H100, 8)), 0)];
    p.process(&mut push, &ctx(t(1)));
    // A straggler-event or trace-exporter push: same node, no ingero.provider.
    let mut other = vec![
        resource_with(vec![
            kv_str(resource::CLUSTER_ID, "c"),
            kv_str(resource::NODE_ID, "n1"),
        ]),
        resource_with(vec![
            kv_str(resource::CLUSTER_ID, "c"),
            kv_str(resource::NODE_ID, "n2"),
        ]),
    ];
    p.process(&mut other, &ctx(t(2)));
    assert_eq!(provider_of(&other[0]).as_deref(), Some("gcp"));
    assert_eq!(provider_of(&other[1]).as_deref(), Some("unknown"));
}

/// A rule on an attribute only the health push carries (the node's IP) still decides the
/// provider of the node's straggler and lag resources, which lack that attribute.
#[test]
fn other_pushes_of_a_node_take_the_provider_a_rule_gave_its_health_push() {
    let p = with_rules(
        "pinned-rule",
        "rules:\n  - {provider: lambda, ip_range: 10.20.0.0/16}\n",
        "",
    );
    let mut push = health_push("c", "n1", Some("aws"), Some((A100, 8)), 0);
    push.resource
        .as_mut()
        .unwrap()
        .attributes
        .push(kv_str("host.ip", "10.20.3.4"));
    let mut batch = vec![push];
    p.process(&mut batch, &ctx(t(1)));
    assert_eq!(provider_of(&batch[0]).as_deref(), Some("lambda"));
    let mut later = vec![straggler("c", "n1")];
    later.extend(peer_lag(
        "c",
        "00000000000000ab",
        5,
        2,
        &[(0, Some("n1"), 3.0)],
    ));
    p.process(&mut later, &ctx(t(2)));
    assert!(
        later
            .iter()
            .all(|rm| provider_of(rm).as_deref() == Some("lambda"))
    );
    let f = telemetry(&p);
    assert_eq!(
        sample(&f, m::RESOLVED_TOTAL, &[("source", "rule")]),
        Some(3.0)
    );
}

#[test]
fn unknown_gpu_models_fall_back_with_a_counted_warning() {
    let p = create(&config::parse_yaml(b"limits: {max_unknown_model_labels: 1}").unwrap()).unwrap();
    let b200 = "NVIDIA B200";
    let mut batch = vec![
        health_push("c", "a", Some("aws"), Some((b200, 8)), 0),
        health_push("c", "b", Some("aws"), Some((b200, 8)), 0),
        health_push("c", "k", Some("aws"), Some((H100, 8)), 0),
    ];
    p.process(&mut batch, &ctx(t(1)));
    // The same node pushing again is not a new report.
    let mut again = vec![health_push("c", "a", Some("aws"), Some((b200, 8)), 0)];
    p.process(&mut again, &ctx(t(2)));
    // A second unknown pair goes past the label cap of 1.
    let mut other = vec![health_push(
        "c",
        "z",
        Some("gcp"),
        Some(("NVIDIA T4", 1)),
        0,
    )];
    p.process(&mut other, &ctx(t(3)));
    p.tick(t(4));
    let f = telemetry(&p);
    assert_eq!(
        sample(
            &f,
            m::UNKNOWN_GPU_MODEL_TOTAL,
            &[("provider", "ec2"), ("gpu_model", b200)]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &f,
            m::UNKNOWN_GPU_MODEL_TOTAL,
            &[("provider", m::OVERFLOW_LABEL)]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &f,
            m::DROPPED_TOTAL,
            &[("reason", m::reason::UNKNOWN_MODEL_LABEL_CAP)]
        ),
        Some(1.0)
    );
    // Priced at the built-in fallback (0.0), shown as such.
    assert_eq!(
        sample(
            &f,
            m::GPU_HOURLY_RATE,
            &[("provider", "ec2"), ("gpu_model", b200)]
        ),
        Some(0.0)
    );
    assert!(
        f.iter()
            .filter(|fam| fam.name == m::UNKNOWN_GPU_MODEL_TOTAL)
            .flat_map(|fam| &fam.samples)
            .all(|s| s.labels.iter().all(|(_, v)| v != H100))
    );
}

/// The whole path: two lambda A100 nodes (8 GPUs each, world size 16), one collective
/// with 16 ranks where rank 9 is 120 ms behind, and node b flagged as a straggler.
///
/// Barrier: L = 0.120 s, 15 waiting ranks, no node named on the points, so split over the
/// cluster mix (all lambda A100): 1.8 idle GPU-seconds; counter 1.8 * 1.29 / 3600 =
/// 0.000645 USD; window 60 s: 0.03 GPUs idle, 0.03 * 1.29 = 0.0387 USD/h.
/// Straggler b: 16 ranks * 1.29 = 20.64 USD/h; after a 10 s tick 20.64 * 10 / 3600 =
/// 0.057333 USD.
#[test]
fn cost_from_process_and_tick() {
    // Lambda has no IMDS detection in the agent: an operator default says so here.
    let p = create(&config::parse_yaml(b"default_provider: lambda").unwrap()).unwrap();
    let mut pushes = vec![
        health_push("train", "a", None, Some((A100, 8)), 16),
        health_push("train", "b", None, Some((A100, 8)), 16),
    ];
    p.process(&mut pushes, &ctx(t(100)));
    let ranks: Vec<(i64, Option<&str>, f64)> = (0..16)
        .map(|r| (r, None, if r == 9 { 120.0 } else { -2.0 }))
        .collect();
    let mut lag = peer_lag("train", "a1b2c3d4e5f60718", 555, 16, &ranks);
    p.process(&mut lag, &ctx(t(101)));
    assert!(
        lag.iter()
            .all(|rm| provider_of(rm).as_deref() == Some("lambda"))
    );
    p.tick(t(105));
    let mut strag = vec![straggler("train", "b")];
    p.process(&mut strag, &ctx(t(106)));
    p.tick(t(110));
    p.process(&mut strag.clone(), &ctx(t(116)));
    p.tick(t(120));
    let f = telemetry(&p);
    let l = |extra: &[(&'static str, &'static str)]| {
        let mut v = vec![
            ("cluster_id", "train"),
            ("provider", "lambda"),
            ("gpu_model", A100),
        ];
        v.extend_from_slice(extra);
        v
    };
    let total = sample(&f, m::COST_BARRIER_IDLE_TOTAL, &l(&[("currency", "USD")])).unwrap();
    assert!(close(total, 0.000_645), "{total}");
    let gpu_s = sample(&f, m::COST_BARRIER_IDLE_GPU_SECONDS_TOTAL, &l(&[])).unwrap();
    assert!(close(gpu_s, 1.8), "{gpu_s}");
    let rate = sample(&f, m::COST_BARRIER_IDLE_RATE, &l(&[("currency", "USD")])).unwrap();
    assert!(close(rate, 0.0387), "{rate}");
    let idle = sample(&f, m::COST_BARRIER_IDLE_GPUS, &l(&[])).unwrap();
    assert!(close(idle, 0.03), "{idle}");
    let srate = sample(
        &f,
        m::COST_STRAGGLER_RATE,
        &[("node_id", "b"), ("provider", "lambda")],
    )
    .unwrap();
    assert!(close(srate, 20.64), "{srate}");
    // Streak began at 106: tick 110 accrues 4 s, tick 120 another 10 s.
    let stotal = sample(&f, m::COST_STRAGGLER_TOTAL, &[("node_id", "b")]).unwrap();
    assert!(close(stotal, 20.64 * 14.0 / 3600.0), "{stotal}");
    assert_eq!(
        sample(&f, m::COST_STRAGGLER_RATE, &[("node_id", "a")]),
        None
    );
    assert_eq!(
        sample(&f, m::PROVIDER_STRAGGLERS, &[("cluster_id", "train")]),
        Some(1.0)
    );
    families_follow_their_declaration(&f);
}

/// Every family the processor emits is one declared in `metrics::FAMILIES` (name, type,
/// help, the declared labels on every sample), each declared family is emitted once and,
/// but for the unknown-model counter, with samples.
fn families_follow_their_declaration(f: &[component::MetricFamily]) {
    let mut emitted: Vec<&str> = f.iter().map(|f| f.name.as_str()).collect();
    emitted.sort_unstable();
    let mut declared: Vec<&str> = m::FAMILIES.iter().map(|s| s.name).collect();
    declared.sort_unstable();
    assert_eq!(emitted, declared);
    for fam in f {
        let spec = m::FAMILIES.iter().find(|s| s.name == fam.name).unwrap();
        assert!(spec.describes(fam), "{} does not match {spec:?}", fam.name);
        // Every GPU here has a rate: no unknown model to count.
        if fam.name != m::UNKNOWN_GPU_MODEL_TOTAL {
            assert!(!fam.samples.is_empty(), "{} has no sample", fam.name);
        }
    }
}

#[test]
fn refused_inputs_are_counted_and_data_passes_through() {
    let p = create(&ConfigValue::Null).unwrap();
    let mut batch = peer_lag("c", "0000000000000000", 1, 4, &[(0, None, 5.0)]);
    batch.extend(peer_lag("c", "abc", 1, 4, &[(-1, None, 5.0)]));
    batch.extend(peer_lag("c", "abc", 1, 4, &[(1, None, f64::INFINITY)]));
    // No cluster anywhere: lag and straggler points cannot be placed.
    let mut no_cluster = straggler("x", "n");
    no_cluster
        .resource
        .as_mut()
        .unwrap()
        .attributes
        .retain(|kv| kv.key != resource::CLUSTER_ID);
    batch.push(no_cluster);
    // Invalid node info: count 0.
    batch.push(health_push("c", "n", Some("aws"), Some((H100, 0)), 0));
    let before = otlp::count_points(&batch);
    let out = p.process(&mut batch, &ctx(t(1)));
    assert_eq!(out.rejected_points, 0);
    assert_eq!(otlp::count_points(&batch), before);
    let f = telemetry(&p);
    for (why, n) in [
        (m::reason::UNKNOWN_COMMUNICATOR, 1.0),
        (m::reason::INVALID_LAG_POINT, 2.0),
        (m::reason::NO_CLUSTER, 1.0),
        (m::reason::INVALID_NODE_INFO, 1.0),
    ] {
        assert_eq!(
            sample(&f, m::DROPPED_TOTAL, &[("reason", why)]),
            Some(n),
            "{why}"
        );
    }
}

#[test]
fn request_cluster_id_places_points_without_a_resource_cluster() {
    let p = create(&ConfigValue::Null).unwrap();
    let mut push = health_push("ignored", "n", Some("gcp"), Some((H100, 8)), 0);
    push.resource
        .as_mut()
        .unwrap()
        .attributes
        .retain(|kv| kv.key != resource::CLUSTER_ID);
    let ctx = component::BatchContext {
        cluster_id: Some("from-query".into()),
        received_at: t(1),
        tenant: None,
    };
    p.process(&mut vec![push], &ctx);
    p.tick(t(2));
    let f = telemetry(&p);
    assert_eq!(
        sample(
            &f,
            m::PROVIDER_NODES,
            &[("cluster_id", "from-query"), ("provider", "gcp")]
        ),
        Some(1.0)
    );
}

#[test]
fn telemetry_emits_every_documented_family() {
    let p = create(&ConfigValue::Null).unwrap();
    let f = telemetry(&p);
    let declared: Vec<&str> = m::FAMILIES.iter().map(|s| s.name).collect();
    for name in &declared {
        assert!(f.iter().any(|fam| fam.name == *name), "{name}");
    }
    for fam in &f {
        assert!(
            declared.contains(&fam.name.as_str()),
            "{} undocumented",
            fam.name
        );
        let is_counter = fam.kind == component::MetricType::Counter;
        assert_eq!(is_counter, fam.name.ends_with("_total"), "{}", fam.name);
    }
}

/// The `nccl_peer_lag` processor stamps instances it could not place on the wall clock
/// with its tick time, so two all-reduces of one communicator can arrive in one batch
/// with identical (comm, op, time). They are two instances: rank 2 +10 ms in the first,
/// rank 3 +30 ms in the second, 4 ranks: 0.010 * 3 + 0.030 * 3 = 0.12 idle GPU-seconds.
/// (Merged into one they would give 0.030 * 3 = 0.09.)
#[test]
fn instances_sharing_a_time_stamp_in_one_batch_stay_apart() {
    let p = create(&ConfigValue::Null).unwrap();
    let tick_stamp = 1_700_000_000_000_000_000;
    let mut batch = peer_lag(
        "c",
        "00000000000000ab",
        tick_stamp,
        4,
        &[
            (0, None, -1.0),
            (1, None, 0.0),
            (2, None, 10.0),
            (3, None, -2.0),
        ],
    );
    batch.extend(peer_lag(
        "c",
        "00000000000000ab",
        tick_stamp,
        4,
        &[
            (0, None, 0.0),
            (1, None, -1.0),
            (2, None, 1.0),
            (3, None, 30.0),
        ],
    ));
    p.process(&mut batch, &ctx(t(1)));
    p.tick(t(5));
    p.tick(t(10));
    let f = telemetry(&p);
    let gpu_s = sample(
        &f,
        m::COST_BARRIER_IDLE_GPU_SECONDS_TOTAL,
        &[
            ("cluster_id", "c"),
            ("provider", "unknown"),
            ("gpu_model", "unknown"),
        ],
    )
    .unwrap();
    assert!(close(gpu_s, 0.12), "{gpu_s}");
    // The same batch delivered again replaces, it does not add.
    p.process(&mut batch.clone(), &ctx(t(11)));
    p.process(&mut batch, &ctx(t(12)));
    p.tick(t(15));
    p.tick(t(20));
    let f = telemetry(&p);
    let gpu_s = sample(
        &f,
        m::COST_BARRIER_IDLE_GPU_SECONDS_TOTAL,
        &[("cluster_id", "c"), ("gpu_model", "unknown")],
    )
    .unwrap();
    assert!(close(gpu_s, 0.24), "{gpu_s}");
}
