//! The C ABI of `libingero_fleet` (crate `ingero-ffi`), driven by a sequence of calls read
//! from the input: create processors and extensions from a type and config bytes, start
//! them, process protobuf batches (raw bytes from the input, or agent pushes built from a
//! few input bytes), tick, read thresholds and push headers, route HTTP requests, validate
//! configs and cluster ids, free. Only NULL or live handles and valid `(ptr, len)` pairs
//! are passed, as the header requires; everything else comes from the input.
//!
//! Invariants checked on every call beyond "no panic" (a caught panic, `INGERO_ERR_PANIC`,
//! counts as a crash):
//! - the result code is one the header documents for that function (`INGERO_NO_THRESHOLD`
//!   only from threshold reads);
//! - outputs are never written when the call fails (nor on `INGERO_NO_THRESHOLD`): each
//!   output starts as a sentinel that must survive;
//! - `ingero_last_error` is empty after a success and non-empty after a failure;
//! - outputs are well formed: `ingero_buf` is `{NULL, 0}` or non-NULL with a length; a
//!   pass-through processor (`ingero`, `nccl_peer_lag`) never reports `modified`; batches
//!   and tick output decode as OTLP protobuf; JSON outputs parse; thresholds are within
//!   [0.1, 0.99]; header values fit and agree with the threshold read; HTTP statuses are
//!   valid;
//! - `ingero_config_validate` agrees with `*_new` on the same type and config;
//! - NULL arguments and over-long lengths give `INGERO_ERR_NULL_ARGUMENT` /
//!   `INGERO_ERR_INVALID_LENGTH`.

use std::ptr;

use ingero_fleet::buf::{ingero_buf, ingero_buf_free};
use ingero_fleet::cluster::{
    ingero_query_cluster, ingero_validate_cluster_id, ingero_validate_header_cluster_id,
};
use ingero_fleet::extension::{
    ingero_extension, ingero_extension_config_json, ingero_extension_free, ingero_extension_new,
    ingero_extension_push_headers, ingero_extension_route_admin, ingero_extension_route_agent,
    ingero_extension_shutdown, ingero_extension_start, ingero_extension_telemetry_json,
    ingero_extension_threshold, ingero_http_response, ingero_http_response_free,
    ingero_push_headers, ingero_threshold,
};
use ingero_fleet::processor::{
    ingero_process_result, ingero_processor, ingero_processor_diagnostics_json,
    ingero_processor_free, ingero_processor_new, ingero_processor_process,
    ingero_processor_shutdown, ingero_processor_start, ingero_processor_telemetry_json,
    ingero_processor_tick, ingero_processor_tick_interval_nanos,
};
use ingero_fleet::result::ingero_result::{self, *};
use ingero_fleet::{ingero_config_validate, ingero_last_error};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;

/// Component types the ops pick from (index by a byte); anything else comes raw from the
/// input.
pub const TYPES: [&str; 6] = [
    "ingero",
    "provider_lookup",
    "nccl_peer_lag",
    "ingero_threshold",
    "ingero/gpu",
    "ingero_threshold/b",
];
/// Cluster ids the ops pick from, so pushes and reads meet.
pub const CLUSTERS: [&str; 4] = ["c0", "c1", "prod", "gpu cluster/7"];
/// The start of the op clock (2025-11-22T00:00:00Z).
pub const T0: u64 = 1_763_769_600_000_000_000;
/// Most handles of each kind alive at once.
const MAX_HANDLES: usize = 4;
/// Most ops run per input.
const MAX_OPS: usize = 96;

/// The ops, numbered as the input's op byte (modulo their count) selects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    ProcessorNew = 0,
    ExtensionNew,
    ProcessorStart,
    ProcessBytes,
    ProcessAgents,
    Tick,
    Threshold,
    PushHeaders,
    Route,
    ConfigValidate,
    QueryCluster,
    ValidateClusterIds,
    Introspect,
    StartShutdown,
    Free,
    NullArguments,
}

const OPS: u8 = 16;

/// Reads op arguments from the input; past its end every read gives zeros.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte();
        }
        u64::from_le_bytes(b)
    }

    /// A byte string: a little-endian u16 length, then that many bytes (fewer at the end).
    fn chunk(&mut self) -> &'a [u8] {
        let len = usize::from(u16::from_le_bytes([self.byte(), self.byte()]));
        let (head, rest) = self.data.split_at(len.min(self.data.len()));
        self.data = rest;
        head
    }
}

/// Writes inputs in the format [`Reader`] reads (the seed generator uses it).
#[derive(Debug, Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn op(&mut self, op: Op) -> &mut Self {
        self.bytes.push(op as u8);
        self
    }
    pub fn byte(&mut self, b: u8) -> &mut Self {
        self.bytes.push(b);
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn chunk(&mut self, c: &[u8]) -> &mut Self {
        let len = u16::try_from(c.len()).unwrap_or(u16::MAX);
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(&c[..usize::from(len)]);
        self
    }
    /// A component type or id: from [`TYPES`] (`0..`), or raw (`0xff` then a chunk).
    pub fn ty(&mut self, i: u8) -> &mut Self {
        self.byte(i)
    }
    pub fn raw_ty(&mut self, s: &str) -> &mut Self {
        self.byte(0xff).chunk(s.as_bytes())
    }
    /// A cluster id from [`CLUSTERS`] (`0..`), or raw (`0xff` then a chunk).
    pub fn cluster(&mut self, i: u8) -> &mut Self {
        self.byte(i)
    }
    pub fn raw_cluster(&mut self, s: &[u8]) -> &mut Self {
        self.byte(0xff).chunk(s)
    }
    /// Advance the op clock by `secs` seconds (`< 0xff`).
    pub fn time(&mut self, secs: u8) -> &mut Self {
        self.byte(secs)
    }
}

struct State {
    processors: Vec<(*mut ingero_processor, String)>,
    extensions: Vec<*mut ingero_extension>,
    clock: u64,
}

impl State {
    fn time(&mut self, r: &mut Reader) -> u64 {
        match r.byte() {
            0xff => r.u64(),
            secs => {
                self.clock = self.clock.saturating_add(u64::from(secs) * 1_000_000_000);
                self.clock
            }
        }
    }

    fn processor(&self, r: &mut Reader) -> Option<(*mut ingero_processor, String)> {
        let i = usize::from(r.byte());
        (!self.processors.is_empty()).then(|| self.processors[i % self.processors.len()].clone())
    }

    fn extension(&self, r: &mut Reader) -> Option<*mut ingero_extension> {
        let i = usize::from(r.byte());
        (!self.extensions.is_empty()).then(|| self.extensions[i % self.extensions.len()])
    }
}

fn ty<'a>(r: &mut Reader<'a>) -> &'a [u8] {
    match r.byte() {
        0xff => r.chunk(),
        i => TYPES[usize::from(i) % TYPES.len()].as_bytes(),
    }
}

fn cluster<'a>(r: &mut Reader<'a>) -> &'a [u8] {
    match r.byte() {
        0xff => r.chunk(),
        i => CLUSTERS[usize::from(i) % CLUSTERS.len()].as_bytes(),
    }
}

/// `(ptr, len)` of a byte string; empty strings are passed as `(NULL, 0)` half the time.
fn raw(b: &[u8], null_if_empty: bool) -> (*const u8, usize) {
    if b.is_empty() && null_if_empty {
        (ptr::null(), 0)
    } else {
        (b.as_ptr(), b.len())
    }
}

/// The thread's last error, as the ABI returns it.
fn last_error() -> String {
    let mut b = empty();
    // SAFETY: `b` is a writable, empty buffer.
    let code = unsafe { ingero_last_error(&mut b) };
    assert_eq!(code, INGERO_OK, "ingero_last_error failed");
    String::from_utf8(take(&mut b)).unwrap_or_else(|e| panic!("last error is not UTF-8: {e}"))
}

/// Check a call's code against the documented set and the last-error rule.
fn check(call: &str, code: ingero_result, allowed: &[ingero_result]) -> ingero_result {
    assert_ne!(
        code,
        INGERO_ERR_PANIC,
        "{call}: panic caught at the boundary: {}",
        last_error()
    );
    assert!(
        code == INGERO_OK || allowed.contains(&code),
        "{call}: undocumented result {code:?} ({})",
        last_error()
    );
    let msg = last_error();
    if matches!(code, INGERO_OK | INGERO_NO_THRESHOLD) {
        assert!(msg.is_empty(), "{call}: {code:?} left a last error: {msg}");
    } else {
        assert!(!msg.is_empty(), "{call}: {code:?} without a last error");
    }
    code
}

/// Copy a library buffer out and free it.
fn take(b: &mut ingero_buf) -> Vec<u8> {
    assert_eq!(
        b.ptr.is_null(),
        b.len == 0,
        "ingero_buf {{ptr: {:?}, len: {}}}",
        b.ptr,
        b.len
    );
    let v = if b.ptr.is_null() {
        Vec::new()
    } else {
        // SAFETY: the library filled `b` with a live allocation of `len` bytes.
        unsafe { std::slice::from_raw_parts(b.ptr, b.len) }.to_vec()
    };
    // SAFETY: `b` is empty or came from the library.
    unsafe { ingero_buf_free(b) };
    assert!(
        b.ptr.is_null() && b.len == 0,
        "ingero_buf_free did not reset"
    );
    v
}

fn empty() -> ingero_buf {
    ingero_buf {
        ptr: ptr::null_mut(),
        len: 0,
    }
}

fn sentinel_buf() -> ingero_buf {
    ingero_buf {
        ptr: ptr::dangling_mut(),
        len: 0xdead,
    }
}

fn is_sentinel(b: &ingero_buf) -> bool {
    b.ptr == ptr::dangling_mut() && b.len == 0xdead
}

fn json(call: &str, bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "{call}: output is not JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        )
    })
}

fn decodes(call: &str, bytes: &[u8]) {
    if let Err(e) = ExportMetricsServiceRequest::decode(bytes) {
        panic!("{call}: output batch does not decode: {e}");
    }
}

/// Codes every `(ptr, len)` input can produce.
const INPUT_ERRS: [ingero_result; 3] = [
    INGERO_ERR_NULL_ARGUMENT,
    INGERO_ERR_INVALID_LENGTH,
    INGERO_ERR_INVALID_UTF8,
];
/// Codes of creating a component.
const NEW_ERRS: [ingero_result; 7] = [
    INGERO_ERR_NULL_ARGUMENT,
    INGERO_ERR_INVALID_LENGTH,
    INGERO_ERR_INVALID_UTF8,
    INGERO_ERR_UNKNOWN_TYPE,
    INGERO_ERR_INVALID_CONFIG,
    INGERO_ERR_INVALID_ARGUMENT,
    INGERO_ERR_WRONG_KIND,
];

pub fn ffi(data: &[u8]) {
    let mut r = Reader::new(data);
    let mut s = State {
        processors: Vec::new(),
        extensions: Vec::new(),
        clock: T0,
    };
    for _ in 0..MAX_OPS {
        if r.is_empty() {
            break;
        }
        let op = r.byte() % OPS;
        // SAFETY: every pointer passed below is NULL, a live handle from `s`, or points
        // into a live Rust value of the right type and length.
        unsafe { step(op, &mut r, &mut s) };
    }
    for (p, _) in s.processors.drain(..) {
        // SAFETY: live handles, freed once.
        unsafe {
            check("shutdown", ingero_processor_shutdown(p), &[]);
            ingero_processor_free(p);
        }
    }
    for e in s.extensions.drain(..) {
        // SAFETY: live handle, freed once.
        unsafe { ingero_extension_free(e) };
    }
}

/// # Safety
/// Only called by [`ffi`], whose state holds live handles only.
unsafe fn step(op: u8, r: &mut Reader, s: &mut State) {
    match op {
        x if x == Op::ProcessorNew as u8 => {
            let id = ty(r);
            let cfg = r.chunk();
            let (ip, il) = raw(id, true);
            let (cp, cl) = raw(cfg, true);
            let mut out: *mut ingero_processor = ptr::dangling_mut();
            // SAFETY: valid inputs, writable output.
            let code = check(
                "processor_new",
                unsafe { ingero_processor_new(ip, il, cp, cl, &mut out) },
                &NEW_ERRS,
            );
            if code != INGERO_OK {
                assert_eq!(
                    out,
                    ptr::dangling_mut(),
                    "processor_new wrote its output on {code:?}"
                );
            } else {
                assert!(!out.is_null() && out != ptr::dangling_mut());
            }
            compare_validate(id, cfg, code);
            if code == INGERO_OK {
                let kind = String::from_utf8_lossy(id)
                    .split('/')
                    .next()
                    .unwrap_or("")
                    .to_string();
                if s.processors.len() < MAX_HANDLES {
                    s.processors.push((out, kind));
                } else {
                    // SAFETY: fresh handle.
                    unsafe { ingero_processor_free(out) };
                }
            }
        }
        x if x == Op::ExtensionNew as u8 => {
            let id = ty(r);
            let cfg = r.chunk();
            let (ip, il) = raw(id, true);
            let (cp, cl) = raw(cfg, true);
            let mut out: *mut ingero_extension = ptr::dangling_mut();
            // SAFETY: valid inputs, writable output.
            let code = check(
                "extension_new",
                unsafe { ingero_extension_new(ip, il, cp, cl, &mut out) },
                &NEW_ERRS,
            );
            if code != INGERO_OK {
                assert_eq!(
                    out,
                    ptr::dangling_mut(),
                    "extension_new wrote its output on {code:?}"
                );
            }
            compare_validate(id, cfg, code);
            if code == INGERO_OK {
                if s.extensions.len() < MAX_HANDLES {
                    s.extensions.push(out);
                } else {
                    // SAFETY: fresh handle.
                    unsafe { ingero_extension_free(out) };
                }
            }
        }
        x if x == Op::ProcessorStart as u8 => {
            let Some((p, _)) = s.processor(r) else { return };
            let mask = r.byte();
            let list: Vec<*const ingero_extension> = s
                .extensions
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, e)| e.cast_const())
                .collect();
            let lp = if list.is_empty() {
                ptr::null()
            } else {
                list.as_ptr()
            };
            // SAFETY: live handles.
            check(
                "processor_start",
                unsafe { ingero_processor_start(p, lp, list.len()) },
                &[INGERO_ERR_START],
            );
        }
        x if x == Op::ProcessBytes as u8 => {
            let Some((p, kind)) = s.processor(r) else {
                return;
            };
            let batch = r.chunk();
            let c = cluster(r);
            let t = s.time(r);
            // SAFETY: live handle, valid inputs.
            unsafe { process(p, &kind, batch, c, t) };
        }
        x if x == Op::ProcessAgents as u8 => {
            let Some((p, kind)) = s.processor(r) else {
                return;
            };
            let c = String::from_utf8_lossy(cluster(r)).into_owned();
            let n = usize::from(r.byte() % 16) + 1;
            let state = r.byte();
            let t = s.time(r);
            let mut req = ExportMetricsServiceRequest::default();
            for i in 0..n {
                let score = f64::from(r.byte()) / 255.0;
                let mut push = testkit::AgentPush::new(&c, &format!("{c}-n{i}"), score).at(t);
                push = match state % 4 {
                    0 => push,
                    1 => push.state("calibrating"),
                    2 => push
                        .world(n as i64, i as i64)
                        .gpu("NVIDIA H100 80GB HBM3", 8),
                    _ => push.provider("aws").cohort("0123456789abcdef"),
                };
                req.resource_metrics
                    .extend(push.to_proto().resource_metrics);
            }
            let bytes = req.encode_to_vec();
            let pass_cluster = if state & 0x80 != 0 { c.as_bytes() } else { &[] };
            // SAFETY: live handle, valid inputs.
            unsafe { process(p, &kind, &bytes, pass_cluster, t) };
        }
        x if x == Op::Tick as u8 => {
            let Some((p, _)) = s.processor(r) else { return };
            let t = s.time(r);
            let mut out = sentinel_buf();
            // SAFETY: live handle, writable output.
            let code = check(
                "tick",
                unsafe { ingero_processor_tick(p, t, &mut out) },
                &[],
            );
            if code == INGERO_OK {
                decodes("tick", &take(&mut out));
            }
        }
        x if x == Op::Threshold as u8 || x == Op::PushHeaders as u8 => {
            let Some(e) = s.extension(r) else { return };
            let c = cluster(r);
            // SAFETY: live handle, valid inputs.
            unsafe { threshold(e, c) };
        }
        x if x == Op::Route as u8 => {
            let Some(e) = s.extension(r) else { return };
            let admin = r.byte() & 1 == 1;
            let method = match r.byte() {
                0xff => r.chunk(),
                i => [&b"GET"[..], b"POST", b"HEAD", b"OPTIONS"][usize::from(i) % 4],
            };
            let path = match r.byte() {
                0xff => r.chunk(),
                i => [
                    &b"/api/v1/threshold"[..],
                    b"/api/v1/diagnostics",
                    b"/",
                    b"/api/v1/threshold/",
                ][usize::from(i) % 4],
            };
            let query = match r.byte() {
                0xff => r.chunk(),
                i => [
                    &b""[..],
                    b"cluster_id=c0",
                    b"cluster_id=prod&x=1",
                    b"cluster_id=gpu%20cluster%2F7",
                ][usize::from(i) % 4],
            };
            let (mp, ml) = raw(method, false);
            let (pp, pl) = raw(path, false);
            let (qp, ql) = raw(query, true);
            let mut out = ingero_http_response {
                status: 0xdead,
                content_type: sentinel_buf(),
                headers: sentinel_buf(),
                body: sentinel_buf(),
            };
            let f = if admin {
                ingero_extension_route_admin
            } else {
                ingero_extension_route_agent
            };
            // SAFETY: live handle, valid inputs, writable output.
            let code = check(
                "route",
                unsafe { f(e, mp, ml, pp, pl, qp, ql, &mut out) },
                &INPUT_ERRS,
            );
            if code == INGERO_OK {
                assert!(
                    (100..600).contains(&out.status),
                    "route: status {}",
                    out.status
                );
                let ct = take(&mut out.content_type);
                assert!(!ct.is_empty(), "route: no content type");
                let hdrs = take(&mut out.headers);
                let hdrs = String::from_utf8(hdrs)
                    .unwrap_or_else(|e| panic!("route: headers not UTF-8: {e}"));
                assert!(hdrs.is_empty() || hdrs.ends_with('\n'));
                for line in hdrs.lines() {
                    assert!(
                        line.contains(": ") && !line.contains('\r'),
                        "route: header line {line:?}"
                    );
                }
                let body = take(&mut out.body);
                if ct.starts_with(b"application/json") {
                    json("route", &body);
                }
                // SAFETY: already emptied; freeing again is documented as safe.
                unsafe { ingero_http_response_free(&mut out) };
            } else {
                assert!(
                    out.status == 0xdead
                        && is_sentinel(&out.body)
                        && is_sentinel(&out.headers)
                        && is_sentinel(&out.content_type),
                    "route wrote its output on {code:?}"
                );
            }
        }
        x if x == Op::ConfigValidate as u8 => {
            let t = ty(r);
            let cfg = r.chunk();
            let (tp, tl) = raw(t, true);
            let (cp, cl) = raw(cfg, true);
            // SAFETY: valid inputs.
            check(
                "config_validate",
                unsafe { ingero_config_validate(tp, tl, cp, cl) },
                &NEW_ERRS,
            );
        }
        x if x == Op::QueryCluster as u8 => {
            let q = r.chunk();
            let (qp, ql) = raw(q, true);
            let mut out = sentinel_buf();
            // SAFETY: valid input, writable output.
            let code = check(
                "query_cluster",
                unsafe { ingero_query_cluster(qp, ql, &mut out) },
                &[INGERO_ERR_INVALID_UTF8, INGERO_ERR_INVALID_ARGUMENT],
            );
            if code == INGERO_OK {
                let id = take(&mut out);
                if !id.is_empty() {
                    let (p, l) = raw(&id, false);
                    // SAFETY: valid input.
                    let v = check(
                        "validate_cluster_id",
                        unsafe { ingero_validate_cluster_id(p, l) },
                        &INPUT_ERRS,
                    );
                    assert_eq!(
                        v,
                        INGERO_OK,
                        "query_cluster returned an id that does not validate: {:?}",
                        String::from_utf8_lossy(&id)
                    );
                }
            } else {
                assert!(
                    is_sentinel(&out),
                    "query_cluster wrote its output on {code:?}"
                );
            }
        }
        x if x == Op::ValidateClusterIds as u8 => {
            let v = r.chunk();
            let (p, l) = raw(v, true);
            // SAFETY: valid inputs.
            let h = check(
                "validate_header_cluster_id",
                unsafe { ingero_validate_header_cluster_id(p, l) },
                &[INGERO_ERR_INVALID_ARGUMENT],
            );
            // SAFETY: valid inputs.
            let d = check(
                "validate_cluster_id",
                unsafe { ingero_validate_cluster_id(p, l) },
                &[INGERO_ERR_INVALID_ARGUMENT, INGERO_ERR_INVALID_UTF8],
            );
            if h == INGERO_OK {
                assert_eq!(
                    d, INGERO_OK,
                    "a valid header cluster id is not a valid cluster id"
                );
            }
        }
        x if x == Op::Introspect as u8 => {
            if let Some((p, _)) = s.processor(r) {
                let mut n = 0xdead_u64;
                // SAFETY: live handle, writable output.
                check(
                    "tick_interval_nanos",
                    unsafe { ingero_processor_tick_interval_nanos(p, &mut n) },
                    &[],
                );
                assert!(n > 0 && n != 0xdead, "tick interval {n}");
                for (name, f) in [
                    (
                        "processor_telemetry_json",
                        ingero_processor_telemetry_json as unsafe extern "C" fn(_, _) -> _,
                    ),
                    (
                        "processor_diagnostics_json",
                        ingero_processor_diagnostics_json,
                    ),
                ] {
                    let mut out = sentinel_buf();
                    // SAFETY: live handle, writable output.
                    check(name, unsafe { f(p, &mut out) }, &[]);
                    json(name, &take(&mut out));
                }
            }
            if let Some(e) = s.extension(r) {
                for (name, f) in [
                    (
                        "extension_config_json",
                        ingero_extension_config_json as unsafe extern "C" fn(_, _) -> _,
                    ),
                    ("extension_telemetry_json", ingero_extension_telemetry_json),
                ] {
                    let mut out = sentinel_buf();
                    // SAFETY: live handle, writable output.
                    check(name, unsafe { f(e, &mut out) }, &[]);
                    json(name, &take(&mut out));
                }
            }
        }
        x if x == Op::StartShutdown as u8 => {
            let which = r.byte();
            if which & 1 == 0 {
                if let Some((p, _)) = s.processor(r) {
                    // SAFETY: live handle.
                    check(
                        "processor_shutdown",
                        unsafe { ingero_processor_shutdown(p) },
                        &[],
                    );
                }
            } else if let Some(e) = s.extension(r) {
                if which & 2 == 0 {
                    // SAFETY: live handle.
                    check(
                        "extension_start",
                        unsafe { ingero_extension_start(e) },
                        &[INGERO_ERR_START],
                    );
                } else {
                    // SAFETY: live handle.
                    check(
                        "extension_shutdown",
                        unsafe { ingero_extension_shutdown(e) },
                        &[],
                    );
                }
            }
        }
        x if x == Op::Free as u8 => {
            let which = r.byte();
            let i = usize::from(r.byte());
            if which & 1 == 0 && !s.processors.is_empty() {
                let (p, _) = s.processors.remove(i % s.processors.len());
                // SAFETY: live handle, removed from the state before freeing.
                unsafe {
                    check("processor_shutdown", ingero_processor_shutdown(p), &[]);
                    ingero_processor_free(p);
                }
            } else if which & 1 == 1 && !s.extensions.is_empty() {
                let e = s.extensions.remove(i % s.extensions.len());
                // SAFETY: live handle, removed from the state before freeing (processors
                // started with it keep its store alive, as documented).
                unsafe { ingero_extension_free(e) };
            }
        }
        _ => {
            // Op::NullArguments
            // SAFETY: live handles or NULL; lengths over the limits are refused before any
            // read.
            unsafe { null_arguments(r, s) };
        }
    }
}

/// Creating with validation's verdict: `ingero_config_validate(kind, cfg)` must agree with
/// `*_new(id, cfg)` (validation accepts both kinds, creation refuses the wrong one).
fn compare_validate(id: &[u8], cfg: &[u8], new_code: ingero_result) {
    if matches!(
        new_code,
        INGERO_ERR_WRONG_KIND
            | INGERO_ERR_INVALID_ARGUMENT
            | INGERO_ERR_INVALID_UTF8
            | INGERO_ERR_NULL_ARGUMENT
            | INGERO_ERR_INVALID_LENGTH
    ) {
        return;
    }
    let kind = id.split(|b| *b == b'/').next().unwrap_or_default();
    let (kp, kl) = raw(kind, true);
    let (cp, cl) = raw(cfg, true);
    // SAFETY: valid inputs.
    let v = check(
        "config_validate",
        unsafe { ingero_config_validate(kp, kl, cp, cl) },
        &NEW_ERRS,
    );
    assert_eq!(
        v,
        new_code,
        "config_validate and *_new disagree on {:?}",
        String::from_utf8_lossy(cfg)
    );
}

/// # Safety
/// `p` is live.
unsafe fn process(p: *mut ingero_processor, kind: &str, batch: &[u8], c: &[u8], t: u64) {
    let (bp, bl) = raw(batch, true);
    let (cp, cl) = raw(c, true);
    let mut out = ingero_process_result {
        modified: true,
        data: sentinel_buf(),
        rejected_points: 0xdead,
    };
    // SAFETY: live handle, valid inputs, writable output.
    let code = check(
        "process",
        unsafe { ingero_processor_process(p, bp, bl, cp, cl, t, &mut out) },
        &[INGERO_ERR_DECODE, INGERO_ERR_INVALID_UTF8],
    );
    if code != INGERO_OK {
        assert!(
            out.modified && is_sentinel(&out.data) && out.rejected_points == 0xdead,
            "process wrote its output on {code:?}"
        );
        // A batch the library refuses does not decode.
        if code == INGERO_ERR_DECODE {
            assert!(
                ExportMetricsServiceRequest::decode(batch).is_err(),
                "process refused a batch that decodes"
            );
        }
        return;
    }
    assert!(!is_sentinel(&out.data), "process left data unwritten");
    if kind == "ingero" || kind == "nccl_peer_lag" {
        assert!(
            !out.modified,
            "{kind} is pass-through but reported modified"
        );
    }
    let data = take(&mut out.data);
    if out.modified {
        decodes("process", &data);
    } else {
        assert!(data.is_empty(), "unmodified result carries data");
    }
}

/// # Safety
/// `e` is live.
unsafe fn threshold(e: *mut ingero_extension, c: &[u8]) {
    let (cp, cl) = raw(c, true);
    let mut th = ingero_threshold {
        threshold: -7.0,
        quorum_met: true,
    };
    // SAFETY: live handle, valid inputs, writable output.
    let a = check(
        "extension_threshold",
        unsafe { ingero_extension_threshold(e, cp, cl, &mut th) },
        &[
            INGERO_NO_THRESHOLD,
            INGERO_ERR_INVALID_ARGUMENT,
            INGERO_ERR_INVALID_UTF8,
        ],
    );
    if std::env::var_os("FUZZ_TRACE").is_some() {
        eprintln!("threshold {:?} -> {a:?} {th:?}", String::from_utf8_lossy(c));
    }
    if a == INGERO_OK {
        assert!(
            (0.1..=0.99).contains(&th.threshold),
            "threshold {} out of range",
            th.threshold
        );
    } else {
        assert!(
            th.threshold == -7.0 && th.quorum_met,
            "extension_threshold wrote its output on {a:?}"
        );
    }
    let mut h = ingero_push_headers {
        threshold: [0xaa; 32],
        threshold_len: 0xdead,
        quorum_met: [0xaa; 32],
        quorum_met_len: 0xdead,
    };
    // SAFETY: live handle, valid inputs, writable output.
    let b = check(
        "extension_push_headers",
        unsafe { ingero_extension_push_headers(e, cp, cl, &mut h) },
        &[
            INGERO_NO_THRESHOLD,
            INGERO_ERR_INVALID_ARGUMENT,
            INGERO_ERR_INVALID_UTF8,
        ],
    );
    assert_eq!(a, b, "threshold read and push headers disagree");
    if b == INGERO_OK {
        assert!(h.threshold_len <= 32 && h.quorum_met_len <= 32);
        let t = std::str::from_utf8(&h.threshold[..h.threshold_len])
            .ok()
            .and_then(|s| s.parse::<f64>().ok());
        let q = &h.quorum_met[..h.quorum_met_len];
        assert!(q == b"true" || q == b"false", "quorum header {q:?}");
        assert_eq!(
            q == b"true",
            th.quorum_met,
            "quorum header and threshold read disagree"
        );
        let t =
            t.unwrap_or_else(|| panic!("threshold header {:?}", &h.threshold[..h.threshold_len]));
        assert!(
            (t - th.threshold).abs() < 0.01,
            "threshold header {t} vs read {}",
            th.threshold
        );
    } else {
        assert!(
            h.threshold_len == 0xdead && h.quorum_met_len == 0xdead && h.threshold == [0xaa; 32],
            "push_headers wrote its output on {b:?}"
        );
    }
}

/// # Safety
/// Handles in `s` are live.
unsafe fn null_arguments(r: &mut Reader, s: &mut State) {
    let what = r.byte() % 6;
    let (id, len) = (b"ingero".as_ptr(), 6usize);
    // SAFETY (all calls): NULL where a pointer is refused, or a length over the limit that
    // is refused before the pointer is read.
    unsafe {
        let code = match what {
            0 => ingero_processor_new(ptr::null(), 6, ptr::null(), 0, &mut ptr::null_mut()),
            1 => ingero_processor_new(id, len, ptr::null(), 0, ptr::null_mut()),
            2 => ingero_processor_new(id, usize::MAX, ptr::null(), 0, &mut ptr::null_mut()),
            3 => match s.processor(r) {
                Some((p, _)) => ingero_processor_process(
                    p,
                    ptr::null(),
                    10,
                    ptr::null(),
                    0,
                    0,
                    &mut ingero_process_result {
                        modified: false,
                        data: empty(),
                        rejected_points: 0,
                    },
                ),
                None => ingero_processor_tick(ptr::null(), 0, &mut empty()),
            },
            4 => match s.extension(r) {
                Some(e) => ingero_extension_threshold(e, b"c0".as_ptr(), 2, ptr::null_mut()),
                None => ingero_extension_start(ptr::null()),
            },
            _ => match s.processor(r) {
                Some((p, _)) => ingero_processor_start(p, ptr::null(), 3),
                None => ingero_query_cluster(ptr::null(), usize::MAX, ptr::null_mut()),
            },
        };
        let want = if what == 2 || (what == 5 && s.processors.is_empty()) {
            INGERO_ERR_INVALID_LENGTH
        } else {
            INGERO_ERR_NULL_ARGUMENT
        };
        assert_eq!(
            check("null_arguments", code, &[want]),
            want,
            "null_arguments case {what}"
        );
    }
}
