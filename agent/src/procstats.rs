//! The agent's own resource use for `/metrics`, under the `process_*` names every Prometheus
//! client library's process collector uses, so existing dashboards and alerts (memory,
//! CPU, file descriptors of an exporter) work unchanged. Read from `/proc/self` at each
//! scrape.

use std::fmt::Write as _;

/// One reading of the process's counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub threads: u64,
    pub start_time_seconds: f64,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

/// What `/proc/[pid]/stat` gives, in its own units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// utime + stime, in clock ticks.
    cpu_ticks: u64,
    threads: u64,
    /// Since boot, in clock ticks.
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

/// Parse `/proc/[pid]/stat`. The command name (field 2) may hold spaces and parentheses,
/// so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // rest[0] is field 3 (state); field n is rest[n - 3].
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: num(14)?.checked_add(num(15)?)?,
        threads: num(20)?,
        start_ticks: num(22)?,
        virtual_bytes: num(23)?,
        resident_pages: num(24)?,
    })
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf has no memory effects; it returns -1 for an unknown name.
    let v = unsafe { libc::sysconf(name) };
    u64::try_from(v).ok().filter(|v| *v > 0)
}

impl ProcessStats {
    /// This process now; `None` without a readable `/proc`.
    pub fn read() -> Option<Self> {
        let stat = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        let btime = parse_btime(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let ticks = sysconf(libc::_SC_CLK_TCK)? as f64;
        let page = sysconf(libc::_SC_PAGESIZE)?;
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid rlimit to write into.
        let max_fds = (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0
            && lim.rlim_cur != libc::RLIM_INFINITY)
            .then_some(lim.rlim_cur);
        Some(ProcessStats {
            cpu_seconds: stat.cpu_ticks as f64 / ticks,
            resident_bytes: stat.resident_pages.saturating_mul(page),
            virtual_bytes: stat.virtual_bytes,
            threads: stat.threads,
            start_time_seconds: btime as f64 + stat.start_ticks as f64 / ticks,
            open_fds,
            max_fds,
        })
    }

    /// The `process_*` families, Prometheus text format 0.0.4.
    pub fn render(&self, o: &mut String) {
        let mut family = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} {kind}");
            let _ = writeln!(o, "{name} {value}");
        };
        family(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            self.cpu_seconds.to_string(),
        );
        family(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            self.resident_bytes.to_string(),
        );
        family(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            self.virtual_bytes.to_string(),
        );
        family(
            "process_threads",
            "gauge",
            "Number of OS threads in the process.",
            self.threads.to_string(),
        );
        family(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            self.start_time_seconds.to_string(),
        );
        if let Some(n) = self.open_fds {
            family(
                "process_open_fds",
                "gauge",
                "Number of open file descriptors.",
                n.to_string(),
            );
        }
        if let Some(n) = self.max_fds {
            family(
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors.",
                n.to_string(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis, as the kernel prints it.
        let text = "4242 (ingero (x) a) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    150 50 0 0 20 0 3 0 123456 52428800 2816 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_ticks: 200,
                threads: 3,
                start_ticks: 123_456,
                virtual_bytes: 52_428_800,
                resident_pages: 2816,
            })
        );
        assert_eq!(parse_stat("4242 (truncated"), None);
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1779000000\nprocesses 9\n"),
            Some(1_779_000_000)
        );
        assert_eq!(parse_btime("cpu 1\n"), None);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let s = ProcessStats::read().expect("/proc/self");
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib = |key: &str| -> u64 {
            let l = status.lines().find(|l| l.starts_with(key)).unwrap();
            l.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        // The two readings are moments apart: within a few MiB of each other.
        let rss = kib("VmRSS:") * 1024;
        assert!(
            s.resident_bytes.abs_diff(rss) < 8 << 20,
            "{s:?} vs VmRSS {rss}"
        );
        assert!(s.virtual_bytes >= s.resident_bytes);
        assert!(s.threads >= 1 && s.open_fds.unwrap() >= 3);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86_400.0,
            "started {} s before now",
            now - s.start_time_seconds
        );
        let mut o = String::new();
        s.render(&mut o);
        assert!(o.contains("\nprocess_resident_memory_bytes "), "{o}");
        assert!(o.starts_with("# HELP process_cpu_seconds_total "), "{o}");
    }
}
