//! fleet-sim: a fleet of virtual Ingero agents in one process.
//!
//! Design notes:
//! - Every virtual agent runs the agent's own code from `ingero-agent-core`: baseline,
//!   score, node state, detection mode, CUSUM classification, the threshold cache with its
//!   strict header parsing, and the exact OTLP payloads (health, straggler events, NCCL).
//!   Only the raw signals are simulated ([`world`]).
//! - A [`scenario`] file says who is in the cluster, how their scores wobble (Gaussian or
//!   heavy-tailed noise, dips, per-node bias, warm-up) and what goes wrong when
//!   (stragglers, recoveries, a cluster-wide slowdown, churn, Fleet restarts, late NCCL
//!   ranks).
//! - Two ways to run Fleet: [`run`] puts the real processors and threshold extension in
//!   process on a simulated clock (fast: the large node-tick counts), [`live`] pushes over
//!   OTLP/HTTP to a real Fleet service on wall-clock time, reading the threshold from the
//!   push responses and verdicts from the admin API and telemetry.
//! - [`record`] keeps ground truth and what Fleet and each agent said, and scores it;
//!   [`quality`] is the fixed set behind `docs/detection-quality.md`.

pub mod agent;
pub mod collective;
pub mod inproc;
pub mod live;
pub mod quality;
pub mod record;
pub mod run;
pub mod scenario;
pub mod world;
