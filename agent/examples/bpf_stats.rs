//! Print the kernel's run statistics of loaded eBPF programs whose name starts with a prefix
//! (needs `kernel.bpf_stats_enabled=1` while the programs ran): `bpf_stats <prefix>`.
//! Output: `programs <n> runs <r> time_ns <t> ns_per_call_pair <t / (r / 2)>` — one call of
//! a probed function runs an entry and a return program.

fn main() -> anyhow::Result<()> {
    let prefix = std::env::args().nth(1).unwrap_or_default();
    let (mut n, mut runs, mut time) = (0u64, 0u64, 0u128);
    for info in aya::programs::loaded_programs() {
        let info = info?;
        if info.name_as_str().is_some_and(|s| s.starts_with(&prefix)) {
            n += 1;
            runs += info.run_count();
            time += info.run_time().as_nanos();
        }
    }
    let per_pair = if runs >= 2 {
        time as f64 / (runs as f64 / 2.0)
    } else {
        0.0
    };
    use std::io::Write;
    writeln!(
        std::io::stdout(),
        "programs {n} runs {runs} time_ns {time} ns_per_call_pair {per_pair:.1}"
    )?;
    Ok(())
}
