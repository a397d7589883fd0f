//! The kernel stamps events with `bpf_ktime_get_ns()` (CLOCK_MONOTONIC). Wall-clock time is
//! that plus the current realtime-minus-monotonic offset, sampled with the tightest of a
//! few bracketed reads and re-sampled regularly so NTP adjustments are followed.

use component::Timestamp;

fn read(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// CLOCK_MONOTONIC now, in ns (the clock of event timestamps).
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// `realtime - monotonic` in ns.
pub fn sample_offset() -> i128 {
    let mut best: Option<(u64, i128)> = None;
    for _ in 0..3 {
        let (Some(a), Some(r), Some(b)) = (
            read(libc::CLOCK_MONOTONIC),
            read(libc::CLOCK_REALTIME),
            read(libc::CLOCK_MONOTONIC),
        ) else {
            continue;
        };
        let width = b.saturating_sub(a);
        let off = i128::from(r) - i128::from(a + width / 2);
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, off));
        }
    }
    best.map_or(0, |(_, o)| o)
}

/// Convert a monotonic event timestamp to wall-clock time.
pub fn to_wall(mono_ns: u64, offset: i128) -> Timestamp {
    let wall = i128::from(mono_ns) + offset;
    Timestamp::from_nanos(u64::try_from(wall.max(0)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_is_offset_arithmetic() {
        assert_eq!(to_wall(5, 10), Timestamp::from_nanos(15));
        assert_eq!(to_wall(5, -10), Timestamp::ZERO);
    }

    #[test]
    fn converted_now_is_close_to_the_wall_clock() {
        let off = sample_offset();
        let wall = to_wall(monotonic_ns(), off).as_nanos() as i128;
        let sys = component::Timestamp::now().as_nanos() as i128;
        // Both clocks read within the same few microseconds; allow a generous 50 ms.
        assert!((wall - sys).abs() < 50_000_000, "{wall} vs {sys}");
    }
}
