//! Generated multi-rank NCCL traces in the agents' wire formats, delivered the way agents
//! deliver them (per node, batched every export interval, with network latency), with
//! injected lag on known ranks, clock offsets, jitter, dropped points and collectives that
//! straddle time-bucket boundaries. Shared by the integration tests and the benchmark.

#![allow(dead_code)]

use component::otlp::{
    KeyValue, NumberDataPoint, NumberValue, ResourceMetrics, gauge_f64, kv_i64, kv_str, point_f64,
    resource_metrics,
};
use ingero_wire::{attr, metric, resource};

pub const MS: f64 = 1e6;
/// A whole second in 2025 (Unix ns): the trace's wall-clock origin.
pub const T0: u64 = 1_760_000_000_000_000_000;

/// Deterministic PRNG (splitmix64) with uniform and normal draws.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(1e-300);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// The wire format of the points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// This project's agent: wall-clock times and `nccl.op_seq`.
    OpSeqWall,
    /// The Ingero agent (`ingero trace --otlp`): monotonic since-boot times, no sequence.
    IngeroMonotonic,
    /// Wall-clock times without a sequence number (time buckets on a synchronised clock).
    WallNoSeq,
}

/// When an injected lag applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// Every step.
    Always,
    /// Each step independently with this probability.
    Fraction(f64),
    /// Steps `k` with `k % period == phase`.
    Every { period: u32, phase: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Injected {
    pub rank: u32,
    pub lag_ms: f64,
    pub pattern: Pattern,
}

impl Injected {
    fn active(&self, step: u32, rng: &mut Rng) -> bool {
        match self.pattern {
            Pattern::Always => true,
            Pattern::Fraction(f) => rng.unit() < f,
            Pattern::Every { period, phase } => step % period.max(1) == phase,
        }
    }

    /// The injected ranks the processor must name (chronic or periodic).
    pub fn expected_period(&self) -> Option<u32> {
        match self.pattern {
            Pattern::Every { period, .. } => Some(period),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub nranks: u32,
    pub ranks_per_node: u32,
    pub steps: u32,
    /// Mean spacing between consecutive collectives.
    pub step_ms: f64,
    /// Spacing varies uniformly by +- this.
    pub step_jitter_ms: f64,
    /// Per-rank entry jitter (normal, sigma).
    pub entry_jitter_ms: f64,
    /// Wall-clock formats: each node's clock is off by a uniform +- this.
    pub clock_error_ms: f64,
    pub format: Format,
    /// Probability that a point is lost before it reaches the processor.
    pub drop_prob: f64,
    pub injected: Vec<Injected>,
    /// Put a collective's on-time entries a few ms before a multiple of `window_ms`, so its
    /// ranks straddle a bucket boundary (late ranks land past it)...
    pub straddle_window_ms: Option<f64>,
    /// ...for this fraction of the collectives (1.0: every one).
    pub straddle_fraction: f64,
    pub export_ms: f64,
    pub latency_ms: (f64, f64),
    pub comm: u64,
    pub op: &'static str,
    pub cluster: &'static str,
    /// Also send the `nccl.collective.bytes` twin of every point (as the agent does).
    pub with_bytes: bool,
    pub seed: u64,
}

impl Spec {
    pub fn new(nranks: u32, format: Format) -> Self {
        Spec {
            nranks,
            ranks_per_node: 8,
            steps: 200,
            step_ms: 3_500.0,
            step_jitter_ms: 400.0,
            entry_jitter_ms: 2.0,
            clock_error_ms: 1.0,
            format,
            drop_prob: 0.0,
            injected: Vec::new(),
            straddle_window_ms: None,
            straddle_fraction: 1.0,
            export_ms: 10_000.0,
            latency_ms: (0.5, 5.0),
            comm: 0x0123_4567_89ab_cdef,
            op: "ncclAllReduce",
            cluster: "gen",
            with_bytes: true,
            seed: 1,
        }
    }

    pub fn nodes(&self) -> u32 {
        self.nranks.div_ceil(self.ranks_per_node.max(1))
    }
}

/// One batch as the processor receives it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub arrival: u64,
    pub rm: ResourceMetrics,
}

#[derive(Debug, Clone)]
pub struct Trace {
    pub deliveries: Vec<Delivery>,
    /// Wall time of the last collective.
    pub last_step: u64,
    /// Duration points delivered.
    pub points: usize,
    /// Points lost on purpose.
    pub dropped: usize,
    /// Monotonic format: the wall time each node booted (its true clock offset).
    pub boot: Vec<u64>,
}

struct Pending {
    true_ns: u64,
    point: NumberDataPoint,
}

fn attrs(spec: &Spec, rank: u32, step: u32) -> Vec<KeyValue> {
    let mut a = vec![
        kv_str(attr::NCCL_OP_TYPE, spec.op),
        kv_str(attr::NCCL_COMM_ID_HASH, format!("{:016x}", spec.comm)),
        kv_i64(attr::NCCL_RANK, i64::from(rank)),
        kv_i64(attr::NCCL_NRANKS, i64::from(spec.nranks)),
        kv_i64(attr::NCCL_DATATYPE, 7),
        kv_i64(attr::NCCL_REDUCE_OP, 0),
    ];
    if spec.format == Format::OpSeqWall {
        a.push(kv_i64(attr::NCCL_OP_SEQ, i64::from(step)));
    }
    a
}

/// Generate the trace.
pub fn generate(spec: &Spec) -> Trace {
    let mut rng = Rng::new(spec.seed);
    let nodes = spec.nodes() as usize;
    let clock_err: Vec<f64> = (0..nodes)
        .map(|_| rng.uniform(-spec.clock_error_ms, spec.clock_error_ms) * MS)
        .collect();
    // Monotonic clocks: each node booted 1 to 100 hours before T0.
    let boot: Vec<u64> = (0..nodes)
        .map(|_| T0 - (rng.uniform(1.0, 100.0) * 3_600_000.0 * MS) as u64)
        .collect();
    let export_phase: Vec<f64> = (0..nodes)
        .map(|_| rng.uniform(0.0, spec.export_ms))
        .collect();
    let mut pending: Vec<Vec<Pending>> = (0..nodes).map(|_| Vec::new()).collect();
    let mut t = T0 as f64 + 5_000.0 * MS;
    let mut last_step = T0;
    let mut points = 0;
    let mut dropped = 0;
    for step in 0..spec.steps {
        t += (spec.step_ms + rng.uniform(-spec.step_jitter_ms, spec.step_jitter_ms)) * MS;
        let straddle = rng.unit() < spec.straddle_fraction;
        let base = match spec.straddle_window_ms {
            Some(w) if straddle => {
                let w = w * MS;
                (t / w).ceil() * w - rng.uniform(1.0, 5.0) * MS
            }
            _ => t,
        };
        last_step = base as u64;
        for rank in 0..spec.nranks {
            let mut entry = base + rng.normal() * spec.entry_jitter_ms * MS;
            for inj in &spec.injected {
                if inj.rank == rank && inj.active(step, &mut rng) {
                    entry += inj.lag_ms * MS;
                }
            }
            if rng.unit() < spec.drop_prob {
                dropped += 1;
                continue;
            }
            let node = (rank / spec.ranks_per_node.max(1)) as usize;
            let true_ns = entry as u64;
            let wire = match spec.format {
                Format::IngeroMonotonic => true_ns - boot[node],
                _ => (entry + clock_err[node]) as u64,
            };
            let duration_ms = 0.02 + rng.unit() * 0.05;
            pending[node].push(Pending {
                true_ns,
                point: point_f64(attrs(spec, rank, step), wire, duration_ms),
            });
            points += 1;
        }
    }
    // Batch each node's points per export interval.
    let mut deliveries = Vec::new();
    for (node, pts) in pending.into_iter().enumerate() {
        let mut pts = pts;
        pts.sort_by_key(|p| p.true_ns);
        let export = spec.export_ms * MS;
        let mut batch: Vec<NumberDataPoint> = Vec::new();
        let mut next_export = T0 as f64 + export_phase[node] * MS;
        let flush =
            |batch: &mut Vec<NumberDataPoint>, at: f64, rng: &mut Rng, out: &mut Vec<Delivery>| {
                if batch.is_empty() {
                    return;
                }
                let mut res = vec![
                    kv_str(resource::SERVICE_NAME, "ingero"),
                    kv_str(resource::NODE_ID, format!("node-{node:03}")),
                ];
                if !spec.cluster.is_empty() {
                    res.push(kv_str(resource::CLUSTER_ID, spec.cluster));
                }
                let durations = std::mem::take(batch);
                let mut metrics = Vec::new();
                if spec.with_bytes {
                    let bytes: Vec<NumberDataPoint> = durations
                        .iter()
                        .map(|p| {
                            let mut b = p.clone();
                            b.value = Some(NumberValue::AsInt(1 << 20));
                            b
                        })
                        .collect();
                    metrics.push(gauge_f64(metric::NCCL_DURATION_MS, "ms", durations));
                    metrics.push(gauge_f64(metric::NCCL_BYTES, "By", bytes));
                } else {
                    metrics.push(gauge_f64(metric::NCCL_DURATION_MS, "ms", durations));
                }
                let arrival = at + rng.uniform(spec.latency_ms.0, spec.latency_ms.1) * MS;
                out.push(Delivery {
                    arrival: arrival as u64,
                    rm: resource_metrics(res, "ingero", metrics),
                });
            };
        for p in pts {
            while p.true_ns as f64 >= next_export {
                flush(&mut batch, next_export, &mut rng, &mut deliveries);
                next_export += export;
            }
            batch.push(p.point);
        }
        flush(&mut batch, next_export, &mut rng, &mut deliveries);
    }
    deliveries.sort_by_key(|d| d.arrival);
    Trace {
        deliveries,
        last_step,
        points,
        dropped,
        boot,
    }
}
