//! Attach the empty uprobe and uretprobe (bpf/empty.bpf.c) to functions of one library, for
//! the overhead baseline: `attach_empty <library> <symbols> [entry]`.
//!
//! `<symbols>` is one symbol, a comma-separated list, or `@driver-launches`: every launch
//! entry the agent probes in libcuda (`cuLaunchKernel*`, `cuLaunchCooperativeKernel*`,
//! `cuGraphLaunch*`), the probes a launch pays once the runtime's are detached. Symbols of
//! a list that the library lacks are skipped (at least one must resolve). `entry`: the
//! uprobe only, the floor of an entry-only probe. Prints `attached N` (N probed functions),
//! then keeps the probes until stdin closes. Needs root.

use std::io::Read;
use std::path::Path;

use ingero_agent::probes::loader::{
    BpfObject, CUDA_DRIVER, EMPTY_ENTRY, EMPTY_OBJECT, EMPTY_RETURN,
};
use ingero_agent::probes::symbols::SymbolTable;

/// The agent's driver launch programs (loader::CUDA_DRIVER).
const DRIVER_LAUNCH_PROGRAMS: [&str; 2] = ["cu_launch", "cu_graph_launch"];

fn symbols(spec: &str) -> Vec<&str> {
    if spec == "@driver-launches" {
        CUDA_DRIVER
            .iter()
            .filter(|p| DRIVER_LAUNCH_PROGRAMS.contains(&p.entry))
            .map(|p| p.symbol)
            .collect()
    } else {
        spec.split(',').filter(|s| !s.is_empty()).collect()
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(lib), Some(spec)) = (args.get(1), args.get(2)) else {
        anyhow::bail!(
            "usage: attach_empty <library> <symbol>[,<symbol>...]|@driver-launches [entry]"
        );
    };
    let entry_only = match args.get(3).map(String::as_str) {
        None => false,
        Some("entry") => true,
        Some(other) => anyhow::bail!("unknown mode {other:?} (only `entry`)"),
    };
    let lib = Path::new(lib);
    let table = SymbolTable::read(lib)?;
    let wanted = symbols(spec);
    let offsets: Vec<(&str, u64)> = wanted
        .iter()
        .filter_map(|s| table.resolve(s).map(|o| (*s, o)))
        .collect();
    if offsets.is_empty() {
        anyhow::bail!("none of {wanted:?} found in {}", lib.display());
    }
    // Aliases (`_ptsz` variants at the same address) get one probe, as the agent's would
    // trap once there.
    let mut seen = std::collections::BTreeSet::new();
    let mut obj = BpfObject::load("empty", EMPTY_OBJECT, &[EMPTY_ENTRY, EMPTY_RETURN])?;
    let mut links = Vec::new();
    for (symbol, offset) in offsets {
        if !seen.insert(offset) {
            continue;
        }
        links.push(obj.attach_at(EMPTY_ENTRY, lib, offset)?);
        if !entry_only {
            links.push(obj.attach_at(EMPTY_RETURN, lib, offset)?);
        }
        eprintln!("empty probe on {symbol} at {offset:#x}");
    }
    use std::io::Write;
    let mut out = std::io::stdout();
    writeln!(out, "attached {}", seen.len())?;
    out.flush()?;
    let mut sink = Vec::new();
    std::io::stdin().read_to_end(&mut sink)?;
    drop(links);
    Ok(())
}
