//! A source subtask's watermark generator, as a pure state machine:
//! Flink's `BoundedOutOfOrdernessWatermarks` behind a periodic emitter, with
//! `WatermarksWithIdleness`.
//!
//! The source loop tells [`WatermarkGenerator`] about every batch it read
//! ([`WatermarkGenerator::on_batch`], before pushing the records: a source
//! that was idle must say it is active again before its records travel),
//! then asks [`WatermarkGenerator::poll`] what to send after them. Time is
//! passed in; the generator reads no clock.
//!
//! # Rules
//!
//! - The watermark is the largest timestamp read so far minus
//!   `max_out_of_orderness_ms` minus 1 (`i64::MIN` before the first record):
//!   "no record at or below it follows", if the disorder stays in bounds.
//! - It is emitted when it advanced and the last emission is at least
//!   `interval` old (0: after every batch that advanced it).
//! - With `idle_timeout`, a subtask that read no record for that long is
//!   idle (it says so once), and active again with its next record.
//! - After [`WatermarkGenerator::finish`] (drain or end of input) it emits
//!   nothing more: the final `i64::MAX` was sent.

use std::time::{Duration, Instant};

use crate::job::WatermarkStrategy;

/// What the source must send after its latest batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkAction {
    /// Send this watermark through the chain and downstream.
    Watermark(i64),
    /// Tell downstream this subtask is idle.
    Idle,
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct WatermarkGenerator {
    out_of_orderness: i64,
    idle_timeout: Option<Duration>,
    interval: Duration,
    /// Largest timestamp read.
    max_ts: Option<i64>,
    /// Last watermark emitted (`i64::MIN`: none).
    emitted: i64,
    emitted_at: Option<Instant>,
    /// When the last record was read (or the generator made).
    last_data: Instant,
    idle: bool,
}

impl WatermarkGenerator {
    /// A generator for `strategy`, emitting at most every `interval`,
    /// started at `now`.
    pub fn new(strategy: WatermarkStrategy, interval: Duration, now: Instant) -> Self {
        WatermarkGenerator {
            out_of_orderness: i64::try_from(strategy.max_out_of_orderness_ms).unwrap_or(i64::MAX),
            idle_timeout: strategy.idle_timeout_ms.map(Duration::from_millis),
            interval,
            max_ts: None,
            emitted: i64::MIN,
            emitted_at: None,
            last_data: now,
            idle: false,
        }
    }

    /// A batch of `records` records whose largest timestamp is `max_ts` was
    /// read at `now`. Returns true if the subtask was idle and must say it
    /// is active again before sending the records.
    pub fn on_batch(&mut self, records: usize, max_ts: Option<i64>, now: Instant) -> bool {
        if records == 0 {
            return false;
        }
        self.last_data = now;
        if let Some(ts) = max_ts {
            self.max_ts = Some(self.max_ts.map_or(ts, |m| m.max(ts)));
        }
        std::mem::replace(&mut self.idle, false)
    }

    /// What to send now, if anything.
    pub fn poll(&mut self, now: Instant) -> Option<WatermarkAction> {
        if self.emitted == i64::MAX {
            return None;
        }
        if let Some(timeout) = self.idle_timeout
            && !self.idle
            && now.saturating_duration_since(self.last_data) >= timeout
        {
            self.idle = true;
            return Some(WatermarkAction::Idle);
        }
        if self.idle {
            return None;
        }
        let watermark = self.current();
        let due = self
            .emitted_at
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval);
        if due && watermark > self.emitted {
            self.emitted = watermark;
            self.emitted_at = Some(now);
            return Some(WatermarkAction::Watermark(watermark));
        }
        None
    }

    /// The watermark the records read so far allow (emitted or not).
    pub fn current(&self) -> i64 {
        match self.max_ts {
            None => i64::MIN,
            Some(ts) => ts
                .saturating_sub(self.out_of_orderness)
                .saturating_sub(1)
                .max(i64::MIN + 1),
        }
    }

    /// The final watermark was sent: emit nothing more.
    pub fn finish(&mut self) {
        self.emitted = i64::MAX;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(ooo: u64, idle: Option<u64>) -> WatermarkStrategy {
        WatermarkStrategy {
            max_out_of_orderness_ms: ooo,
            idle_timeout_ms: idle,
        }
    }

    #[test]
    fn the_watermark_trails_the_largest_timestamp_by_the_bound_plus_one() {
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(strategy(100, None), Duration::ZERO, t0);
        assert_eq!(g.poll(t0), None, "nothing read, nothing to say");
        g.on_batch(3, Some(1_000), t0);
        assert_eq!(g.poll(t0), Some(WatermarkAction::Watermark(899)));
        // An older record does not move it back, nor re-emit it.
        g.on_batch(1, Some(950), t0);
        assert_eq!(g.poll(t0), None);
        g.on_batch(1, Some(1_001), t0);
        assert_eq!(g.poll(t0), Some(WatermarkAction::Watermark(900)));
        assert_eq!(g.current(), 900);
    }

    #[test]
    fn emission_waits_for_the_interval() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = WatermarkGenerator::new(strategy(0, None), ms(200), t0);
        g.on_batch(1, Some(10), t0);
        assert_eq!(g.poll(t0), Some(WatermarkAction::Watermark(9)));
        g.on_batch(1, Some(20), t0 + ms(100));
        assert_eq!(g.poll(t0 + ms(100)), None, "too soon");
        assert_eq!(g.poll(t0 + ms(200)), Some(WatermarkAction::Watermark(19)));
    }

    #[test]
    fn a_quiet_subtask_turns_idle_once_and_active_with_its_next_record() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = WatermarkGenerator::new(strategy(0, Some(50)), Duration::ZERO, t0);
        g.on_batch(1, Some(10), t0);
        assert_eq!(g.poll(t0), Some(WatermarkAction::Watermark(9)));
        assert!(
            !g.on_batch(0, None, t0 + ms(49)),
            "an empty batch is no data"
        );
        assert_eq!(g.poll(t0 + ms(49)), None);
        assert_eq!(g.poll(t0 + ms(50)), Some(WatermarkAction::Idle));
        assert_eq!(g.poll(t0 + ms(500)), None, "said once");
        assert!(g.on_batch(1, Some(30), t0 + ms(501)), "active again first");
        assert_eq!(g.poll(t0 + ms(501)), Some(WatermarkAction::Watermark(29)));
        assert!(!g.on_batch(1, Some(31), t0 + ms(502)));
    }

    #[test]
    fn without_a_timeout_it_never_idles_and_after_finish_it_is_silent() {
        let t0 = Instant::now();
        let mut g = WatermarkGenerator::new(strategy(0, None), Duration::ZERO, t0);
        assert_eq!(g.poll(t0 + Duration::from_secs(3600)), None);
        g.on_batch(1, Some(i64::MIN), t0);
        assert_eq!(g.current(), i64::MIN + 1, "never below the start");
        g.finish();
        g.on_batch(1, Some(5), t0);
        assert_eq!(g.poll(t0), None);
    }
}
