//! Restart strategies: whether, and after how long, a failed job restarts
//! from its latest completed checkpoint (Flink's fixed-delay,
//! exponential-delay, failure-rate and none). Pure: time is passed in.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use weir_runtime::job::config::RestartStrategy;

/// A job's restart history, deciding each restart.
#[derive(Debug, Clone)]
pub struct Restarts {
    strategy: RestartStrategy,
    restarts: u32,
    failures: VecDeque<Instant>,
    current_delay: Option<Duration>,
    last_failure: Option<Instant>,
}

impl Restarts {
    /// No failures yet.
    pub fn new(strategy: RestartStrategy) -> Self {
        Restarts {
            strategy,
            restarts: 0,
            failures: VecDeque::new(),
            current_delay: None,
            last_failure: None,
        }
    }

    /// Restarts so far.
    pub fn count(&self) -> u32 {
        self.restarts
    }

    /// A failure at `now`: the wait before restarting, or `Err` with why
    /// the job must fail instead.
    pub fn on_failure(&mut self, now: Instant) -> Result<Duration, String> {
        let delay = match self.strategy {
            RestartStrategy::None => {
                return Err("the restart strategy is `none`".to_owned());
            }
            RestartStrategy::FixedDelay { attempts, delay_ms } => {
                if self.restarts >= attempts {
                    return Err(format!(
                        "fixed-delay restart strategy: all {attempts} restart attempts used"
                    ));
                }
                Duration::from_millis(delay_ms)
            }
            RestartStrategy::ExponentialDelay {
                initial_delay_ms,
                max_delay_ms,
                multiplier,
                reset_after_ms,
            } => {
                let initial = Duration::from_millis(initial_delay_ms);
                let quiet = self
                    .last_failure
                    .is_none_or(|t| now.duration_since(t) >= Duration::from_millis(reset_after_ms));
                let next = match self.current_delay {
                    Some(d) if !quiet => {
                        (d * multiplier.max(1)).min(Duration::from_millis(max_delay_ms))
                    }
                    _ => initial,
                };
                self.current_delay = Some(next);
                next
            }
            RestartStrategy::FailureRate {
                max_failures,
                interval_ms,
                delay_ms,
            } => {
                let interval = Duration::from_millis(interval_ms);
                self.failures.push_back(now);
                while self
                    .failures
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > interval)
                {
                    self.failures.pop_front();
                }
                if self.failures.len() as u32 > max_failures {
                    return Err(format!(
                        "failure-rate restart strategy: {} failures within {} ms (at most {max_failures})",
                        self.failures.len(),
                        interval_ms
                    ));
                }
                Duration::from_millis(delay_ms)
            }
        };
        self.last_failure = Some(now);
        self.restarts += 1;
        Ok(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_never_restarts() {
        let mut r = Restarts::new(RestartStrategy::None);
        assert!(r.on_failure(Instant::now()).is_err());
    }

    #[test]
    fn fixed_delay_counts_attempts() {
        let mut r = Restarts::new(RestartStrategy::FixedDelay {
            attempts: 2,
            delay_ms: 50,
        });
        let t = Instant::now();
        assert_eq!(r.on_failure(t), Ok(Duration::from_millis(50)));
        assert_eq!(r.on_failure(t), Ok(Duration::from_millis(50)));
        let e = r.on_failure(t).unwrap_err();
        assert!(e.contains("all 2 restart attempts"), "{e}");
        assert_eq!(r.count(), 2);
    }

    #[test]
    fn exponential_delay_grows_caps_and_resets() {
        let mut r = Restarts::new(RestartStrategy::ExponentialDelay {
            initial_delay_ms: 100,
            max_delay_ms: 350,
            multiplier: 2,
            reset_after_ms: 10_000,
        });
        let t = Instant::now();
        let ms = |d: Result<Duration, String>| d.unwrap().as_millis();
        assert_eq!(ms(r.on_failure(t)), 100);
        assert_eq!(ms(r.on_failure(t + Duration::from_secs(1))), 200);
        assert_eq!(ms(r.on_failure(t + Duration::from_secs(2))), 350);
        assert_eq!(ms(r.on_failure(t + Duration::from_secs(3))), 350);
        // Quiet for longer than reset_after: back to the start.
        assert_eq!(ms(r.on_failure(t + Duration::from_secs(20))), 100);
    }

    #[test]
    fn failure_rate_fails_when_too_many_failures_in_the_interval() {
        let mut r = Restarts::new(RestartStrategy::FailureRate {
            max_failures: 2,
            interval_ms: 1000,
            delay_ms: 10,
        });
        let t = Instant::now();
        assert!(r.on_failure(t).is_ok());
        assert!(r.on_failure(t + Duration::from_millis(100)).is_ok());
        assert!(r.on_failure(t + Duration::from_millis(200)).is_err());
        // Old failures leave the window.
        let mut r = Restarts::new(RestartStrategy::FailureRate {
            max_failures: 2,
            interval_ms: 1000,
            delay_ms: 10,
        });
        assert!(r.on_failure(t).is_ok());
        assert!(r.on_failure(t + Duration::from_millis(100)).is_ok());
        assert!(r.on_failure(t + Duration::from_millis(1500)).is_ok());
    }
}
