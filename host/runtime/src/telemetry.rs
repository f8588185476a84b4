//! What operators tell about themselves while they run, kept per subtask:
//! the lines a guest writes through the `log` interface and the counters
//! and gauges it sets through the `metrics` interface
//! ([`OperatorTelemetry`]), and the Prometheus text exposition the daemons
//! serve on `/metrics` ([`exposition`]), and the daemon's own memory
//! ([`memory`]).
//!
//! # Key types
//!
//! - [`logs::LogRing`]: a bounded ring of log lines (by lines and by
//!   bytes); the oldest line goes when a new one does not fit.
//! - [`logs::RateLimit`]: a token bucket on log lines per subtask, so a
//!   guest logging in a tight loop cannot flood its daemon (its stderr, its
//!   memory, the heartbeats to the JobManager).
//! - [`OperatorTelemetry`]: one operator instance's ring, rate limit,
//!   metrics and the cost of its guest calls ([`CallStats`]), shared
//!   between the instance (which writes, on its subtask's thread) and
//!   whoever reads them (the TaskManager's heartbeat, which
//!   ships new log lines to the JobManager, and its `/metrics`).
//!
//! # Invariants
//!
//! - A ring never holds more than its bounds ([`logs::RING_LINES`] lines,
//!   [`logs::RING_BYTES`] bytes, each line counted with
//!   [`logs::LINE_OVERHEAD`]); what a guest writes beyond the rate limit,
//!   or what leaves the ring before it was shipped, is counted as dropped,
//!   never kept.
//! - Metric names reach [`OperatorTelemetry`] only once the instance's
//!   host quota admitted them (`wasm::quota`), so their number and size are
//!   charged to the guest.
//! - Nothing here reads a clock: callers pass `now` (milliseconds since the
//!   epoch), so the ring and the rate limit are tested on a simulated clock.
//!
//! This module must not talk to the network or print: the TaskManager ships
//! and serves, the instance's host functions print.

pub mod exposition;
pub mod logs;
pub mod memory;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use logs::{LINE_OVERHEAD, LogLevel, LogLine, LogRing, RateLimit};

/// The counters and gauges one operator instance set through `metrics`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GuestMetrics {
    /// Counters by name.
    pub counters: BTreeMap<String, u64>,
    /// Gauges by name.
    pub gauges: BTreeMap<String, f64>,
}

/// New log lines of one operator instance for the JobManager
/// ([`OperatorTelemetry::take_unshipped`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Unshipped {
    /// Lines not shipped before, oldest first.
    pub lines: Vec<LogLine>,
    /// Lines dropped since the previous shipment (over the rate limit, or
    /// pushed out of the ring before they were shipped).
    pub dropped: u64,
}

/// One operator instance's log ring, rate limit and metrics (one vertex's
/// subtask). Shared by the instance and its readers; each method holds the
/// lock only for its own work.
#[derive(Debug, Default)]
pub struct OperatorTelemetry {
    inner: Mutex<Inner>,
    /// Guest calls made (one per batch, timer, watermark…).
    calls: AtomicU64,
    /// Nanoseconds spent in those calls, host functions included.
    call_ns: AtomicU64,
    /// Bytes of linear memory and tables the instance holds, after its
    /// latest call.
    memory_bytes: AtomicU64,
}

/// What an operator instance's guest calls cost
/// ([`OperatorTelemetry::calls`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Guest calls made.
    pub calls: u64,
    /// Nanoseconds spent in them.
    pub call_ns: u64,
    /// Bytes of linear memory and tables after the latest call.
    pub memory_bytes: u64,
}

#[derive(Debug)]
struct Inner {
    ring: LogRing,
    limit: RateLimit,
    /// The sequence number of the next line (1 for the first).
    next_seq: u64,
    /// The newest line shipped (0: none).
    shipped: u64,
    /// Lines dropped so far, and how many of them were reported.
    dropped: u64,
    dropped_shipped: u64,
    metrics: GuestMetrics,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            ring: LogRing::new(logs::RING_LINES, logs::RING_BYTES),
            limit: RateLimit::new(logs::LINES_PER_SECOND, logs::LINES_BURST),
            next_seq: 1,
            shipped: 0,
            dropped: 0,
            dropped_shipped: 0,
            metrics: GuestMetrics::default(),
        }
    }
}

impl OperatorTelemetry {
    /// An empty ring with the default bounds and rate limit.
    pub fn new() -> OperatorTelemetry {
        OperatorTelemetry::default()
    }

    /// Counts one guest call that took `ns` and left the instance with
    /// `memory_bytes` of memories and tables.
    pub fn record_call(&self, ns: u64, memory_bytes: u64) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.call_ns.fetch_add(ns, Ordering::Relaxed);
        self.memory_bytes.store(memory_bytes, Ordering::Relaxed);
    }

    /// The guest calls so far.
    pub fn calls(&self) -> CallStats {
        CallStats {
            calls: self.calls.load(Ordering::Relaxed),
            call_ns: self.call_ns.load(Ordering::Relaxed),
            memory_bytes: self.memory_bytes.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a line the guest wrote at `now_ms`, if the rate limit allows;
    /// returns whether it did (the caller prints only what is kept).
    pub fn log(&self, now_ms: i64, level: LogLevel, message: &str) -> bool {
        let mut inner = self.lock();
        if !inner.limit.admit(now_ms) {
            inner.dropped += 1;
            return false;
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let shipped = inner.shipped;
        let evicted = inner.ring.push(LogLine {
            seq,
            time_ms: now_ms,
            level,
            message: message.to_owned(),
        });
        let lost = evicted.iter().filter(|&&s| s > shipped).count() as u64;
        inner.dropped += lost;
        true
    }

    /// Counts a line the host refused before it reached the ring (over
    /// the call's log budget, `wasm::quota`).
    pub fn drop_line(&self) {
        self.lock().dropped += 1;
    }

    /// Lines dropped so far: over the rate limit, or pushed out of the
    /// ring before they were shipped.
    pub fn logs_dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Lines and bytes (with [`LINE_OVERHEAD`] each) the ring holds.
    pub fn ring_size(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.ring.len(), inner.ring.bytes())
    }

    /// The lines the ring holds, oldest first.
    pub fn lines(&self) -> Vec<LogLine> {
        self.lock().ring.iter().cloned().collect()
    }

    /// The lines not shipped yet, oldest first, as many as fit `budget`
    /// bytes (each counted with [`LINE_OVERHEAD`]), which is reduced by
    /// what they take; and the lines dropped since the last call. Lines
    /// that do not fit stay for the next call.
    pub fn take_unshipped(&self, budget: &mut usize) -> Unshipped {
        let mut inner = self.lock();
        let mut lines = Vec::new();
        for line in inner.ring.after(inner.shipped) {
            let cost = line.message.len() + LINE_OVERHEAD;
            if cost > *budget {
                break;
            }
            *budget -= cost;
            lines.push(line.clone());
        }
        if let Some(last) = lines.last() {
            inner.shipped = last.seq;
        }
        let dropped = inner.dropped - inner.dropped_shipped;
        inner.dropped_shipped = inner.dropped;
        Unshipped { lines, dropped }
    }

    /// Adds `delta` to counter `name` (admitted by the instance's quota).
    pub fn counter_add(&self, name: &str, delta: u64) {
        let mut inner = self.lock();
        match inner.metrics.counters.get_mut(name) {
            Some(v) => *v = v.saturating_add(delta),
            None => {
                inner.metrics.counters.insert(name.to_owned(), delta);
            }
        }
    }

    /// Sets gauge `name` (admitted by the instance's quota).
    pub fn gauge_set(&self, name: &str, value: f64) {
        let mut inner = self.lock();
        match inner.metrics.gauges.get_mut(name) {
            Some(v) => *v = value,
            None => {
                inner.metrics.gauges.insert(name.to_owned(), value);
            }
        }
    }

    /// A copy of the guest's counters and gauges.
    pub fn metrics(&self) -> GuestMetrics {
        self.lock().metrics.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::logs::*;
    use super::*;

    /// Issue 15: a guest logging in a tight loop must not grow its daemon.
    /// A million lines in one simulated second leave the ring at its
    /// bounds, and everything over the rate limit is counted as dropped.
    #[test]
    fn a_tight_logging_loop_stays_within_the_ring_bounds() {
        let t = OperatorTelemetry::new();
        let line = "x".repeat(1000);
        let mut kept = 0u64;
        for i in 0..1_000_000u64 {
            if t.log(1_000 + (i / 1_000) as i64, LogLevel::Info, &line) {
                kept += 1;
            }
            let (lines, bytes) = t.ring_size();
            assert!(
                lines <= RING_LINES && bytes <= RING_BYTES,
                "{lines} lines, {bytes} bytes"
            );
        }
        // One second (1000 ms): the burst, then the rate.
        assert!(
            kept <= u64::from(LINES_BURST + LINES_PER_SECOND) + 1,
            "{kept} kept"
        );
        assert!(kept >= u64::from(LINES_BURST), "{kept} kept");
        let (lines, bytes) = t.ring_size();
        assert_eq!(bytes, lines * (1000 + LINE_OVERHEAD));
        assert!(
            bytes > RING_BYTES - (1000 + LINE_OVERHEAD),
            "the ring is full: {bytes}"
        );
        // Nothing was shipped: what was refused or pushed out is dropped.
        assert_eq!(t.logs_dropped(), 1_000_000 - lines as u64);
    }

    #[test]
    fn shipping_takes_each_line_once_within_the_budget() {
        let t = OperatorTelemetry::new();
        for i in 0..10 {
            assert!(t.log(i, LogLevel::Info, &format!("line {i}")));
        }
        let cost = "line 0".len() + LINE_OVERHEAD;
        let mut budget = 3 * cost + 1;
        let first = t.take_unshipped(&mut budget);
        assert_eq!(first.lines.len(), 3);
        assert_eq!(budget, 1);
        assert_eq!(first.lines[0].message, "line 0");
        let mut budget = usize::MAX;
        let rest = t.take_unshipped(&mut budget);
        let seqs: Vec<u64> = rest.lines.iter().map(|l| l.seq).collect();
        assert_eq!(seqs, (4..=10).collect::<Vec<_>>());
        assert!(t.take_unshipped(&mut budget).lines.is_empty());
        assert_eq!(rest.dropped, 0);
    }

    #[test]
    fn lines_pushed_out_before_shipping_are_reported_dropped_once() {
        let t = OperatorTelemetry::new();
        for i in 0..(RING_LINES as i64 + 5) {
            // One line per 10 ms: under the rate limit.
            assert!(t.log(i * 10, LogLevel::Warn, "w"));
        }
        let mut budget = usize::MAX;
        let shipped = t.take_unshipped(&mut budget);
        assert_eq!(shipped.lines.len(), RING_LINES);
        assert_eq!(shipped.dropped, 5);
        assert_eq!(t.take_unshipped(&mut budget).dropped, 0);
    }

    #[test]
    fn metrics_are_kept_by_name() {
        let t = OperatorTelemetry::new();
        t.counter_add("seen", 2);
        t.counter_add("seen", u64::MAX);
        t.gauge_set("lag", 1.5);
        t.gauge_set("lag", -3.0);
        let m = t.metrics();
        assert_eq!(m.counters["seen"], u64::MAX);
        assert_eq!(m.gauges["lag"], -3.0);
    }
}
