//! `/proc` readers: host CPU availability, host memory headroom, per-process run-queue
//! wait (CPU stall) and cgroup. Parsers are pure functions over the file text.

use std::collections::HashMap;
use std::path::PathBuf;

/// Aggregate CPU times from the first line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub total: u64,
    pub idle: u64,
}

/// Parse `cpu  user nice system idle iowait irq softirq steal ...`; idle includes iowait.
pub fn parse_cpu_line(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let vals: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    if vals.len() < 4 {
        return None;
    }
    // guest and guest_nice are already counted in user and nice.
    let total: u64 = vals.iter().take(8).sum();
    let idle = vals[3] + vals.get(4).copied().unwrap_or(0);
    Some(CpuTimes { total, idle })
}

/// Idle fraction between two readings (since boot for the first).
pub fn cpu_availability(prev: Option<CpuTimes>, cur: CpuTimes) -> f64 {
    let (dt, di) = match prev {
        Some(p) if cur.total > p.total => (cur.total - p.total, cur.idle.saturating_sub(p.idle)),
        _ => (cur.total, cur.idle),
    };
    if dt == 0 {
        1.0
    } else {
        (di as f64 / dt as f64).clamp(0.0, 1.0)
    }
}

/// Host CPU availability from `/proc/stat` deltas.
#[derive(Debug, Default)]
pub struct CpuReader {
    prev: Option<CpuTimes>,
    path: Option<PathBuf>,
}

impl CpuReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Read from another file (tests).
    pub fn with_path(path: PathBuf) -> Self {
        CpuReader {
            prev: None,
            path: Some(path),
        }
    }

    pub fn read(&mut self) -> Option<f64> {
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc/stat"));
        let text = std::fs::read_to_string(path).ok()?;
        let cur = parse_cpu_line(&text)?;
        let a = cpu_availability(self.prev, cur);
        self.prev = Some(cur);
        Some(a)
    }
}

/// `MemAvailable / MemTotal` from `/proc/meminfo` text.
pub fn parse_meminfo_headroom(text: &str) -> Option<f64> {
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let total = field("MemTotal:")?;
    let avail = field("MemAvailable:")?;
    if total == 0 {
        return None;
    }
    Some((avail as f64 / total as f64).clamp(0.0, 1.0))
}

pub fn host_memory_headroom() -> Option<f64> {
    parse_meminfo_headroom(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// Run-queue wait in ns (second field of `/proc/<pid>/schedstat`).
pub fn parse_schedstat_wait(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Per-process run-queue wait deltas (the CPU-stall counter), with a bounded memory.
#[derive(Debug, Default)]
pub struct StallTracker {
    last: HashMap<u32, u64>,
}

/// Most processes the stall tracker remembers.
pub const MAX_TRACKED_PIDS: usize = 4096;

impl StallTracker {
    /// Wait time of `pid` since the previous call for it (0 the first time).
    pub fn delta(&mut self, pid: u32) -> u64 {
        let Some(wait) = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .ok()
            .and_then(|t| parse_schedstat_wait(&t))
        else {
            self.last.remove(&pid);
            return 0;
        };
        if self.last.len() >= MAX_TRACKED_PIDS && !self.last.contains_key(&pid) {
            self.last.clear();
        }
        match self.last.insert(pid, wait) {
            Some(prev) => wait.saturating_sub(prev),
            None => 0,
        }
    }
}

/// `pid -> cgroup path hash`, keyed with the kernel's cgroup id so a moved process is
/// re-read; at most 1024 entries (cleared wholesale when full).
#[derive(Debug, Default)]
pub struct CgroupHashCache {
    map: HashMap<(u32, u64), String>,
}

pub const CGROUP_CACHE_CAP: usize = 1024;

impl CgroupHashCache {
    pub fn hash(&mut self, pid: u32, cgroup_id: u64) -> String {
        if let Some(h) = self.map.get(&(pid, cgroup_id)) {
            return h.clone();
        }
        let h = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|t| crate::setup::cgroup_path(&t))
            .map(|p| crate::setup::hash_cgroup_path(&p))
            .unwrap_or_default();
        if self.map.len() >= CGROUP_CACHE_CAP {
            self.map.clear();
        }
        self.map.insert((pid, cgroup_id), h.clone());
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_availability_from_deltas() {
        let a = parse_cpu_line("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(
            a,
            CpuTimes {
                total: 1000,
                idle: 800
            }
        );
        assert!((cpu_availability(None, a) - 0.8).abs() < 1e-12);
        let b = parse_cpu_line("cpu  400 0 100 800 100 0 0 0 0 0").unwrap();
        // 400 more ticks, 100 of them idle.
        assert!((cpu_availability(Some(a), b) - 0.25).abs() < 1e-12);
        // No time passed: fall back to the since-boot ratio.
        assert!((cpu_availability(Some(b), b) - 900.0 / 1400.0).abs() < 1e-12);
        assert!(parse_cpu_line("cpu0 1 2 3 4").is_none());
        assert!(parse_cpu_line("cpu  a b c d").is_none());
    }

    #[test]
    fn meminfo_and_schedstat() {
        let m = "MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    250 kB\n";
        assert_eq!(parse_meminfo_headroom(m), Some(0.25));
        assert_eq!(
            parse_meminfo_headroom("MemTotal: 0 kB\nMemAvailable: 0 kB"),
            None
        );
        assert_eq!(parse_schedstat_wait("123 456 7\n"), Some(456));
        assert_eq!(parse_schedstat_wait("123"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let mut s = StallTracker::default();
        assert_eq!(s.delta(std::process::id()), 0);
        let mut c = CgroupHashCache::default();
        assert_eq!(c.hash(std::process::id(), 1).len(), 16);
        assert!(CpuReader::new().read().is_some());
        assert!(host_memory_headroom().is_some());
    }
}
