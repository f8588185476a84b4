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
//! - **Per-split watermarks** (Flink's per-partition watermarks of its
//!   `KafkaSource`): a source that reads several splits (a Kafka source's
//!   partitions) reports them after every batch
//!   ([`WatermarkGenerator::on_splits`]). Each split then has its own
//!   watermark by the rule above, and the subtask's is the smallest of
//!   its splits that are not idle: a partition that lags behind the others
//!   holds the watermark back instead of seeing its records turn late. A
//!   split with no record yet holds it at the start until it has one or
//!   turns idle (with `idle_timeout`: no record from it for that long). A
//!   split the source no longer reports (a bounded partition at its end)
//!   holds nothing back. With no split reported, or none active, the
//!   subtask's largest timestamp rules, as without splits.

use std::collections::BTreeMap;
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
    /// Per-split event time, by split id, for sources that report splits.
    splits: BTreeMap<u64, Split>,
}

/// One split's event time (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Split {
    /// Largest timestamp read from it.
    max_ts: Option<i64>,
    /// When it last had a record (or was first reported).
    last_data: Instant,
    /// No record from it for `idle_timeout` (as of the last poll).
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
            splits: BTreeMap::new(),
        }
    }

    /// After a batch ([`Self::on_batch`] first), a source with splits
    /// reports every split it reads now, each with the largest timestamp
    /// of its records in that batch (`None`: none). Splits not reported
    /// any more are forgotten.
    pub fn on_splits(&mut self, splits: &[(u64, Option<i64>)], now: Instant) {
        if self.splits.len() != splits.len()
            || splits.iter().any(|(id, _)| !self.splits.contains_key(id))
        {
            self.splits
                .retain(|id, _| splits.iter().any(|(other, _)| other == id));
        }
        for &(id, max_ts) in splits {
            let split = self.splits.entry(id).or_insert(Split {
                max_ts: None,
                last_data: now,
                idle: false,
            });
            if let Some(ts) = max_ts {
                split.max_ts = Some(split.max_ts.map_or(ts, |m| m.max(ts)));
                split.last_data = now;
                split.idle = false;
            }
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
        if let Some(timeout) = self.idle_timeout {
            for split in self.splits.values_mut() {
                split.idle = now.saturating_duration_since(split.last_data) >= timeout;
            }
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

    /// The watermark the records read so far allow (emitted or not): the
    /// smallest of the active splits', or the subtask's own without any.
    pub fn current(&self) -> i64 {
        self.splits
            .values()
            .filter(|s| !s.idle)
            .map(|s| self.watermark_of(s.max_ts))
            .min()
            .unwrap_or_else(|| self.watermark_of(self.max_ts))
    }

    fn watermark_of(&self, max_ts: Option<i64>) -> i64 {
        match max_ts {
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
    fn with_splits_the_slowest_active_split_holds_the_watermark() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = WatermarkGenerator::new(strategy(10, Some(100)), Duration::ZERO, t0);
        // Partition 1 has no record yet: it holds the watermark back.
        g.on_batch(2, Some(5_000), t0);
        g.on_splits(&[(0, Some(5_000)), (1, None)], t0);
        assert_eq!(g.poll(t0), None, "split 1 holds it at the start");
        // Split 1 lags far behind split 0: the watermark follows split 1,
        // so its records are not late.
        g.on_batch(1, Some(1_000), t0 + ms(10));
        g.on_splits(&[(0, None), (1, Some(1_000))], t0 + ms(10));
        assert_eq!(g.poll(t0 + ms(10)), Some(WatermarkAction::Watermark(989)));
        g.on_batch(1, Some(2_000), t0 + ms(20));
        g.on_splits(&[(0, None), (1, Some(2_000))], t0 + ms(20));
        assert_eq!(g.poll(t0 + ms(20)), Some(WatermarkAction::Watermark(1_989)));
        // Split 0 goes quiet for the idle timeout: no longer counted, and
        // since split 1 still reads, the subtask is not idle. Split 0's
        // timestamps were ahead, so the watermark does not move.
        g.on_batch(1, Some(2_500), t0 + ms(110));
        g.on_splits(&[(0, None), (1, Some(2_500))], t0 + ms(110));
        assert_eq!(
            g.poll(t0 + ms(110)),
            Some(WatermarkAction::Watermark(2_489))
        );
        // Split 1 ends (not reported any more): split 0, active again,
        // rules alone.
        g.on_batch(1, Some(6_000), t0 + ms(120));
        g.on_splits(&[(0, Some(6_000))], t0 + ms(120));
        assert_eq!(
            g.poll(t0 + ms(120)),
            Some(WatermarkAction::Watermark(5_989))
        );
        // A split added later starts at the beginning and holds it again;
        // the watermark never goes back.
        g.on_batch(0, None, t0 + ms(130));
        g.on_splits(&[(0, None), (7, None)], t0 + ms(130));
        assert_eq!(g.current(), i64::MIN);
        assert_eq!(g.poll(t0 + ms(130)), None);
    }

    #[test]
    fn with_every_split_idle_the_subtask_idles_as_without_splits() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = WatermarkGenerator::new(strategy(0, Some(50)), Duration::ZERO, t0);
        g.on_batch(1, Some(10), t0);
        g.on_splits(&[(0, Some(10)), (1, None)], t0);
        assert_eq!(g.poll(t0), None, "split 1 holds it");
        assert_eq!(g.poll(t0 + ms(50)), Some(WatermarkAction::Idle));
        assert!(g.on_batch(1, Some(20), t0 + ms(60)), "active again first");
        g.on_splits(&[(0, Some(20)), (1, None)], t0 + ms(60));
        // Split 1 is still idle: split 0 alone counts.
        assert_eq!(g.poll(t0 + ms(60)), Some(WatermarkAction::Watermark(19)));
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
