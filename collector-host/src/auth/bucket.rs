//! Per-token rate limit: a token bucket, pure (the caller passes `now`).

use std::time::{Duration, Instant};

/// `rate` requests per second refill a bucket of `capacity`; a request takes one.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    level: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, capacity: f64, now: Instant) -> Self {
        TokenBucket {
            rate,
            capacity,
            level: capacity,
            last: now,
        }
    }

    pub fn limits(&self) -> (f64, f64) {
        (self.rate, self.capacity)
    }

    /// Take one request's worth, or say how long until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.level = (self.level + dt * self.rate).min(self.capacity);
        if self.level >= 1.0 {
            self.level -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.level) / self.rate))
        }
    }
}

/// `Retry-After` in whole seconds for a wait: rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let s = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    s.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 3.0, t0);
        for _ in 0..3 {
            assert!(b.try_take(t0).is_ok());
        }
        let wait = b.try_take(t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert_eq!(retry_after_secs(wait), 1);
        // Half a second later one request fits, the next does not.
        let t1 = t0 + Duration::from_millis(500);
        assert!(b.try_take(t1).is_ok());
        assert!(b.try_take(t1).is_err());
        // A long idle period refills to capacity, not beyond.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(b.try_take(t2).is_ok());
        }
        assert!(b.try_take(t2).is_err());
    }

    #[test]
    fn slow_rates_give_whole_second_retry_after() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0.1, 1.0, t0);
        assert!(b.try_take(t0).is_ok());
        let wait = b.try_take(t0).unwrap_err();
        assert_eq!(retry_after_secs(wait), 10);
        assert_eq!(retry_after_secs(Duration::from_millis(10_001)), 11);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }

    #[test]
    fn a_clock_going_backwards_does_not_refill() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = TokenBucket::new(1.0, 1.0, t0);
        assert!(b.try_take(t0).is_ok());
        assert!(b.try_take(t0 - Duration::from_secs(5)).is_err());
    }
}
