//! The agent's integration tests, one binary: each former `tests/*.rs` file is a module
//! here (`cargo test -p ingero-agent --test e2e why::` runs one of them). The helpers
//! (`native`: the fake CUDA/NCCL/NVML libraries built from `tests/c/`, temp dirs, root
//! check; `fleet_server`: the Fleet stand-in) are compiled once for all of them.
//!
//! Several modules need root (eBPF), `cc` for the fake libraries, or `python3`; they skip
//! with a message where those are missing, as they did as separate binaries.

mod fleet_server;
mod native;

mod api_tls;
mod binary;
mod conformance;
mod detection_sim;
mod ebpf;
mod fanout_cli;
mod fleet;
mod fleet_tls;
mod gpu_harness;
mod push_tls;
mod spans;
mod uds;
mod why;
mod why_layers;
