//! Function symbols to uprobe file offsets. One ELF parse per library resolves every probe
//! point: the exact name, else the highest `name_vMAJOR[_MINOR[_PATCH]]` by numeric tuple
//! (spec 5.1).

use std::collections::HashMap;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

/// Largest library file parsed (libtorch_cuda.so is around 1 GiB).
pub const MAX_LIBRARY_BYTES: u64 = 4 << 30;

#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: larger than {MAX_LIBRARY_BYTES} bytes")]
    TooLarge(String),
    #[error("parse {0}: {1}")]
    Parse(String, object::Error),
}

/// Function symbols of a library: name -> file offset of its first instruction.
#[derive(Debug, Default, Clone)]
pub struct SymbolTable {
    offsets: HashMap<String, u64>,
}

/// `name_v2_1` -> `Some([2, 1])` for base `name`.
fn version_of(candidate: &str, base: &str) -> Option<Vec<u64>> {
    let rest = candidate.strip_prefix(base)?.strip_prefix("_v")?;
    let parts: Option<Vec<u64>> = rest.split('_').map(|p| p.parse().ok()).collect();
    parts.filter(|p| !p.is_empty() && p.len() <= 3)
}

impl SymbolTable {
    pub fn from_offsets(offsets: HashMap<String, u64>) -> Self {
        SymbolTable { offsets }
    }

    /// Parse the dynamic and static symbol tables of an ELF file.
    pub fn read(path: &Path) -> Result<Self, SymbolError> {
        let shown = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| SymbolError::Read(shown.clone(), e))?;
        if meta.len() > MAX_LIBRARY_BYTES {
            return Err(SymbolError::TooLarge(shown));
        }
        // Read through a cache: only the headers and symbol tables are loaded, not the
        // whole (possibly gigabyte-sized) library.
        let f = std::fs::File::open(path).map_err(|e| SymbolError::Read(shown.clone(), e))?;
        let cache = object::ReadCache::new(f);
        let file = object::File::parse(&cache).map_err(|e| SymbolError::Parse(shown, e))?;
        let mut offsets = HashMap::new();
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if sym.kind() != SymbolKind::Text || !sym.is_definition() {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            // `name@@VERSION` in some tables: the base name is what callers bind to.
            let name = name.split('@').next().unwrap_or(name);
            let Some(index) = sym.section_index() else {
                continue;
            };
            let Ok(section) = file.section_by_index(index) else {
                continue;
            };
            let Some((sec_offset, _)) = section.file_range() else {
                continue;
            };
            let Some(rel) = sym.address().checked_sub(section.address()) else {
                continue;
            };
            offsets.entry(name.to_string()).or_insert(sec_offset + rel);
        }
        Ok(SymbolTable { offsets })
    }

    /// File offset of `name`, or of its highest `_vN[_N[_N]]` version.
    pub fn resolve(&self, name: &str) -> Option<u64> {
        if let Some(o) = self.offsets.get(name) {
            return Some(*o);
        }
        self.offsets
            .iter()
            .filter_map(|(k, o)| version_of(k, name).map(|v| (v, *o)))
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, o)| o)
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_name_then_highest_version() {
        let t = SymbolTable::from_offsets(HashMap::from([
            ("ncclAllReduce".to_string(), 10),
            ("ncclBcast_v2_9".to_string(), 20),
            ("ncclBcast_v2_19_1".to_string(), 30),
            ("ncclBcast_v10".to_string(), 40),
            ("ncclBcast_vX".to_string(), 50),
            ("ncclBcastExtra".to_string(), 60),
        ]));
        assert_eq!(t.resolve("ncclAllReduce"), Some(10));
        assert_eq!(t.resolve("ncclBcast"), Some(40), "10 > 2.19.1 > 2.9");
        assert_eq!(t.resolve("ncclSend"), None);
    }

    #[test]
    fn reads_a_real_library() {
        // libc is always there; `write` is a function it exports.
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
            "/usr/lib64/libc.so.6",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists());
        let Some(libc) = libc else { return };
        let t = SymbolTable::read(libc).unwrap();
        let off = t.resolve("write").unwrap();
        assert!(off > 0 && off < std::fs::metadata(libc).unwrap().len());
    }
}
