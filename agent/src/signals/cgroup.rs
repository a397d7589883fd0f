//! Per-cgroup cumulative counters (spec 1.4): kernel launches, CPU stall and memcpy bytes
//! by direction, keyed by the cgroup path hash of the traced process.
//!
//! Unlike the Go agent (which adds its whole rolling window every tick, spec 1.4 caveat),
//! only per-tick deltas are added, so the totals are true cumulative counts.

use std::collections::BTreeMap;

use crate::fleet::payload::CgroupSeries;

/// `ingero.memcpy.direction` values, indexed by [`Direction`].
pub const DIRECTIONS: [&str; 5] = ["h2h", "h2d", "d2h", "d2d", "unknown"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    HostToHost = 0,
    HostToDevice = 1,
    DeviceToHost = 2,
    DeviceToDevice = 3,
    Unknown = 4,
}

impl Direction {
    /// From `cudaMemcpyKind` (0 h2h, 1 h2d, 2 d2h, 3 d2d, 4 default/unknown).
    pub fn from_cuda_kind(kind: u64) -> Self {
        match kind {
            0 => Direction::HostToHost,
            1 => Direction::HostToDevice,
            2 => Direction::DeviceToHost,
            3 => Direction::DeviceToDevice,
            _ => Direction::Unknown,
        }
    }
}

/// Counts for one cgroup over one tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupDelta {
    pub cgroup_path_hash: String,
    pub kernel_launches: u64,
    pub cpu_stall_nanos: u64,
    /// Bytes by [`Direction`] index.
    pub memcpy_bytes: [u64; 5],
}

#[derive(Debug, Clone, Default)]
struct Totals {
    launches: u64,
    stall: u64,
    memcpy: [u64; 5],
    /// Directions ever seen for this cgroup (their series exist from then on).
    seen: u8,
}

/// Running totals, capped in the number of cgroups.
#[derive(Debug, Clone)]
pub struct CgroupTotals {
    map: BTreeMap<String, Totals>,
    cap: usize,
    dropped: u64,
}

impl CgroupTotals {
    pub fn new(cap: usize) -> Self {
        CgroupTotals {
            map: BTreeMap::new(),
            cap,
            dropped: 0,
        }
    }

    /// Deltas for cgroups beyond the cap are dropped and counted.
    pub fn add(&mut self, deltas: &[CgroupDelta]) {
        for d in deltas {
            if !self.map.contains_key(&d.cgroup_path_hash) && self.map.len() >= self.cap {
                self.dropped += 1;
                continue;
            }
            let t = self.map.entry(d.cgroup_path_hash.clone()).or_default();
            t.launches = t.launches.saturating_add(d.kernel_launches);
            t.stall = t.stall.saturating_add(d.cpu_stall_nanos);
            for (i, b) in d.memcpy_bytes.iter().enumerate() {
                if *b > 0 {
                    t.memcpy[i] = t.memcpy[i].saturating_add(*b);
                    t.seen |= 1 << i;
                }
            }
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every known series, for the push.
    pub fn series(&self) -> Vec<CgroupSeries> {
        self.map
            .iter()
            .map(|(hash, t)| CgroupSeries {
                cgroup_path_hash: hash.clone(),
                kernel_launches: t.launches,
                cpu_stall_nanos: t.stall,
                memcpy_bytes: (0..5)
                    .filter(|i| t.seen & (1 << i) != 0)
                    .map(|i| (DIRECTIONS[i], t.memcpy[i]))
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(hash: &str, launches: u64, h2d: u64) -> CgroupDelta {
        CgroupDelta {
            cgroup_path_hash: hash.into(),
            kernel_launches: launches,
            cpu_stall_nanos: 1,
            memcpy_bytes: [0, h2d, 0, 0, 0],
        }
    }

    #[test]
    fn totals_accumulate_deltas_only_and_keep_series_alive() {
        let mut t = CgroupTotals::new(10);
        t.add(&[d("a", 5, 0)]);
        t.add(&[d("a", 7, 100), d("b", 0, 0)]);
        t.add(&[d("a", 0, 0)]);
        let s = t.series();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].kernel_launches, s[0].cpu_stall_nanos), (12, 3));
        assert_eq!(s[0].memcpy_bytes, vec![("h2d", 100)]);
        assert_eq!(
            (s[1].cgroup_path_hash.as_str(), s[1].kernel_launches),
            ("b", 0),
            "seen with zero: emitted at 0"
        );
    }

    #[test]
    fn cap_drops_new_cgroups_and_counts_them() {
        let mut t = CgroupTotals::new(1);
        t.add(&[d("a", 1, 0), d("b", 1, 0), d("a", 1, 0)]);
        assert_eq!(t.series().len(), 1);
        assert_eq!(t.series()[0].kernel_launches, 2);
        assert_eq!(t.dropped(), 1);
    }

    #[test]
    fn cuda_memcpy_kinds() {
        assert_eq!(Direction::from_cuda_kind(1), Direction::HostToDevice);
        assert_eq!(Direction::from_cuda_kind(4), Direction::Unknown);
        assert_eq!(DIRECTIONS[Direction::DeviceToHost as usize], "d2h");
    }
}
