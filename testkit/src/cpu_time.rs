//! Criterion measurement of the benchmark thread's own CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`): it leaves out the time other processes hold the core, which
//! on a shared build machine is most of the noise in wall-clock figures. Feature `bench`.
//!
//! ```ignore
//! criterion_group! {
//!     name = cpu;
//!     config = Criterion::default().with_measurement(testkit::cpu_time::ThreadCpuTime);
//!     targets = my_benches
//! }
//! ```

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time the calling thread has used so far.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The benchmark thread's CPU time, formatted like wall time (ns, µs, ms, s).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_time()
    }

    fn end(&self, started: Duration) -> Duration {
        thread_cpu_time().saturating_sub(started)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        WallTime.formatter()
    }
}

/// `base`, suffixed `_cpu` when the benchmark runs under [`ThreadCpuTime`], so one bench
/// function can register both a wall-clock and a CPU-time group.
pub fn group_name<M: Measurement>(base: &str) -> String {
    if std::any::type_name::<M>().ends_with("ThreadCpuTime") {
        format!("{base}_cpu")
    } else {
        base.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work_and_not_with_sleep() {
        let m = ThreadCpuTime;
        let t = m.start();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        let busy = m.end(t);
        assert!(busy > Duration::ZERO);
        let t = m.start();
        std::thread::sleep(Duration::from_millis(200));
        let slept = m.end(t);
        assert!(
            slept < Duration::from_millis(100),
            "sleeping used {slept:?} of CPU"
        );
        assert_eq!(group_name::<ThreadCpuTime>("tick"), "tick_cpu");
        assert_eq!(group_name::<WallTime>("tick"), "tick");
    }
}
