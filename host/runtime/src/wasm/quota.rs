//! What the host keeps on a guest's behalf, charged to the guest: its
//! timers, its metric names and the log lines it writes.
//!
//! A guest that could register timers, invent metric names or log without
//! bound would grow the daemon, not its own sandboxed memory. So each
//! instance has a host-side budget in bytes (as large as its memory cap)
//! for timers and metric names, a cap on distinct metric names and on their
//! length, and a log budget per call; what is over it is refused (timers:
//! an error the guest sees) or dropped with one warning (metrics, logs:
//! their interfaces return nothing).

use std::collections::{BTreeMap, BTreeSet};

/// Bytes charged per timer or metric name beyond its key or name (the
/// time or value, the map or set node).
pub const ENTRY_OVERHEAD: usize = 48;
/// Longest metric name kept, in bytes.
pub const MAX_METRIC_NAME: usize = 256;
/// Most distinct metric names (counters and gauges together) per instance.
pub const MAX_METRICS: usize = 1024;
/// Log bytes one call may write; the rest of that call's lines are dropped.
pub const LOG_BYTES_PER_CALL: usize = 64 << 10;
/// Longest log line kept, in bytes; longer ones are cut.
pub const MAX_LOG_LINE: usize = 4 << 10;

/// Event-time timers of one instance, with the bytes they cost.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    set: BTreeSet<(i64, Vec<u8>)>,
}

fn timer_cost(key: &[u8]) -> usize {
    key.len() + ENTRY_OVERHEAD
}

impl Timers {
    /// Adds a timer if `quota` allows it; `Err` says why not.
    pub(crate) fn insert(
        &mut self,
        quota: &mut HostQuota,
        time: i64,
        key: Vec<u8>,
    ) -> Result<(), String> {
        let cost = timer_cost(&key);
        // Charged only if new: a timer registered again costs nothing, also
        // at the limit; the key is not copied to find out.
        if let Err(e) = quota.check(cost, "timers") {
            let timer = (time, key);
            return if self.set.contains(&timer) {
                Ok(())
            } else {
                Err(e)
            };
        }
        if self.set.insert((time, key)) {
            quota.used += cost;
        }
        Ok(())
    }

    /// Removes a timer, giving its bytes back.
    pub(crate) fn remove(&mut self, quota: &mut HostQuota, time: i64, key: Vec<u8>) {
        let cost = timer_cost(&key);
        if self.set.remove(&(time, key)) {
            quota.release(cost);
        }
    }

    /// Takes the first timer at or before `watermark`.
    pub(crate) fn pop_due(
        &mut self,
        quota: &mut HostQuota,
        watermark: i64,
    ) -> Option<(i64, Vec<u8>)> {
        match self.set.first() {
            Some((t, _)) if *t <= watermark => {
                let timer = self.set.pop_first()?;
                quota.release(timer_cost(&timer.1));
                Some(timer)
            }
            _ => None,
        }
    }

    /// Restored timers are charged but never refused: they were accepted
    /// once, and a restore must not lose them.
    pub(crate) fn restore(&mut self, quota: &mut HostQuota, timers: Vec<(i64, Vec<u8>)>) {
        for (time, key) in timers {
            let cost = timer_cost(&key);
            if self.set.insert((time, key)) {
                quota.used += cost;
            }
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(i64, Vec<u8>)> {
        self.set.iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}

/// The host-side byte budget of one instance, and its log budget.
#[derive(Debug)]
pub(crate) struct HostQuota {
    limit: usize,
    used: usize,
    log_left: usize,
    dropped_this_call: bool,
    logs_dropped: u64,
    metrics_dropped: u64,
}

impl HostQuota {
    pub(crate) fn new(limit: usize) -> Self {
        HostQuota {
            limit,
            used: 0,
            log_left: LOG_BYTES_PER_CALL,
            dropped_this_call: false,
            logs_dropped: 0,
            metrics_dropped: 0,
        }
    }

    /// Bytes in use.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Whether `bytes` more fit the budget.
    fn check(&self, bytes: usize, what: &str) -> Result<(), String> {
        if self.used + bytes > self.limit {
            return Err(format!(
                "{what}: the host keeps {} bytes for this operator instance already, \
                 at its limit of {} bytes (job.limits.memory_mb)",
                self.used, self.limit
            ));
        }
        Ok(())
    }

    fn charge(&mut self, bytes: usize, what: &str) -> Result<(), String> {
        self.check(bytes, what)?;
        self.used += bytes;
        Ok(())
    }

    fn release(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }

    /// A new call starts: its log budget is full again.
    pub(crate) fn new_call(&mut self) {
        self.log_left = LOG_BYTES_PER_CALL;
        self.dropped_this_call = false;
    }

    /// The part of `message` that may be logged now (cut to
    /// [`MAX_LOG_LINE`] and to what is left of this call's budget), or
    /// `Err(first)` when the budget is spent; `first` is true for the first
    /// line dropped in this call, so the caller can say so once.
    pub(crate) fn admit_log<'m>(&mut self, message: &'m str) -> Result<&'m str, bool> {
        let line = cut(message, MAX_LOG_LINE.min(self.log_left));
        if self.log_left == 0 || (line.is_empty() && !message.is_empty()) {
            self.log_left = 0;
            self.logs_dropped += 1;
            let first = !self.dropped_this_call;
            self.dropped_this_call = true;
            return Err(first);
        }
        self.log_left -= line.len();
        Ok(line)
    }

    /// Log lines dropped so far.
    pub(crate) fn logs_dropped(&self) -> u64 {
        self.logs_dropped
    }

    /// Whether a metric called `name` may be kept, given the metrics the
    /// instance has; charges a new name. A refused one is counted.
    pub(crate) fn admit_metric<V>(
        &mut self,
        metrics: &BTreeMap<String, V>,
        others: usize,
        name: &str,
    ) -> bool {
        if metrics.contains_key(name) {
            return true;
        }
        let ok = name.len() <= MAX_METRIC_NAME
            && metrics.len() + others < MAX_METRICS
            && self.charge(name.len() + ENTRY_OVERHEAD, "metrics").is_ok();
        if !ok {
            self.metrics_dropped += 1;
        }
        ok
    }

    /// Metric updates dropped so far.
    pub(crate) fn metrics_dropped(&self) -> u64 {
        self.metrics_dropped
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_are_charged_refused_over_the_budget_and_given_back() {
        let mut quota = HostQuota::new(10 * (ENTRY_OVERHEAD + 8));
        let mut timers = Timers::default();
        for t in 0..10 {
            timers.insert(&mut quota, t, b"key-0001".to_vec()).unwrap();
        }
        // The same timer again costs nothing.
        timers.insert(&mut quota, 3, b"key-0001".to_vec()).unwrap();
        let err = timers
            .insert(&mut quota, 10, b"key-0001".to_vec())
            .unwrap_err();
        assert!(err.contains("at its limit"), "{err}");
        assert_eq!(timers.len(), 10);
        timers.remove(&mut quota, 0, b"key-0001".to_vec());
        assert_eq!(
            timers.pop_due(&mut quota, 1),
            Some((1, b"key-0001".to_vec()))
        );
        assert_eq!(quota.used(), 8 * (ENTRY_OVERHEAD + 8));
        timers.insert(&mut quota, 10, b"key-0001".to_vec()).unwrap();
    }

    #[test]
    fn restored_timers_are_charged_but_kept() {
        let mut quota = HostQuota::new(ENTRY_OVERHEAD);
        let mut timers = Timers::default();
        timers.restore(&mut quota, vec![(1, vec![1; 100]), (2, vec![2; 100])]);
        assert_eq!(timers.len(), 2);
        assert!(timers.insert(&mut quota, 3, vec![3]).is_err());
    }

    #[test]
    fn logs_are_cut_and_capped_per_call() {
        let mut quota = HostQuota::new(1 << 20);
        let long = "x".repeat(MAX_LOG_LINE * 2);
        assert_eq!(quota.admit_log(&long).unwrap().len(), MAX_LOG_LINE);
        let mut written = MAX_LOG_LINE;
        let mut drops = Vec::new();
        for _ in 0..100 {
            match quota.admit_log(&long) {
                Ok(line) => written += line.len(),
                Err(first) => drops.push(first),
            }
        }
        assert_eq!(written, LOG_BYTES_PER_CALL);
        // Said once per call: only the first drop is marked first.
        assert_eq!(drops.iter().filter(|f| **f).count(), 1);
        assert!(drops[0]);
        assert_eq!(quota.logs_dropped(), drops.len() as u64);
        quota.new_call();
        assert!(quota.admit_log("again").is_ok());
        // A multi-byte character is never split.
        assert_eq!(cut("é", 1), "");
    }

    #[test]
    fn metric_names_are_capped_in_length_and_number() {
        let mut quota = HostQuota::new(1 << 20);
        let mut counters: BTreeMap<String, u64> = BTreeMap::new();
        assert!(!quota.admit_metric(&counters, 0, &"n".repeat(MAX_METRIC_NAME + 1)));
        for i in 0..MAX_METRICS {
            let name = format!("m{i}");
            assert!(quota.admit_metric(&counters, 0, &name));
            counters.insert(name, 1);
        }
        assert!(!quota.admit_metric(&counters, 0, "one-more"));
        assert!(
            quota.admit_metric(&counters, 0, "m7"),
            "a known name is kept"
        );
        assert_eq!(quota.metrics_dropped(), 2);
    }
}
