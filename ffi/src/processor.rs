//! Processor handles: create from config, start against extensions, process OTLP protobuf
//! batches, tick, telemetry and diagnostics.

use std::sync::Arc;

use component::otlp::ExportMetricsServiceRequest;
use component::{BatchContext, ComponentId, Extension, MetricFamily, StaticHost, Timestamp};
use prost::Message;

use crate::buf::{
    INGERO_MAX_BATCH_BYTES, INGERO_MAX_CONFIG_BYTES, INGERO_MAX_EXTENSIONS, INGERO_MAX_NAME_BYTES,
    INGERO_MAX_QUERY_BYTES, handle, ingero_buf, input, out, text,
};
use crate::extension::ingero_extension;
use crate::registry::{self, BuiltProcessor};
use crate::result::{
    Failure, INGERO_ERR_DECODE, INGERO_ERR_INVALID_LENGTH, INGERO_ERR_NULL_ARGUMENT,
    INGERO_ERR_START, INGERO_OK, guard, guard_void, ingero_result,
};

/// An opaque processor instance (`ingero`, `provider_lookup` or `nccl_peer_lag`).
#[allow(non_camel_case_types)]
pub struct ingero_processor {
    id: ComponentId,
    built: BuiltProcessor,
}

impl std::fmt::Debug for ingero_processor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ingero_processor")
            .field("id", &self.id)
            .field("built", &self.built)
            .finish()
    }
}

thread_local! {
    /// Allocations of the pass-through batches decoded on this thread, for the next one
    /// (bounded, see `select::Recycler`). Freed with the thread.
    static RECYCLER: std::cell::RefCell<crate::select::Recycler> =
        std::cell::RefCell::new(crate::select::Recycler::default());
}

/// What one `ingero_processor_process` call produced.
#[repr(C)]
#[derive(Debug)]
#[allow(non_camel_case_types)]
pub struct ingero_process_result {
    /// True when the processor changed the batch: `data` then holds the new batch
    /// (`MetricsData` protobuf, possibly empty when everything was consumed). False: keep
    /// the input as it was; `data` is empty.
    pub modified: bool,
    /// The batch after processing, when `modified`. Free with `ingero_buf_free`.
    pub data: ingero_buf,
    /// Data points the processor refused (counted in its telemetry too).
    pub rejected_points: u64,
}

/// Create a processor from its id (`type[/name]`, e.g. `ingero` or `ingero/gpu`) and its
/// config (YAML or JSON bytes of the component's own subtree; empty means all defaults).
/// On success `*out` receives a new handle, to be released with `ingero_processor_free`.
/// Config errors are `INGERO_ERR_INVALID_CONFIG` with every problem, one `key.path: message`
/// per line, in `ingero_last_error`.
///
/// Thread safety: may be called from any thread.
///
/// # Safety
/// `id`/`config` are NULL or valid for reads of `id_len`/`config_len` bytes; `out` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_new(
    id: *const u8,
    id_len: usize,
    config: *const u8,
    config_len: usize,
    out_processor: *mut *mut ingero_processor,
) -> ingero_result {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let id = unsafe { text(id, id_len, INGERO_MAX_NAME_BYTES, "id") }?;
        // SAFETY: as above.
        let cfg = unsafe { input(config, config_len, INGERO_MAX_CONFIG_BYTES, "config") }?;
        // SAFETY: `out_processor` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_processor, "out_processor") }?;
        let id = registry::parse_id(id)?;
        let value = registry::parse_config(cfg)?;
        let built = registry::build_processor(id.kind(), &value)?;
        slot.write(Box::into_raw(Box::new(ingero_processor { id, built })));
        Ok(INGERO_OK)
    })
}

/// Release a processor. NULL is a no-op. Call `ingero_processor_shutdown` first if it was
/// started.
///
/// Thread safety: no other call may use `processor` concurrently or afterwards.
///
/// # Safety
/// `processor` is NULL or a handle from `ingero_processor_new` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_free(processor: *mut ingero_processor) {
    guard_void(|| {
        if !processor.is_null() {
            // SAFETY: per the contract the handle came from `Box::into_raw` and is live.
            drop(unsafe { Box::from_raw(processor) });
        }
    });
}

/// Start a processor with a host whose extension list is `extensions[0..n_extensions]` (in
/// that order), as the collector's `host.GetExtensions()`. The `ingero` processor publishes
/// its thresholds into the first `ingero_threshold` extension in the list (none: it still
/// computes, but agents get no threshold). The processor keeps a reference to that
/// extension's store, so freeing the extension afterwards is memory-safe. Starting again
/// after `ingero_processor_shutdown` is allowed.
///
/// Thread safety: do not call concurrently with another start/shutdown of the same handle.
///
/// # Safety
/// `processor` is a live handle or NULL; `extensions` is NULL (with `n_extensions == 0`) or
/// points to `n_extensions` live extension handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_start(
    processor: *const ingero_processor,
    extensions: *const *const ingero_extension,
    n_extensions: usize,
) -> ingero_result {
    guard(|| {
        // SAFETY: `processor` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let p = unsafe { handle(processor, "processor") }?;
        if n_extensions > INGERO_MAX_EXTENSIONS {
            return Err(Failure::with(
                INGERO_ERR_INVALID_LENGTH,
                format!(
                    "n_extensions: {n_extensions} exceeds the limit of {INGERO_MAX_EXTENSIONS}"
                ),
            ));
        }
        let list: &[*const ingero_extension] = if n_extensions == 0 {
            &[]
        } else if extensions.is_null() {
            return Err(Failure::with(
                INGERO_ERR_NULL_ARGUMENT,
                "extensions: NULL with n_extensions > 0",
            ));
        } else {
            // SAFETY: non-NULL, bounded length, validity guaranteed by the caller.
            unsafe { std::slice::from_raw_parts(extensions, n_extensions) }
        };
        let mut host = StaticHost::default();
        for (i, e) in list.iter().enumerate() {
            // SAFETY: each entry of `extensions` is NULL or a live extension handle from this
            // library, not freed during this call (this function's contract).
            let e = unsafe { handle(*e, &format!("extensions[{i}]")) }?;
            let ext: Arc<dyn Extension> = e.shared();
            host.extensions.push((e.id().clone(), ext));
        }
        p.built
            .inner
            .start(&host)
            .map_err(|e| Failure::with(INGERO_ERR_START, format!("{}: {e}", p.id)))?;
        Ok(INGERO_OK)
    })
}

/// Stop a processor (it drops its link to the extension's store). Safe to call more than
/// once.
///
/// Thread safety: do not call concurrently with start/shutdown of the same handle; process
/// and tick calls may still run and are answered.
///
/// # Safety
/// `processor` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_shutdown(
    processor: *const ingero_processor,
) -> ingero_result {
    guard(|| {
        // SAFETY: `processor` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        unsafe { handle(processor, "processor") }?
            .built
            .inner
            .shutdown();
        Ok(INGERO_OK)
    })
}

/// Process one batch: `data` is OTLP protobuf (`MetricsData` or, identically on the wire,
/// `ExportMetricsServiceRequest`). `cluster_id` is the cluster the request named (the
/// `cluster_id` query parameter or header; `(NULL, 0)` when none) and
/// `received_at_unix_nano` the host's receive time. On success `*out` is written (see
/// `ingero_process_result`). A batch that does not decode is `INGERO_ERR_DECODE` and changes
/// nothing.
///
/// Thread safety: may be called from many threads at once on the same handle.
///
/// # Safety
/// `processor` is NULL or live; `data`/`cluster_id` are NULL or valid for their lengths;
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_process(
    processor: *const ingero_processor,
    data: *const u8,
    data_len: usize,
    cluster_id: *const u8,
    cluster_id_len: usize,
    received_at_unix_nano: u64,
    out_result: *mut ingero_process_result,
) -> ingero_result {
    guard(|| {
        // SAFETY: `processor` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let p = unsafe { handle(processor, "processor") }?;
        // SAFETY: forwarded from this function's contract.
        let bytes = unsafe { input(data, data_len, INGERO_MAX_BATCH_BYTES, "data") }?;
        // SAFETY: as above.
        let cluster = unsafe {
            text(
                cluster_id,
                cluster_id_len,
                INGERO_MAX_QUERY_BYTES,
                "cluster_id",
            )
        }?;
        // SAFETY: `out_result` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_result, "out_result") }?;
        let mut req = match p.built.passes_through {
            Some(reads) => RECYCLER
                .with_borrow_mut(|r| crate::select::decode_selected_reusing(bytes, &reads, r)),
            None => ExportMetricsServiceRequest::decode(bytes).map_err(Into::into),
        }
        .map_err(|e| Failure::with(INGERO_ERR_DECODE, format!("data: {e}")))?;
        let ctx = BatchContext {
            cluster_id: (!cluster.is_empty()).then(|| Arc::from(cluster)),
            received_at: Timestamp::from_nanos(received_at_unix_nano),
            tenant: None,
        };
        // Compared as encodings: a NaN value left untouched is not equal to itself.
        #[cfg(debug_assertions)]
        let before = p.built.passes_through.map(|_| req.encode_to_vec());
        let outcome = p.built.inner.process(&mut req.resource_metrics, &ctx);
        #[cfg(debug_assertions)]
        if let Some(before) = before {
            assert!(
                before == req.encode_to_vec(),
                "{} declared pass-through but changed the batch",
                p.id
            );
        }
        let result = if p.built.passes_through.is_some() {
            // The decoded batch is not used any more: its strings and vectors serve the
            // next batch decoded on this thread.
            RECYCLER.with_borrow_mut(|r| r.recycle(req));
            ingero_process_result {
                modified: false,
                data: ingero_buf::EMPTY,
                rejected_points: outcome.rejected_points,
            }
        } else {
            let encoded = req.encode_to_vec();
            let modified = encoded != bytes;
            ingero_process_result {
                modified,
                data: if modified {
                    ingero_buf::from_vec(encoded)
                } else {
                    ingero_buf::EMPTY
                },
                rejected_points: outcome.rejected_points,
            }
        };
        slot.write(result);
        Ok(INGERO_OK)
    })
}

/// Run the processor's periodic work at `now_unix_nano`. `*out` receives what the tick
/// emitted as `MetricsData` protobuf (empty when nothing), for the next consumer.
///
/// Thread safety: may run concurrently with process calls; call from one ticker at a time.
///
/// # Safety
/// `processor` is NULL or live; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_tick(
    processor: *const ingero_processor,
    now_unix_nano: u64,
    out_metrics: *mut ingero_buf,
) -> ingero_result {
    guard(|| {
        // SAFETY: `processor` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let p = unsafe { handle(processor, "processor") }?;
        // SAFETY: `out_metrics` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_metrics, "out_metrics") }?;
        let emitted = p.built.inner.tick(Timestamp::from_nanos(now_unix_nano));
        let bytes = if emitted.is_empty() {
            Vec::new()
        } else {
            ExportMetricsServiceRequest {
                resource_metrics: emitted,
            }
            .encode_to_vec()
        };
        slot.write(ingero_buf::from_vec(bytes));
        Ok(INGERO_OK)
    })
}

/// How often the host should call `ingero_processor_tick`, in nanoseconds (`ingero`:
/// `push_interval`; the others: `tick_interval`).
///
/// Thread safety: any thread.
///
/// # Safety
/// `processor` is NULL or live; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_tick_interval_nanos(
    processor: *const ingero_processor,
    out_nanos: *mut u64,
) -> ingero_result {
    guard(|| {
        // SAFETY: `processor` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let p = unsafe { handle(processor, "processor") }?;
        // SAFETY: `out_nanos` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_nanos, "out_nanos") }?;
        slot.write(u64::try_from(p.built.tick_interval.as_nanos()).unwrap_or(u64::MAX));
        Ok(INGERO_OK)
    })
}

/// The processor's self-metrics as a JSON array of Prometheus-named families:
/// `[{"name","help","type":"gauge"|"counter","samples":[{"labels":[[k,v],..],"value"}]}]`.
///
/// Thread safety: any thread, concurrently with process and tick.
///
/// # Safety
/// `processor` is NULL or live; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_telemetry_json(
    processor: *const ingero_processor,
    out_json: *mut ingero_buf,
) -> ingero_result {
    guard(|| {
        // SAFETY: `processor` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let p = unsafe { handle(processor, "processor") }?;
        // SAFETY: `out_json` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_json, "out_json") }?;
        let mut fams: Vec<MetricFamily> = Vec::new();
        p.built.inner.telemetry(&mut fams);
        slot.write(ingero_buf::from_vec(crate::families_json(&fams)?));
        Ok(INGERO_OK)
    })
}

/// The processor's diagnostics as JSON (`null` when it has none).
///
/// Thread safety: any thread.
///
/// # Safety
/// `processor` is NULL or live; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_processor_diagnostics_json(
    processor: *const ingero_processor,
    out_json: *mut ingero_buf,
) -> ingero_result {
    guard(|| {
        // SAFETY: `processor` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let p = unsafe { handle(processor, "processor") }?;
        // SAFETY: `out_json` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_json, "out_json") }?;
        let value = p
            .built
            .inner
            .diagnostics()
            .unwrap_or(serde_json::Value::Null);
        slot.write(ingero_buf::from_vec(crate::to_json(&value)?));
        Ok(INGERO_OK)
    })
}
