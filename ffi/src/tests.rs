//! Unit tests of the C ABI, driven through the exported functions as a C caller would, and
//! compared with the same components driven directly (what `ingero-fleet` does).

use std::ptr;
use std::time::Duration;

use component::otlp::ExportMetricsServiceRequest;
use component::{BatchContext, Processor, StaticHost, Timestamp};
use prost::Message;
use testkit::AgentPush;

use super::*;
use crate::buf::ingero_buf_free;
use crate::cluster::{
    ingero_query_cluster, ingero_validate_cluster_id, ingero_validate_header_cluster_id,
};
use crate::extension::*;
use crate::processor::*;
use crate::result::*;

const SCORES: [f64; 8] = [0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945, 0.60];

fn take(buf: &mut ingero_buf) -> Vec<u8> {
    let v = if buf.ptr.is_null() {
        Vec::new()
    } else {
        unsafe { std::slice::from_raw_parts(buf.ptr, buf.len) }.to_vec()
    };
    unsafe { ingero_buf_free(buf) };
    v
}

fn last_error_text() -> String {
    let mut b = ingero_buf::EMPTY;
    assert_eq!(unsafe { ingero_last_error(&mut b) }, INGERO_OK);
    String::from_utf8(take(&mut b)).unwrap()
}

fn new_processor(id: &str, cfg: &str) -> Result<*mut ingero_processor, (ingero_result, String)> {
    let mut p = ptr::null_mut();
    let rc =
        unsafe { ingero_processor_new(id.as_ptr(), id.len(), cfg.as_ptr(), cfg.len(), &mut p) };
    if rc == INGERO_OK {
        assert!(!p.is_null());
        Ok(p)
    } else {
        assert!(p.is_null(), "output written on failure");
        Err((rc, last_error_text()))
    }
}

fn new_extension(id: &str, cfg: &str) -> *mut ingero_extension {
    let mut e = ptr::null_mut();
    let rc =
        unsafe { ingero_extension_new(id.as_ptr(), id.len(), cfg.as_ptr(), cfg.len(), &mut e) };
    assert_eq!(rc, INGERO_OK, "{}", last_error_text());
    e
}

fn process(
    p: *const ingero_processor,
    data: &[u8],
    cluster: &str,
    at: u64,
) -> ingero_process_result {
    let mut r = ingero_process_result {
        modified: false,
        data: ingero_buf::EMPTY,
        rejected_points: 0,
    };
    let rc = unsafe {
        ingero_processor_process(
            p,
            data.as_ptr(),
            data.len(),
            cluster.as_ptr(),
            cluster.len(),
            at,
            &mut r,
        )
    };
    assert_eq!(rc, INGERO_OK, "{}", last_error_text());
    r
}

fn headers(e: *const ingero_extension, cluster: &str) -> Option<(String, String)> {
    let mut h = ingero_push_headers {
        threshold: [0; INGERO_HEADER_VALUE_CAP],
        threshold_len: 0,
        quorum_met: [0; INGERO_HEADER_VALUE_CAP],
        quorum_met_len: 0,
    };
    match unsafe { ingero_extension_push_headers(e, cluster.as_ptr(), cluster.len(), &mut h) } {
        INGERO_OK => Some((
            String::from_utf8(h.threshold[..h.threshold_len].to_vec()).unwrap(),
            String::from_utf8(h.quorum_met[..h.quorum_met_len].to_vec()).unwrap(),
        )),
        INGERO_NO_THRESHOLD => {
            assert_eq!(h.threshold_len, 0, "output written without a threshold");
            None
        }
        rc => panic!("push_headers: {rc:?} {}", last_error_text()),
    }
}

fn route(
    e: *const ingero_extension,
    admin: bool,
    method: &str,
    path: &str,
    query: &str,
) -> (u16, String, String, String) {
    let mut r = ingero_http_response {
        status: 0,
        content_type: ingero_buf::EMPTY,
        headers: ingero_buf::EMPTY,
        body: ingero_buf::EMPTY,
    };
    let f = if admin {
        ingero_extension_route_admin
    } else {
        ingero_extension_route_agent
    };
    let rc = unsafe {
        f(
            e,
            method.as_ptr(),
            method.len(),
            path.as_ptr(),
            path.len(),
            query.as_ptr(),
            query.len(),
            &mut r,
        )
    };
    assert_eq!(rc, INGERO_OK);
    let status = r.status;
    let out = (
        status,
        String::from_utf8(
            unsafe { std::slice::from_raw_parts(r.content_type.ptr, r.content_type.len) }.to_vec(),
        )
        .unwrap(),
        String::from_utf8(
            unsafe { std::slice::from_raw_parts(r.headers.ptr, r.headers.len) }.to_vec(),
        )
        .unwrap(),
        String::from_utf8(unsafe { std::slice::from_raw_parts(r.body.ptr, r.body.len) }.to_vec())
            .unwrap(),
    );
    unsafe { ingero_http_response_free(&mut r) };
    assert!(r.body.ptr.is_null() && r.status == 0);
    unsafe { ingero_http_response_free(&mut r) };
    out
}

fn cluster_batch(cluster: &str) -> Vec<u8> {
    // All nodes of a cluster in one request, so a tick never sees half of them.
    let mut req = ExportMetricsServiceRequest::default();
    for (i, s) in SCORES.iter().enumerate() {
        req.resource_metrics.extend(
            AgentPush::new(cluster, &format!("{cluster}-node-{i:02}"), *s)
                .to_proto()
                .resource_metrics,
        );
    }
    req.encode_to_vec()
}

#[test]
fn version_and_abi() {
    assert_eq!(ingero_abi_version(), INGERO_ABI_VERSION);
    let v = unsafe { std::ffi::CStr::from_ptr(ingero_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    let m = unsafe { std::ffi::CStr::from_ptr(ingero_result_message(INGERO_ERR_DECODE as u32)) };
    assert_eq!(m.to_str().unwrap(), "invalid OTLP metrics protobuf");
}

#[test]
fn every_type_builds_from_defaults_with_its_tick_interval() {
    for (id, interval) in [
        ("ingero", Duration::from_secs(10)),
        ("provider_lookup", Duration::from_secs(10)),
        (
            "nccl_peer_lag/rdma",
            nccl_processor::create(&serde_json::Value::Null)
                .unwrap()
                .tick_interval(),
        ),
    ] {
        let p = new_processor(id, "").unwrap();
        let mut n = 0u64;
        assert_eq!(
            unsafe { ingero_processor_tick_interval_nanos(p, &mut n) },
            INGERO_OK
        );
        assert_eq!(Duration::from_nanos(n), interval, "{id}");
        unsafe { ingero_processor_free(p) };
    }
    let p = new_processor("ingero", "push_interval: 3s\n").unwrap();
    let mut n = 0u64;
    assert_eq!(
        unsafe { ingero_processor_tick_interval_nanos(p, &mut n) },
        INGERO_OK
    );
    assert_eq!(n, 3_000_000_000);
    unsafe { ingero_processor_free(p) };
    let e = new_extension("ingero_threshold", "{}");
    let mut b = ingero_buf::EMPTY;
    assert_eq!(
        unsafe { ingero_extension_config_json(e, &mut b) },
        INGERO_OK
    );
    let cfg: serde_json::Value = serde_json::from_slice(&take(&mut b)).unwrap();
    assert_eq!(cfg["agent_endpoint"], "127.0.0.1:8080");
    assert_eq!(cfg["admin_endpoint"], "127.0.0.1:8081");
    unsafe { ingero_extension_free(e) };
}

#[test]
fn config_errors_carry_every_key_path_like_the_rust_host() {
    let yaml = "threshold:\n  k: -1\n  ema_alpha: 5\n";
    let (rc, msg) = new_processor("ingero", yaml).unwrap_err();
    assert_eq!(rc, INGERO_ERR_INVALID_CONFIG);
    // The same text the crate's own `create` reports (what ingero-fleet prefixes and prints).
    let direct =
        ::ingero_processor::create(&component::config::parse_yaml(yaml.as_bytes()).unwrap())
            .unwrap_err();
    assert_eq!(msg, direct.to_string());
    let lines: Vec<&str> = msg.lines().collect();
    assert_eq!(lines.len(), 2, "{msg}");
    assert!(lines[0].starts_with("threshold.k: "), "{msg}");
    assert!(lines[1].starts_with("threshold.ema_alpha: "), "{msg}");

    // JSON works too, and an unknown key names its path.
    let (rc, msg) = new_processor("ingero", r#"{"quorum": {"statistical_mni": 3}}"#).unwrap_err();
    assert_eq!(rc, INGERO_ERR_INVALID_CONFIG);
    assert!(
        msg.starts_with("quorum.statistical_mni: unknown field"),
        "{msg}"
    );

    // The validator gives the same answers without building anything.
    let t = "ingero";
    let rc = unsafe { ingero_config_validate(t.as_ptr(), t.len(), yaml.as_ptr(), yaml.len()) };
    assert_eq!(rc, INGERO_ERR_INVALID_CONFIG);
    assert_eq!(last_error_text(), direct.to_string());
    let t = "ingero_threshold";
    let bad = "agent_endpoint: nowhere\nmax_clusters: 0\n";
    let rc = unsafe { ingero_config_validate(t.as_ptr(), t.len(), bad.as_ptr(), bad.len()) };
    assert_eq!(rc, INGERO_ERR_INVALID_CONFIG);
    let msg = last_error_text();
    assert!(
        msg.contains("agent_endpoint: ") && msg.contains("max_clusters: "),
        "{msg}"
    );
    for t in [
        "ingero",
        "provider_lookup",
        "nccl_peer_lag",
        "ingero_threshold",
    ] {
        let rc = unsafe { ingero_config_validate(t.as_ptr(), t.len(), ptr::null(), 0) };
        assert_eq!(rc, INGERO_OK, "{t}: defaults must validate");
    }
    let bad_yaml = "threshold: [unclosed";
    let (rc, msg) = new_processor("ingero", bad_yaml).unwrap_err();
    assert_eq!(rc, INGERO_ERR_INVALID_CONFIG);
    assert!(msg.contains("invalid YAML/JSON"), "{msg}");
}

#[test]
fn unknown_and_wrong_kind_types_are_refused() {
    let (rc, msg) = new_processor("batch", "").unwrap_err();
    assert_eq!(rc, INGERO_ERR_UNKNOWN_TYPE);
    assert!(
        msg.contains("ingero, nccl_peer_lag, provider_lookup"),
        "{msg}"
    );
    let (rc, _) = new_processor("ingero_threshold", "").unwrap_err();
    assert_eq!(rc, INGERO_ERR_WRONG_KIND);
    let mut e = ptr::null_mut();
    let id = "ingero";
    let rc = unsafe { ingero_extension_new(id.as_ptr(), id.len(), ptr::null(), 0, &mut e) };
    assert_eq!(rc, INGERO_ERR_WRONG_KIND);
    assert!(e.is_null());
    let (rc, _) = new_processor("ingero/", "").unwrap_err();
    assert_eq!(rc, INGERO_ERR_INVALID_ARGUMENT);
}

#[test]
fn null_and_bad_length_arguments_are_refused_without_writing_outputs() {
    let mut p = ptr::null_mut();
    assert_eq!(
        unsafe { ingero_processor_new(ptr::null(), 6, ptr::null(), 0, &mut p) },
        INGERO_ERR_NULL_ARGUMENT
    );
    let id = "ingero";
    assert_eq!(
        unsafe { ingero_processor_new(id.as_ptr(), usize::MAX, ptr::null(), 0, &mut p) },
        INGERO_ERR_INVALID_LENGTH
    );
    assert!(last_error_text().contains("id: length"));
    assert_eq!(
        unsafe { ingero_processor_new(id.as_ptr(), id.len(), ptr::null(), 0, ptr::null_mut()) },
        INGERO_ERR_NULL_ARGUMENT
    );
    let bad = [b'i', 0xff];
    assert_eq!(
        unsafe { ingero_processor_new(bad.as_ptr(), 2, ptr::null(), 0, &mut p) },
        INGERO_ERR_INVALID_UTF8
    );
    assert!(p.is_null());

    let mut r = ingero_process_result {
        modified: true,
        data: ingero_buf::EMPTY,
        rejected_points: 77,
    };
    assert_eq!(
        unsafe { ingero_processor_process(ptr::null(), ptr::null(), 0, ptr::null(), 0, 0, &mut r) },
        INGERO_ERR_NULL_ARGUMENT
    );
    let real = new_processor("ingero", "").unwrap();
    assert_eq!(
        unsafe { ingero_processor_process(real, ptr::null(), 10, ptr::null(), 0, 0, &mut r) },
        INGERO_ERR_NULL_ARGUMENT
    );
    assert_eq!(
        unsafe {
            ingero_processor_process(real, b"x".as_ptr(), usize::MAX, ptr::null(), 0, 0, &mut r)
        },
        INGERO_ERR_INVALID_LENGTH
    );
    assert_eq!(
        unsafe { ingero_processor_start(real, ptr::null(), 2) },
        INGERO_ERR_NULL_ARGUMENT
    );
    let nulls = [ptr::null::<ingero_extension>()];
    assert_eq!(
        unsafe { ingero_processor_start(real, nulls.as_ptr(), 1) },
        INGERO_ERR_NULL_ARGUMENT
    );
    assert_eq!(
        unsafe { ingero_processor_start(real, nulls.as_ptr(), usize::MAX) },
        INGERO_ERR_INVALID_LENGTH
    );
    assert_eq!(
        unsafe { ingero_processor_tick(real, 1, ptr::null_mut()) },
        INGERO_ERR_NULL_ARGUMENT
    );
    assert!(
        r.modified && r.rejected_points == 77,
        "output changed on failure"
    );
    assert_eq!(
        unsafe { ingero_processor_shutdown(ptr::null()) },
        INGERO_ERR_NULL_ARGUMENT
    );
    assert_eq!(
        unsafe { ingero_extension_start(ptr::null()) },
        INGERO_ERR_NULL_ARGUMENT
    );
    assert_eq!(
        unsafe { ingero_last_error(ptr::null_mut()) },
        INGERO_ERR_NULL_ARGUMENT
    );
    unsafe {
        ingero_processor_free(real);
        ingero_processor_free(ptr::null_mut());
        ingero_extension_free(ptr::null_mut());
        ingero_http_response_free(ptr::null_mut());
    }
}

#[test]
fn undecodable_batches_are_refused_and_change_nothing() {
    let p = new_processor("ingero", "").unwrap();
    let mut r = ingero_process_result {
        modified: true,
        data: ingero_buf::EMPTY,
        rejected_points: 5,
    };
    let garbage = [0x0au8, 0xff, 0xff, 0xff, 0xff, 0x0f];
    let rc = unsafe {
        ingero_processor_process(
            p,
            garbage.as_ptr(),
            garbage.len(),
            ptr::null(),
            0,
            1,
            &mut r,
        )
    };
    assert_eq!(rc, INGERO_ERR_DECODE);
    assert!(last_error_text().starts_with("data: "));
    assert!(r.modified && r.rejected_points == 5);
    let mut t = ingero_buf::EMPTY;
    assert_eq!(
        unsafe { ingero_processor_telemetry_json(p, &mut t) },
        INGERO_OK
    );
    let fams: serde_json::Value = serde_json::from_slice(&take(&mut t)).unwrap();
    let points = fams
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "ingero_fleet_points_total")
        .unwrap();
    assert!(
        points["samples"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["value"] == 0.0),
        "{points}"
    );
    unsafe { ingero_processor_free(p) };
}

/// The C ABI and a direct Rust drive of the same components (what `ingero-fleet` does) give
/// the same headers, GET bodies and telemetry for the same input.
#[test]
fn thresholds_through_the_abi_match_the_components_driven_directly() {
    let cfg = "push_interval: 1s\nttl_multiplier: 5\n";
    let e = new_extension(
        "ingero_threshold",
        "agent_endpoint: 127.0.0.1:0\nadmin_endpoint: 127.0.0.1:0\n",
    );
    let p = new_processor("ingero", cfg).unwrap();
    assert_eq!(unsafe { ingero_extension_start(e) }, INGERO_OK);
    let exts = [e as *const ingero_extension];
    assert_eq!(
        unsafe { ingero_processor_start(p, exts.as_ptr(), 1) },
        INGERO_OK
    );

    let direct_ext =
        std::sync::Arc::new(::ingero_extension::create(&serde_json::Value::Null).unwrap());
    let direct =
        ::ingero_processor::create(&component::config::parse_yaml(cfg.as_bytes()).unwrap())
            .unwrap();
    let host = StaticHost {
        extensions: vec![(
            component::ComponentId::new("ingero_threshold"),
            direct_ext.clone(),
        )],
    };
    direct.start(&host).unwrap();

    // Cold start: nothing computed, no headers, the zero body.
    assert_eq!(headers(e, "alpha"), None);
    let (status, ct, hdrs, body) = route(e, false, "GET", "/api/v1/threshold", "cluster_id=alpha");
    assert_eq!(
        (status, ct.as_str(), body.as_str()),
        (
            200,
            "application/json",
            r#"{"threshold":0,"quorum_met":false}"#
        )
    );
    assert!(hdrs.contains("Cache-Control: no-store\n"), "{hdrs}");

    let t0 = 1_763_769_600_000_000_000u64;
    for tick in 0..4u64 {
        let now = t0 + tick * 1_000_000_000;
        for cluster in ["alpha", "beta"] {
            let batch = cluster_batch(cluster);
            let r = process(p, &batch, cluster, now);
            assert!(!r.modified && r.data.ptr.is_null() && r.rejected_points == 0);
            let mut rms = ExportMetricsServiceRequest::decode(batch.as_slice())
                .unwrap()
                .resource_metrics;
            let ctx = BatchContext {
                cluster_id: Some(cluster.into()),
                received_at: Timestamp::from_nanos(now),
                tenant: None,
            };
            direct.process(&mut rms, &ctx);
        }
        let mut out = ingero_buf::EMPTY;
        assert_eq!(
            unsafe { ingero_processor_tick(p, now + 500_000_000, &mut out) },
            INGERO_OK
        );
        let emitted = ExportMetricsServiceRequest::decode(take(&mut out).as_slice())
            .unwrap()
            .resource_metrics;
        let direct_emitted = direct.tick(Timestamp::from_nanos(now + 500_000_000));
        // Cluster order of a tick's output is unspecified (hash order); compare as sets.
        let sorted = |v: Vec<component::ResourceMetrics>| {
            let mut b: Vec<Vec<u8>> = v.iter().map(Message::encode_to_vec).collect();
            b.sort();
            b
        };
        assert_eq!(
            sorted(emitted),
            sorted(direct_emitted),
            "tick {tick} emitted different metrics"
        );
    }

    let (t, q) = headers(e, "alpha").expect("alpha has a threshold");
    let direct_h = direct_ext.store().push_headers("alpha").unwrap();
    assert_eq!(t, direct_h.threshold.to_str().unwrap());
    assert_eq!(q, direct_h.quorum_met.to_str().unwrap());
    assert_eq!(q, "true");
    let v: f64 = t.parse().unwrap();
    assert!(
        v > 0.60 && v < 0.94,
        "threshold {v} separates the straggler"
    );

    let mut th = ingero_threshold {
        threshold: 0.0,
        quorum_met: false,
    };
    let c = "alpha";
    assert_eq!(
        unsafe { ingero_extension_threshold(e, c.as_ptr(), c.len(), &mut th) },
        INGERO_OK
    );
    assert_eq!((th.threshold, th.quorum_met), (v, true));
    let c = "nobody";
    assert_eq!(
        unsafe { ingero_extension_threshold(e, c.as_ptr(), c.len(), &mut th) },
        INGERO_NO_THRESHOLD
    );
    let c = "bad\nid";
    assert_eq!(
        unsafe { ingero_extension_threshold(e, c.as_ptr(), c.len(), &mut th) },
        INGERO_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        (th.threshold, th.quorum_met),
        (v, true),
        "output written on failure"
    );

    // GET answers: same digits as the header; errors as the Rust routes give them.
    let (status, _, _, body) = route(e, false, "GET", "/api/v1/threshold", "cluster_id=alpha");
    assert_eq!(
        (status, body),
        (200, format!(r#"{{"threshold":{t},"quorum_met":true}}"#))
    );
    let direct_resp = direct_ext.route_agent(&component::api::ApiRequest {
        method: "GET",
        path: "/api/v1/threshold",
        query: Some("cluster_id=beta"),
    });
    let (status, _, _, body) = route(e, false, "GET", "/api/v1/threshold", "cluster_id=beta");
    assert_eq!(
        (status, body.into_bytes()),
        (direct_resp.status, direct_resp.body)
    );
    let (status, _, hdrs, _) = route(e, false, "POST", "/api/v1/threshold", "cluster_id=beta");
    assert_eq!(status, 405);
    assert!(hdrs.contains("Allow: GET\n"), "{hdrs}");
    assert_eq!(route(e, false, "GET", "/api/v1/threshold", "").0, 400);
    assert_eq!(route(e, false, "GET", "/elsewhere", "").0, 404);

    // Admin diagnostics name the straggler.
    let (status, _, _, body) = route(e, true, "GET", "/api/v1/diagnostics", "cluster_id=alpha");
    assert_eq!(status, 200, "{body}");
    let d: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(d["cluster_id"], "alpha");
    let (status, _, _, body) = route(e, true, "GET", "/api/v1/diagnostics", "");
    assert_eq!(status, 200);
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["cluster_count"], 2);

    // Telemetry JSON is the same families the Rust host renders (values that depend on
    // push-path counters are equal because both saw the same batches).
    let mut tj = ingero_buf::EMPTY;
    assert_eq!(
        unsafe { ingero_processor_telemetry_json(p, &mut tj) },
        INGERO_OK
    );
    let mut fams = Vec::new();
    direct.telemetry(&mut fams);
    // Byte comparison: serde_json's default float parsing is not exact, the writing is.
    assert_eq!(take(&mut tj), serde_json::to_vec(&fams).unwrap());
    let mut ej = ingero_buf::EMPTY;
    assert_eq!(
        unsafe { ingero_extension_telemetry_json(e, &mut ej) },
        INGERO_OK
    );
    let ext_fams: serde_json::Value = serde_json::from_slice(&take(&mut ej)).unwrap();
    let names: Vec<&str> = ext_fams
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"ingero_threshold_headers_total"),
        "{names:?}"
    );
    let mut dj = ingero_buf::EMPTY;
    assert_eq!(
        unsafe { ingero_processor_diagnostics_json(p, &mut dj) },
        INGERO_OK
    );
    assert_eq!(
        take(&mut dj),
        serde_json::to_vec(&direct.diagnostics().unwrap()).unwrap()
    );

    // Shutdown twice is safe; after shutdown the processor no longer publishes.
    for _ in 0..2 {
        assert_eq!(unsafe { ingero_processor_shutdown(p) }, INGERO_OK);
        assert_eq!(unsafe { ingero_extension_shutdown(e) }, INGERO_OK);
    }
    // Restart works; freeing the extension first leaves the processor memory-safe.
    assert_eq!(
        unsafe { ingero_processor_start(p, exts.as_ptr(), 1) },
        INGERO_OK
    );
    unsafe { ingero_extension_free(e) };
    let mut out = ingero_buf::EMPTY;
    assert_eq!(
        unsafe { ingero_processor_tick(p, t0 + 9_000_000_000, &mut out) },
        INGERO_OK
    );
    take(&mut out);
    unsafe { ingero_processor_free(p) };
}

#[test]
fn provider_lookup_returns_the_enriched_batch_only_when_it_changed() {
    let p = new_processor("provider_lookup", "").unwrap();
    let batch = AgentPush::new("c", "n1", 0.9)
        .provider("aws")
        .gpu("NVIDIA H100 80GB HBM3", 8)
        .to_proto_bytes();
    let mut r = process(p, &batch, "c", 1);
    let direct = provider_processor::create(&serde_json::Value::Null).unwrap();
    let mut rms = ExportMetricsServiceRequest::decode(batch.as_slice())
        .unwrap()
        .resource_metrics;
    direct.process(
        &mut rms,
        &BatchContext {
            cluster_id: Some("c".into()),
            received_at: Timestamp::from_nanos(1),
            tenant: None,
        },
    );
    let expected = ExportMetricsServiceRequest {
        resource_metrics: rms,
    }
    .encode_to_vec();
    if r.modified {
        let got = take(&mut r.data);
        assert_eq!(got, expected);
        assert_ne!(got, batch);
    } else {
        assert_eq!(
            expected, batch,
            "reported unmodified but the processor changed the batch"
        );
    }
    // Processing the processor's own output again changes nothing more: unmodified, no data.
    let r2 = process(p, &expected, "c", 2);
    assert!(!r2.modified && r2.data.ptr.is_null());
    unsafe { ingero_processor_free(p) };
}

#[test]
fn request_cluster_helpers_follow_the_rust_host() {
    let mut b = ingero_buf::EMPTY;
    let q = "x=1&cluster_id=prod%2Da";
    assert_eq!(
        unsafe { ingero_query_cluster(q.as_ptr(), q.len(), &mut b) },
        INGERO_OK
    );
    assert_eq!(take(&mut b), b"prod-a");
    assert_eq!(
        unsafe { ingero_query_cluster(ptr::null(), 0, &mut b) },
        INGERO_OK
    );
    assert!(b.ptr.is_null());
    let q = "cluster_id=a&cluster_id=b";
    assert_eq!(
        unsafe { ingero_query_cluster(q.as_ptr(), q.len(), &mut b) },
        INGERO_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        last_error_text(),
        "cluster_id: query parameter cluster_id given more than once"
    );
    let v = "gamma";
    assert_eq!(
        unsafe { ingero_validate_header_cluster_id(v.as_ptr(), v.len()) },
        INGERO_OK
    );
    let v = "gam\u{e9}";
    assert_eq!(
        unsafe { ingero_validate_header_cluster_id(v.as_ptr(), v.len()) },
        INGERO_ERR_INVALID_ARGUMENT
    );
    assert_eq!(last_error_text(), "not visible ASCII");
    assert_eq!(
        unsafe { ingero_validate_cluster_id(v.as_ptr(), v.len()) },
        INGERO_OK
    );
    assert_eq!(
        unsafe { ingero_validate_cluster_id(ptr::null(), 0) },
        INGERO_ERR_INVALID_ARGUMENT
    );
    assert_eq!(last_error_text(), "cluster_id is empty");
}

#[test]
fn last_error_survives_being_read() {
    let _ = new_processor("nope", "");
    let a = last_error_text();
    let b = last_error_text();
    assert_eq!(a, b);
    assert!(a.contains("unknown component type \"nope\""));
}

#[test]
fn processors_are_shared_safely_across_threads() {
    let e = new_extension("ingero_threshold", "");
    let p = new_processor("ingero", "push_interval: 1s").unwrap();
    let exts = [e as *const ingero_extension];
    assert_eq!(
        unsafe { ingero_processor_start(p, exts.as_ptr(), 1) },
        INGERO_OK
    );
    let pa = p as usize;
    let handles: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let batch = cluster_batch(&format!("c{t}"));
                    let r = process(pa as *const ingero_processor, &batch, "", i);
                    assert_eq!(r.rejected_points, 0);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut out = ingero_buf::EMPTY;
    assert_eq!(
        unsafe { ingero_processor_tick(p, 100, &mut out) },
        INGERO_OK
    );
    take(&mut out);
    assert!(headers(e, "c3").is_some());
    unsafe {
        ingero_processor_free(p);
        ingero_extension_free(e);
    }
}

#[test]
fn threshold_extension_with_auth_is_refused_because_the_go_collector_would_not_enforce_it() {
    let cfg = serde_json::json!({ "auth": { "authenticator": "ingero_auth" } });
    let err = crate::registry::validate("ingero_threshold", &cfg).unwrap_err();
    let text = err.message.unwrap_or_default();
    assert!(
        text.contains("auth: is enforced by ingero-fleet only"),
        "{text}"
    );
    assert!(crate::registry::validate("ingero_threshold", &serde_json::json!({})).is_ok());
}

/// Fuzzing regression (fuzz target `ffi`): a batch holding a NaN value made the debug-build
/// pass-through check (`before == after` on the decoded batch) fail, because NaN is not
/// equal to itself, so `ingero_processor_process` answered `INGERO_ERR_PANIC` for a batch
/// the processor had only read. The check now compares the encodings.
#[test]
fn nan_values_pass_through_without_a_panic() {
    for id in ["ingero", "nccl_peer_lag"] {
        let p = new_processor(id, "").unwrap();
        let mut req = AgentPush::new("c", "n1", 0.9).to_proto();
        for rm in &mut req.resource_metrics {
            for sm in &mut rm.scope_metrics {
                for m in &mut sm.metrics {
                    if let Some(component::otlp::MetricKind::Gauge(g)) = &mut m.data {
                        for pt in &mut g.data_points {
                            pt.value = Some(component::otlp::NumberValue::AsDouble(f64::NAN));
                        }
                    }
                }
            }
        }
        let r = process(p, &req.encode_to_vec(), "c", 1_763_769_600_000_000_000);
        assert!(!r.modified && r.data.ptr.is_null(), "{id}");
        unsafe { ingero_processor_free(p) };
    }
}
