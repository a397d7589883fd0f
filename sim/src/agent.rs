//! One virtual agent: the agent's own health core, threshold cache and payload builders
//! (`ingero-agent-core`), fed with simulated raw signals instead of eBPF events.
//!
//! A tick does what `ingero_agent::agent::Agent::tick` does, minus I/O: the core runs on
//! the cached threshold as it stood before this tick's push, the health push (and a
//! straggler event when the core emits one, and the NCCL points gathered since the last
//! tick) are built as the agent builds them, and the answer to the health push goes through
//! the agent's strict header parsing into its cache, for use on the next tick.

use component::Timestamp;
use component::otlp::ExportMetricsServiceRequest;
use ingero_agent_core::health::SignalSet;
use ingero_agent_core::health::core::{CoreConfig, FleetView, HealthCore, TickInput, TickOutcome};
use ingero_agent_core::health::threshold::{ThresholdCache, parse_headers};
use ingero_agent_core::nccl::{NcclPoint, nccl_request};
use ingero_agent_core::payload::{self, GpuInfo, HealthContext, Identity};

/// Consecutive failed health pushes after which the agent counts Fleet as unreachable
/// (`ingero_agent::fleet::client::FAILURE_THRESHOLD`, which lives with the agent's HTTP
/// client and is not part of the shared core).
pub const FAILURE_THRESHOLD: u32 = 3;

/// The simulated hardware: what `ingero.node.info` says.
pub const GPU_MODEL: &str = "NVIDIA H100 80GB HBM3";
pub const GPU_COUNT: i64 = 8;
/// The cloud the simulated nodes say they run on (`ingero.provider`, health pushes): with
/// the GPU model it prices their time in Fleet's cost view (built-in rate table).
pub const PROVIDER: &str = "aws";

/// What a push is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushKind {
    Health,
    StragglerEvent,
    Nccl,
}

/// The requests one tick pushes, in the agent's order.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub kind: PushKind,
    pub request: ExportMetricsServiceRequest,
}

/// The answer to a health push as the agent's HTTP client sees it: success, and the two
/// threshold headers as received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthAnswer {
    pub ok: bool,
    pub threshold: Option<String>,
    pub quorum_met: Option<String>,
}

#[derive(Debug)]
pub struct VirtualAgent {
    identity: Identity,
    gpu: GpuInfo,
    core: HealthCore,
    cache: ThresholdCache,
    failures: u32,
    events: u64,
    nccl: Vec<NcclPoint>,
}

impl VirtualAgent {
    pub fn new(identity: Identity, cfg: CoreConfig) -> Self {
        VirtualAgent {
            identity,
            gpu: GpuInfo {
                model: GPU_MODEL.into(),
                count: GPU_COUNT,
            },
            core: HealthCore::new(cfg),
            cache: ThresholdCache::new(),
            failures: 0,
            events: 0,
            nccl: Vec::new(),
        }
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn core(&self) -> &HealthCore {
        &self.core
    }

    pub fn is_straggler(&self) -> bool {
        self.core.is_straggler()
    }

    /// The threshold the agent holds.
    pub fn cached_threshold(&self) -> Option<f64> {
        self.cache.get().map(|c| c.value)
    }

    /// Queue an NCCL point for the next tick's export.
    pub fn record_nccl(&mut self, p: NcclPoint) {
        self.nccl.push(p);
    }

    /// One tick at `now` on `raw` signals with `launches` kernel launches in the window.
    pub fn tick(
        &mut self,
        raw: SignalSet,
        launches: i64,
        now: Timestamp,
    ) -> (TickOutcome, Vec<Outgoing>) {
        let input = TickInput {
            raw: Some(raw),
            kernel_launches: launches,
            other_work: raw.compute > 0.0,
            observed_at: now,
            sync_wait: 0.0,
        };
        let fleet = FleetView {
            cached: self.cache.get(),
            fleet_reachable: self.failures < FAILURE_THRESHOLD,
        };
        let outcome = self.core.tick(input, fleet, now);
        let mut out = Vec::with_capacity(3);
        if let Some(report) = &outcome.report {
            let ctx = HealthContext {
                identity: &self.identity,
                provider: Some(PROVIDER),
                gpu: Some(&self.gpu),
                per_cgroup: &[],
                now,
            };
            if let Some(request) = payload::health_request(report, &ctx) {
                out.push(Outgoing {
                    kind: PushKind::Health,
                    request,
                });
            }
        }
        if let Some(e) = &outcome.straggler {
            self.events += 1;
            // The agent uses a random UUID; a counter keeps runs reproducible.
            let event_id = format!("{}-{}", self.identity.node_id, self.events);
            out.push(Outgoing {
                kind: PushKind::StragglerEvent,
                request: payload::straggler_request(&self.identity, e, &event_id, None, now),
            });
        }
        if !self.nccl.is_empty() {
            let points = std::mem::take(&mut self.nccl);
            out.push(Outgoing {
                kind: PushKind::Nccl,
                request: nccl_request(&self.identity, &points),
            });
        }
        (outcome, out)
    }

    /// The answer to this tick's health push, received at `now`.
    pub fn answer(&mut self, a: &HealthAnswer, now: Timestamp) {
        if a.ok {
            self.failures = 0;
            let p = parse_headers(a.threshold.as_deref(), a.quorum_met.as_deref());
            let _rejected = self.cache.apply_headers(p, now);
        } else {
            self.failures = self.failures.saturating_add(1);
        }
    }
}
