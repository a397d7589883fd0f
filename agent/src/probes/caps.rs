//! Which privileges the eBPF probes need, and a clear message when they are missing.

/// `CAP_SYS_ADMIN`: covers everything on kernels before 5.8.
pub const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON`: perf events (uprobe attachment) since 5.8.
pub const CAP_PERFMON: u32 = 38;
/// `CAP_BPF`: loading programs and maps since 5.8.
pub const CAP_BPF: u32 = 39;

/// The effective capability set from `/proc/self/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// `Ok` when the capabilities allow loading and attaching probes, else the names of the
/// missing ones.
pub fn check(caps: u64) -> Result<(), Vec<&'static str>> {
    if has(caps, CAP_SYS_ADMIN) {
        return Ok(());
    }
    let mut missing = Vec::new();
    if !has(caps, CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(caps, CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing)
    }
}

/// Check this process; the error is the message to show.
pub fn check_self() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let caps = parse_cap_eff(&status).ok_or("no CapEff line in /proc/self/status")?;
    check(caps).map_err(|missing| {
        format!(
            "eBPF probes need root, or CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN on kernels before 5.8); \
             this process lacks {}. Run as root, grant them (setcap cap_bpf,cap_perfmon+ep ingero-agent), \
             or run without a GPU using --synthetic.",
            missing.join(" and ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets() {
        assert_eq!(
            parse_cap_eff("Name:\tx\nCapEff:\t000001fffeffffff\n"),
            Some(0x1fffeffffff)
        );
        assert_eq!(check(0x1fffeffffff), Ok(()));
        assert_eq!(check(0), Err(vec!["CAP_BPF", "CAP_PERFMON"]));
        assert_eq!(check(1 << CAP_BPF), Err(vec!["CAP_PERFMON"]));
        assert_eq!(check((1 << CAP_BPF) | (1 << CAP_PERFMON)), Ok(()));
        assert_eq!(check(1 << CAP_SYS_ADMIN), Ok(()));
    }
}
