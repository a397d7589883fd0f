//! The `echo` exporter: OTLP batches into the DuckDB store. A batch's delivery is pending
//! until the writer committed it (the receiver answers only then); a full queue answers
//! 503 / `UNAVAILABLE` with the configured retry delay.

use std::sync::{Arc, OnceLock};

use component::exporter::{Delivery, Exporter, Unavailable};
use component::factory::ExporterFactory;
use component::factory::{Kind, Metadata};
use component::{
    ComponentId, ConfigErrors, ConfigValue, Host, MetricFamily, ProcessOutcome, ResourceMetrics,
    Stability, StartError,
};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::config::StoreConfig;
use crate::extension::EchoApi;
use crate::rows;
use crate::store::{Store, now_ns};

pub static METADATA: Metadata = Metadata {
    kind: Kind::Exporter,
    type_name: crate::EXPORTER_TYPE,
    aliases: &[],
    stability: [
        Some(Stability::Alpha),
        Some(Stability::Alpha),
        Some(Stability::Alpha),
    ],
    module: "echo/src/exporter.rs",
    singleton: false,
    host_tls: false,
    description: "stores metrics, traces and logs in an embedded DuckDB database",
    reads: None,
};

/// Builds `echo` exporters.
#[derive(Debug)]
pub struct EchoExporterFactory;

pub static EXPORTER_FACTORY: EchoExporterFactory = EchoExporterFactory;

impl ExporterFactory for EchoExporterFactory {
    fn metadata(&self) -> &'static Metadata {
        &METADATA
    }

    fn create(
        &self,
        id: &ComponentId,
        cfg: &ConfigValue,
    ) -> Result<Arc<dyn Exporter>, ConfigErrors> {
        let cfg: StoreConfig = component::config::decode(cfg)?;
        Ok(Arc::new(EchoExporter {
            id: id.to_string(),
            cfg,
            store: OnceLock::new(),
        }))
    }
}

/// One `echo` exporter: its store opens at start.
#[derive(Debug)]
pub struct EchoExporter {
    id: String,
    cfg: StoreConfig,
    store: OnceLock<Arc<Store>>,
}

impl EchoExporter {
    fn deliver(&self, rows: impl FnOnce() -> rows::Rows) -> Delivery {
        match self.store.get() {
            Some(s) => s.submit(rows()),
            None => Delivery::Unavailable(Unavailable {
                message: "the echo store is not open".into(),
                retry_after: self.cfg.retry_after,
            }),
        }
    }
}

impl EchoExporter {
    /// Count the `ingero.causal_chains` attributes refused in `rows`; the warning for the
    /// client when there were any.
    fn count_rejected_chains(&self, rows: &rows::Rows) -> Option<String> {
        let n = rows.rejected_chains;
        if n == 0 {
            return None;
        }
        if let Some(s) = self.store.get() {
            s.stats
                .rejected_causal_chains
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        Some(format!(
            "the causal chains of {n} event(s) were dropped ({}); the events are stored",
            rows.chains_error.as_deref().unwrap_or("malformed")
        ))
    }
}

impl Exporter for EchoExporter {
    fn consume_metrics(&self, data: &[ResourceMetrics]) {
        let _ = self.deliver_metrics(data);
    }

    fn deliver_metrics(&self, data: &[ResourceMetrics]) -> (ProcessOutcome, Delivery) {
        let rows = rows::from_metrics(data, None, now_ns());
        let mut outcome = ProcessOutcome::default();
        let n = rows.rejected_nonfinite;
        if n > 0 {
            if let Some(s) = self.store.get() {
                s.stats
                    .rejected_nonfinite
                    .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
            outcome.reject(n, || {
                format!("{n} data points with a NaN or infinite value (or score or threshold) were dropped")
            });
        }
        if let Some(m) = self.count_rejected_chains(&rows) {
            // The points are stored; only their chains are not: a warning (0 rejected).
            outcome.reject(0, || m);
        }
        (outcome, self.deliver(|| rows))
    }

    fn deliver_traces(&self, data: &ExportTraceServiceRequest) -> Delivery {
        let rows = rows::from_traces(data, None, now_ns());
        let _ = self.count_rejected_chains(&rows);
        self.deliver(|| rows)
    }

    fn deliver_logs(&self, data: &ExportLogsServiceRequest) -> Delivery {
        self.deliver(|| rows::from_logs(data, None, now_ns()))
    }

    fn start(&self, host: &dyn Host) -> Result<(), StartError> {
        let store = match self.store.get() {
            Some(s) => s.clone(),
            None => {
                let s =
                    Store::open(self.cfg.clone()).map_err(|e| StartError::Other(e.to_string()))?;
                let _ = self.store.set(s.clone());
                s
            }
        };
        // The API listeners that serve this exporter's store.
        for (_, ext) in host.extensions() {
            if let Some(api) = ext.as_any().and_then(|a| a.downcast::<EchoApi>().ok())
                && api.exporter_id() == self.id
            {
                api.attach(store.clone())
                    .map_err(|e| StartError::Other(format!("cannot serve the store: {e}")))?;
            }
        }
        Ok(())
    }

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        use std::sync::atomic::Ordering::Relaxed;

        use crate::telemetry::{self, spec};
        let Some(s) = self.store.get() else { return };
        let st = &s.stats;
        let l = [(telemetry::LABEL_EXPORTER, self.id.as_str())];
        let counters = [
            (&spec::BATCHES_COMMITTED, &st.batches_committed),
            (&spec::ROWS_COMMITTED, &st.rows_committed),
            (&spec::COMMITS, &st.commits),
            (&spec::COMMIT_FAILURES, &st.commit_failures),
            (&spec::REFUSED_FULL, &st.refused_full),
            (&spec::REJECTED_NONFINITE_POINTS, &st.rejected_nonfinite),
            (&spec::REJECTED_CAUSAL_CHAINS, &st.rejected_causal_chains),
            (&spec::RETENTION_DELETED_ROWS, &st.retention_deleted_rows),
            (&spec::RETENTION_FAILURES, &st.retention_failures),
            (&spec::ROLLUP_ROWS_MERGED, &st.rollup_rows_merged),
            (&spec::ROLLUP_FAILURES, &st.rollup_failures),
            (&spec::QUERIES_OVER_MEMORY, &st.queries_over_memory),
        ];
        for (spec, v) in counters {
            out.push(spec.family().with(&l, v.load(Relaxed) as f64));
        }
        out.push(
            spec::PENDING_BATCHES
                .family()
                .with(&l, st.pending.load(Relaxed).max(0) as f64),
        );
        out.push(
            spec::DATABASE_USED_BYTES
                .family()
                .with(&l, st.used_bytes.load(Relaxed) as f64),
        );
    }

    fn shutdown(&self) {
        if let Some(s) = self.store.get() {
            s.shutdown();
        }
    }
}
