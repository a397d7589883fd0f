//! Attach the empty uprobe and uretprobe (bpf/empty.bpf.c) to one function of one library,
//! for the overhead baseline: `attach_empty <library> <symbol> [entry]` (`entry`: the
//! uprobe only, the floor of an entry-only probe). Prints `attached`, then keeps the probes
//! until stdin closes. Needs root.

use std::io::Read;
use std::path::Path;

use ingero_agent::probes::loader::{BpfObject, EMPTY_ENTRY, EMPTY_OBJECT, EMPTY_RETURN};
use ingero_agent::probes::symbols::SymbolTable;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(lib), Some(symbol)) = (args.get(1), args.get(2)) else {
        anyhow::bail!("usage: attach_empty <library> <symbol> [entry]");
    };
    let entry_only = match args.get(3).map(String::as_str) {
        None => false,
        Some("entry") => true,
        Some(other) => anyhow::bail!("unknown mode {other:?} (only `entry`)"),
    };
    let lib = Path::new(lib);
    let offset = SymbolTable::read(lib)?
        .resolve(symbol)
        .ok_or_else(|| anyhow::anyhow!("{symbol} not found in {}", lib.display()))?;
    let mut obj = BpfObject::load("empty", EMPTY_OBJECT, &[EMPTY_ENTRY, EMPTY_RETURN])?;
    let _entry = obj.attach_at(EMPTY_ENTRY, lib, offset)?;
    let _ret = if entry_only {
        None
    } else {
        Some(obj.attach_at(EMPTY_RETURN, lib, offset)?)
    };
    use std::io::Write;
    let mut out = std::io::stdout();
    writeln!(out, "attached")?;
    out.flush()?;
    let mut sink = Vec::new();
    std::io::stdin().read_to_end(&mut sink)?;
    Ok(())
}
