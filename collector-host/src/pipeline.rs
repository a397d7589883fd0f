//! Pipelines: processors in config order, then a fan-out to exporters.
//!
//! A receiver hands a decoded batch to every pipeline of that signal that lists it (the
//! batch is cloned for all but the last). A processor's tick output enters its pipeline
//! right after that processor, so later processors and the exporters see it.
//!
//! An exporter answers each batch with a [`Delivery`]: done, pending (a durable exporter's
//! commit, which the receiver awaits before it answers the client) or unavailable (the
//! exporter is behind: the receiver answers HTTP 503 + `Retry-After` / gRPC `UNAVAILABLE`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use component::otlp::count_points;
use component::recycle::Origin;
use component::{BatchContext, ComponentId, ProcessOutcome, Processor, ResourceMetrics};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::telemetry::{ProcessorCounters, Telemetry};

pub use component::exporter::{AckFuture, Delivery, Exporter, Unavailable};

/// The deliveries of one export across its pipelines and exporters.
#[derive(Default)]
pub struct Acks {
    pending: Vec<AckFuture>,
    unavailable: Option<Unavailable>,
}

impl std::fmt::Debug for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acks")
            .field("pending", &self.pending.len())
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

impl Acks {
    pub fn push(&mut self, d: Delivery) {
        match d {
            Delivery::Done => {}
            Delivery::Pending(f) => self.pending.push(f),
            Delivery::Unavailable(u) => {
                if self.unavailable.is_none() {
                    self.unavailable = Some(u);
                }
            }
        }
    }

    /// Wait for every pending delivery; `Err` if any exporter was or became unavailable
    /// (the longest retry delay wins).
    pub async fn wait(self) -> Result<(), Unavailable> {
        let mut worst = self.unavailable;
        for f in self.pending {
            if let Err(u) = f.await {
                worst = match worst {
                    Some(w) if w.retry_after >= u.retry_after => Some(w),
                    _ => Some(u),
                };
            }
        }
        worst.map_or(Ok(()), Err)
    }
}

/// A processor instance with its counters.
pub struct Stage {
    pub id: ComponentId,
    pub processor: Arc<dyn Processor>,
    pub counters: Arc<ProcessorCounters>,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage").field("id", &self.id).finish()
    }
}

/// A `metrics` pipeline.
pub struct MetricsPipeline {
    pub name: String,
    pub stages: Vec<Arc<Stage>>,
    pub exporters: Vec<Arc<dyn Exporter>>,
    pub telemetry: Arc<Telemetry>,
}

impl std::fmt::Debug for MetricsPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsPipeline")
            .field("name", &self.name)
            .field("stages", &self.stages)
            .field("exporters", &self.exporters.len())
            .finish()
    }
}

/// A pipeline stage panicked; the batch was dropped and counted.
#[derive(Debug, thiserror::Error)]
#[error("processor {0} failed while processing the batch")]
pub struct StagePanic(pub String);

impl MetricsPipeline {
    /// Run a received batch through every processor and exporter.
    pub fn consume(
        &self,
        data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
        acks: &mut Acks,
    ) -> Result<ProcessOutcome, StagePanic> {
        self.consume_from(0, data, ctx, acks)
    }

    /// Run `data` from stage `start` on (tick outputs enter after their processor); the
    /// exporters' deliveries go to `acks`.
    pub fn consume_from(
        &self,
        start: usize,
        data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
        acks: &mut Acks,
    ) -> Result<ProcessOutcome, StagePanic> {
        self.consume_origin(start, data, None, ctx, acks)
    }

    /// [`Self::consume_from`] for the batch a decoder issued as `origin`: handed back to
    /// the thread with it when no stage had it mutably (see
    /// [`component::recycle::Origin`]).
    fn consume_origin(
        &self,
        start: usize,
        mut data: Vec<ResourceMetrics>,
        mut origin: Option<Origin>,
        ctx: &BatchContext,
        acks: &mut Acks,
    ) -> Result<ProcessOutcome, StagePanic> {
        let mut outcome = ProcessOutcome::default();
        // A stage's outgoing points are the next stage's incoming ones: counted once.
        let mut points = None;
        for stage in self.stages.iter().skip(start) {
            let incoming = points.unwrap_or_else(|| count_points(&data));
            stage.counters.incoming.fetch_add(incoming, Relaxed);
            let r = catch_unwind(AssertUnwindSafe(|| {
                stage
                    .processor
                    .process_shared(&data, ctx)
                    .unwrap_or_else(|| {
                        origin = None;
                        stage.processor.process(&mut data, ctx)
                    })
            }));
            match r {
                Ok(o) => outcome.merge(o),
                Err(_) => {
                    self.telemetry.tick_panics.fetch_add(1, Relaxed);
                    tracing::error!(processor = %stage.id, pipeline = %self.name, "processor panicked; batch dropped");
                    return Err(StagePanic(stage.id.to_string()));
                }
            }
            let outgoing = count_points(&data);
            stage.counters.outgoing.fetch_add(outgoing, Relaxed);
            points = Some(outgoing);
        }
        if !data.is_empty() {
            for e in &self.exporters {
                let (o, d) = e.deliver_metrics_as(&data, ctx.tenant.as_deref());
                outcome.merge(o);
                acks.push(d);
            }
        }
        // The batch's strings and vectors go to this thread's pool for the next JSON or
        // protobuf decode here, instead of being freed now and allocated again then.
        component::recycle::recycle_on_this_thread_from(data, origin);
        Ok(outcome)
    }

    /// Index of a processor in this pipeline.
    pub fn stage_index(&self, id: &ComponentId) -> Option<usize> {
        self.stages.iter().position(|s| &s.id == id)
    }
}

/// A `traces` or `logs` pipeline: data passes straight to the exporters.
pub struct PassPipeline {
    pub name: String,
    pub exporters: Vec<Arc<dyn Exporter>>,
}

impl std::fmt::Debug for PassPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassPipeline")
            .field("name", &self.name)
            .finish()
    }
}

/// Everything one receiver feeds.
#[derive(Debug, Default, Clone)]
pub struct Fanout {
    pub metrics: Vec<Arc<MetricsPipeline>>,
    pub traces: Vec<Arc<PassPipeline>>,
    pub logs: Vec<Arc<PassPipeline>>,
}

impl Fanout {
    /// Feed a metrics batch to every metrics pipeline; outcomes are merged, deliveries go
    /// to `acks`.
    pub fn consume_metrics(
        &self,
        data: Vec<ResourceMetrics>,
        ctx: &BatchContext,
        acks: &mut Acks,
    ) -> Result<ProcessOutcome, StagePanic> {
        self.consume_metrics_from(data, None, ctx, acks)
    }

    /// [`Self::consume_metrics`] for the batch a decoder issued as `origin` (see
    /// [`component::recycle::Origin`]): the last pipeline gets the batch itself, with
    /// its origin; the others get copies, without.
    pub fn consume_metrics_from(
        &self,
        data: Vec<ResourceMetrics>,
        origin: Option<Origin>,
        ctx: &BatchContext,
        acks: &mut Acks,
    ) -> Result<ProcessOutcome, StagePanic> {
        let mut outcome = ProcessOutcome::default();
        let n = self.metrics.len();
        let mut data = Some(data);
        for (i, p) in self.metrics.iter().enumerate() {
            let (batch, origin) = if i + 1 == n {
                (data.take().unwrap_or_default(), origin)
            } else {
                (data.clone().unwrap_or_default(), None)
            };
            outcome.merge(p.consume_origin(0, batch, origin, ctx, acks)?);
        }
        Ok(outcome)
    }

    pub fn consume_traces(&self, data: &ExportTraceServiceRequest) -> Acks {
        let mut acks = Acks::default();
        for p in &self.traces {
            for e in &p.exporters {
                acks.push(e.deliver_traces(data));
            }
        }
        acks
    }

    pub fn consume_logs(&self, data: &ExportLogsServiceRequest) -> Acks {
        let mut acks = Acks::default();
        for p in &self.logs {
            for e in &p.exporters {
                acks.push(e.deliver_logs(data));
            }
        }
        acks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::recycle::{self, Origin};
    use component::{Host, MetricFamily, StartError, Timestamp};

    /// A processor that reads batches (through `process_shared`) or changes them.
    struct Probe {
        writes: bool,
    }

    impl Processor for Probe {
        fn start(&self, _: &dyn Host) -> Result<(), StartError> {
            Ok(())
        }
        fn process(&self, data: &mut Vec<ResourceMetrics>, _: &BatchContext) -> ProcessOutcome {
            if let Some(rm) = data.first_mut() {
                rm.schema_url = "changed".into();
            }
            ProcessOutcome::default()
        }
        fn process_shared(
            &self,
            _: &[ResourceMetrics],
            _: &BatchContext,
        ) -> Option<ProcessOutcome> {
            (!self.writes).then(ProcessOutcome::default)
        }
        fn tick(&self, _: Timestamp) -> Vec<ResourceMetrics> {
            Vec::new()
        }
        fn shutdown(&self) {}
        fn telemetry(&self, _: &mut Vec<MetricFamily>) {}
    }

    fn pipeline(stages: &[bool]) -> MetricsPipeline {
        let telemetry = Arc::new(Telemetry::default());
        MetricsPipeline {
            name: "metrics".into(),
            stages: stages
                .iter()
                .enumerate()
                .map(|(i, &writes)| {
                    Arc::new(Stage {
                        id: ComponentId::parse(&format!("probe/{i}")).unwrap(),
                        processor: Arc::new(Probe { writes }),
                        counters: telemetry.processor(&format!("probe/{i}")),
                    })
                })
                .collect(),
            exporters: Vec::new(),
            telemetry,
        }
    }

    fn batch() -> Vec<ResourceMetrics> {
        vec![ResourceMetrics {
            resource: Some(component::otlp::Resource {
                attributes: vec![component::otlp::kv_str("ingero.node.id", "n1")],
                ..Default::default()
            }),
            ..Default::default()
        }]
    }

    /// What the thread kept after the pipeline: the batch, and its origin.
    fn kept() -> (Vec<ResourceMetrics>, Option<Origin>) {
        let mut pool = recycle::take_thread_pool();
        pool.set_writes_in_place(true);
        let kept = pool.take_tree_from();
        recycle::put_thread_pool(pool);
        kept
    }

    fn run(fanout: &Fanout, origin: Option<Origin>) -> (Vec<ResourceMetrics>, Option<Origin>) {
        kept();
        let ctx = BatchContext {
            cluster_id: None,
            received_at: Timestamp::from_nanos(1),
            tenant: None,
        };
        fanout
            .consume_metrics_from(batch(), origin, &ctx, &mut Acks::default())
            .unwrap();
        kept()
    }

    /// A batch goes back to its thread with the origin its decoder gave it only when no
    /// stage had it mutably and it was not copied for another pipeline.
    #[test]
    fn a_batch_keeps_its_origin_only_if_no_stage_could_change_it() {
        let o = Some(Origin::next());
        let one = |stages: &[bool]| Fanout {
            metrics: vec![Arc::new(pipeline(stages))],
            ..Fanout::default()
        };
        // Kept whole (the thread's decodes write in place) either way.
        for (stages, want) in [
            (&[][..], o),
            (&[false][..], o),
            (&[false, false][..], o),
            (&[true][..], None),
            (&[false, true][..], None),
        ] {
            let (tree, origin) = run(&one(stages), o);
            assert_eq!(origin, want, "{stages:?}");
            assert_eq!(tree.len(), 1);
            assert_eq!(tree[0].schema_url.is_empty(), want.is_some());
        }
        assert_eq!(run(&one(&[false]), None).1, None);
        // Two pipelines: the first gets a copy (recycled without an origin), the last the
        // batch itself; the thread keeps the first batch it is handed.
        let two = Fanout {
            metrics: vec![Arc::new(pipeline(&[false])), Arc::new(pipeline(&[false]))],
            ..Fanout::default()
        };
        assert_eq!(run(&two, o).1, None);
    }
}
