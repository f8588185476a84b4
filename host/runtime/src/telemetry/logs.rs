//! Operator log lines: [`LogLine`], the bounded [`LogRing`] that keeps the
//! newest of them, and the [`RateLimit`] in front of it. Pure: time comes
//! in as milliseconds since the epoch.
//!
//! The same ring keeps a subtask's lines on its TaskManager and, once
//! shipped, on the JobManager (`GET /v1/jobs/{id}/logs`).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Most lines a ring keeps per subtask: the last few seconds of a chatty
/// operator, or the whole life of a quiet one.
pub const RING_LINES: usize = 1000;

/// Most bytes a ring keeps per subtask (messages plus [`LINE_OVERHEAD`]
/// each): with a guest's lines capped at 4 KiB, at least 60 of the longest
/// fit, and a thousand TaskManager subtasks hold at most 256 MiB.
pub const RING_BYTES: usize = 256 << 10;

/// Bytes a line costs beyond its message: sequence number, time, level,
/// the ring's slot and the message's allocation header.
pub const LINE_OVERHEAD: usize = 64;

/// Lines a subtask may log per second, sustained, before lines are
/// dropped; with [`LINES_BURST`], enough for an operator that logs every
/// record of a slow stream or a few lines per batch of a fast one.
pub const LINES_PER_SECOND: u32 = 200;

/// Lines a quiet subtask may log at once before the rate applies.
pub const LINES_BURST: u32 = 1000;

/// The level of a log line, as the guest's `log` interface has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Finest detail.
    Trace,
    /// Debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected the operator coped with.
    Warn,
    /// Something failed.
    Error,
}

impl LogLevel {
    /// Lowercase name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// One line a guest logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Increasing within its ring (on a TaskManager: per subtask; on the
    /// JobManager: per job, so a client can ask for what came after).
    pub seq: u64,
    /// When it was written, in milliseconds since the epoch.
    pub time_ms: i64,
    /// Its level.
    pub level: LogLevel,
    /// What the guest wrote (cut to the host's line limit).
    pub message: String,
}

impl LogLine {
    /// What the line costs in a ring.
    pub fn cost(&self) -> usize {
        self.message.len() + LINE_OVERHEAD
    }
}

/// The newest lines, at most `max_lines` of them and `max_bytes` in all.
#[derive(Debug, Clone)]
pub struct LogRing {
    lines: VecDeque<LogLine>,
    bytes: usize,
    max_lines: usize,
    max_bytes: usize,
}

impl LogRing {
    /// An empty ring with these bounds (at least one line).
    pub fn new(max_lines: usize, max_bytes: usize) -> LogRing {
        LogRing {
            lines: VecDeque::new(),
            bytes: 0,
            max_lines: max_lines.max(1),
            max_bytes: max_bytes.max(LINE_OVERHEAD + 1),
        }
    }

    /// Adds `line` (its `seq` above every line's in the ring), cut to fit
    /// the byte bound alone, and pushes out the oldest lines until the ring
    /// is within its bounds. Returns the sequence numbers pushed out.
    pub fn push(&mut self, mut line: LogLine) -> Vec<u64> {
        let room = self.max_bytes - LINE_OVERHEAD;
        if line.message.len() > room {
            let mut end = room;
            while !line.message.is_char_boundary(end) {
                end -= 1;
            }
            line.message.truncate(end);
        }
        self.bytes += line.cost();
        self.lines.push_back(line);
        let mut evicted = Vec::new();
        while self.lines.len() > self.max_lines || self.bytes > self.max_bytes {
            let Some(old) = self.lines.pop_front() else {
                break;
            };
            self.bytes -= old.cost();
            evicted.push(old.seq);
        }
        evicted
    }

    /// The lines after sequence number `seq`, oldest first.
    pub fn after(&self, seq: u64) -> impl Iterator<Item = &LogLine> {
        let start = self.lines.partition_point(|l| l.seq <= seq);
        self.lines.range(start..)
    }

    /// Every line, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &LogLine> {
        self.lines.iter()
    }

    /// Lines held.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether it holds no line.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Bytes held (messages plus [`LINE_OVERHEAD`] each).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// A token bucket on lines: `burst` at once, then `per_second`.
#[derive(Debug, Clone)]
pub struct RateLimit {
    /// Thousandths of a line available.
    tokens: u64,
    capacity: u64,
    /// Thousandths of a line added per millisecond (= lines per second).
    per_ms: u64,
    last_ms: Option<i64>,
}

impl RateLimit {
    /// Full: `burst` lines may come at once.
    pub fn new(per_second: u32, burst: u32) -> RateLimit {
        let capacity = u64::from(burst.max(1)) * 1000;
        RateLimit {
            tokens: capacity,
            capacity,
            per_ms: u64::from(per_second),
            last_ms: None,
        }
    }

    /// Whether a line may pass at `now_ms`; takes its token if so. A clock
    /// that goes back adds nothing.
    pub fn admit(&mut self, now_ms: i64) -> bool {
        let elapsed = match self.last_ms {
            Some(last) => now_ms.saturating_sub(last).max(0) as u64,
            None => 0,
        };
        if self.last_ms.is_none_or(|last| now_ms > last) {
            self.last_ms = Some(now_ms);
        }
        self.tokens = self
            .tokens
            .saturating_add(elapsed.saturating_mul(self.per_ms))
            .min(self.capacity);
        if self.tokens >= 1000 {
            self.tokens -= 1000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, message: &str) -> LogLine {
        LogLine {
            seq,
            time_ms: 0,
            level: LogLevel::Info,
            message: message.to_owned(),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_lines_within_both_bounds() {
        let mut ring = LogRing::new(3, 10_000);
        for seq in 1..=5 {
            ring.push(line(seq, "a"));
        }
        let seqs: Vec<u64> = ring.iter().map(|l| l.seq).collect();
        assert_eq!(seqs, [3, 4, 5]);
        let mut ring = LogRing::new(100, 3 * (LINE_OVERHEAD + 10));
        for seq in 1..=10 {
            ring.push(line(seq, "0123456789"));
            assert!(ring.bytes() <= 3 * (LINE_OVERHEAD + 10));
        }
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.push(line(11, "0123456789")), vec![8]);
    }

    #[test]
    fn a_line_larger_than_the_ring_is_cut_on_a_char_boundary() {
        let mut ring = LogRing::new(10, LINE_OVERHEAD + 5);
        ring.push(line(1, "ééééé"));
        assert_eq!(ring.len(), 1);
        assert_eq!(ring.iter().next().unwrap().message, "éé");
        assert!(ring.bytes() <= LINE_OVERHEAD + 5);
    }

    #[test]
    fn after_skips_what_a_reader_has_seen() {
        let mut ring = LogRing::new(10, 10_000);
        for seq in [2, 4, 6] {
            ring.push(line(seq, "x"));
        }
        let after = |s| ring.after(s).map(|l| l.seq).collect::<Vec<_>>();
        assert_eq!(after(0), [2, 4, 6]);
        assert_eq!(after(4), [6]);
        assert_eq!(after(6), Vec::<u64>::new());
    }

    #[test]
    fn the_rate_limit_passes_a_burst_then_the_rate() {
        let mut limit = RateLimit::new(10, 5);
        let passed = (0..100).filter(|_| limit.admit(0)).count();
        assert_eq!(passed, 5);
        // 10 lines per second: one per 100 ms.
        assert!(!limit.admit(99));
        assert!(limit.admit(100));
        assert!(!limit.admit(100));
        // A clock going back adds nothing and is not held against it.
        assert!(!limit.admit(50));
        assert!(limit.admit(200));
        // A long quiet time fills the bucket to the burst, no more.
        let passed = (0..100).filter(|_| limit.admit(1_000_000)).count();
        assert_eq!(passed, 5);
    }
}
