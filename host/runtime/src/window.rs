//! The host's window operator: Flink's `WindowOperator` with a built-in
//! aggregate. An assigner puts each record into windows, the window state
//! (one accumulator per key and window) lives in the keyed state backend,
//! and the event-time trigger fires a window when the watermark passes its
//! last millisecond.
//!
//! # Rules (as Flink's, for event time)
//!
//! - A window `[start, end)` fires when the watermark reaches `end - 1`
//!   (its *max timestamp*): one record, key = the key, timestamp = `end -
//!   1`, value `{"key":"…","start":…,"end":…,"<aggregate>":…}`.
//! - A window is *late* once `end - 1 + allowed_lateness_ms <= watermark`.
//!   A record whose windows are all late goes unchanged to the side output
//!   [`LATE_TAG`]; it is never dropped silently. A record for a window that
//!   fired but is not late yet updates it and fires it again at once (the
//!   new result follows the old one). A window's state is dropped when it is
//!   late (a cleanup timer at `end - 1 + allowed_lateness_ms`).
//! - Tumbling: the window of `ts` starts at `ts - ts mod size`. Sliding: every
//!   window of `size` starting at a multiple of `slide` that covers `ts`.
//!   Session: `[ts, ts + gap)`, merged with every window of its key it
//!   intersects (touching counts), transitively, accumulators merged; if the
//!   merged window is late the record is late and nothing changes.
//! - Global (`count = N`): one window per key, never late, fires and
//!   empties every `N` records (timestamp: the N-th record's); a partial
//!   window at the end of input does not fire (Flink's `countWindow`).
//!   Its records have no `start`/`end`.
//! - Timers are `(time, key)`; a timer fires every window of its key whose
//!   max timestamp (or cleanup time) it is. Timers of windows merged away
//!   are not deleted: they find nothing and do nothing.
//!
//! State: one map state, [`WINDOW_STATE`], key → (window → accumulator),
//! so checkpoints, savepoints and rescaling treat it like any operator's
//! map state.

use crate::host_operator::HostOperatorCore;
use crate::job::{Aggregate, KeySelector, WindowAssigner, WindowSpec};
use crate::record::{Batch, Emitted};
use crate::state::{KeyedStateBackend, StateDescriptor, StateKind};
use crate::wasm::{FailureKind, OperatorError};

/// The name of the window operator's one state.
pub const WINDOW_STATE: &str = "windows";
/// The side output late records go to (`from = "<operator>:late"`).
pub const LATE_TAG: &str = "late";
/// State id of [`WINDOW_STATE`].
const STATE: u32 = 0;

/// The states a window operator declares.
pub fn window_states() -> Vec<StateDescriptor> {
    vec![StateDescriptor {
        name: WINDOW_STATE.to_owned(),
        kind: StateKind::Map,
        ttl: None,
    }]
}

/// `[start, end)`; the global window is `[i64::MIN, i64::MAX)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    start: i64,
    end: i64,
}

const GLOBAL: Window = Window {
    start: i64::MIN,
    end: i64::MAX,
};

impl Window {
    fn max_timestamp(self) -> i64 {
        self.end - 1
    }

    fn intersects(self, other: Window) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    fn cover(self, other: Window) -> Window {
        Window {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// Order-preserving bytes (sign bit flipped, big-endian): map entries
    /// come back ordered by start.
    fn encode(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&((self.start as u64) ^ (1 << 63)).to_be_bytes());
        out[8..].copy_from_slice(&((self.end as u64) ^ (1 << 63)).to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Window> {
        let word = |b: &[u8]| Some((u64::from_be_bytes(b.try_into().ok()?) ^ (1 << 63)) as i64);
        (bytes.len() == 16).then_some(())?;
        Some(Window {
            start: word(&bytes[..8])?,
            end: word(&bytes[8..])?,
        })
    }
}

/// One window's accumulator: records seen, and the running sum, min or max.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Acc {
    count: u64,
    value: f64,
}

impl Acc {
    fn of(x: f64) -> Acc {
        Acc { count: 1, value: x }
    }

    fn merge(&mut self, aggregate: Aggregate, other: Acc) {
        self.count += other.count;
        self.value = match aggregate {
            Aggregate::Count => 0.0,
            Aggregate::Sum | Aggregate::Avg => self.value + other.value,
            Aggregate::Min => self.value.min(other.value),
            Aggregate::Max => self.value.max(other.value),
        };
    }

    fn encode(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..].copy_from_slice(&self.value.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Acc> {
        (bytes.len() == 16).then_some(())?;
        Some(Acc {
            count: u64::from_le_bytes(bytes[..8].try_into().ok()?),
            value: f64::from_le_bytes(bytes[8..].try_into().ok()?),
        })
    }

    /// The aggregate's result as JSON.
    fn result(self, aggregate: Aggregate) -> String {
        let number = |x: f64| {
            if x.is_finite() {
                format!("{x}")
            } else {
                "null".to_owned()
            }
        };
        match aggregate {
            Aggregate::Count => self.count.to_string(),
            Aggregate::Sum | Aggregate::Min | Aggregate::Max => number(self.value),
            Aggregate::Avg => number(self.value / self.count as f64),
        }
    }
}

/// See the [module docs](self).
pub struct WindowOperator {
    spec: WindowSpec,
    core: HostOperatorCore,
}

impl std::fmt::Debug for WindowOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowOperator")
            .field("spec", &self.spec)
            .field("core", &self.core)
            .finish()
    }
}

impl WindowOperator {
    /// The window operator `operator` (its uid) of `spec`. Give it its state
    /// with [`WindowOperator::attach_state`] before the first record.
    pub fn new(operator: &str, spec: WindowSpec) -> WindowOperator {
        WindowOperator {
            spec,
            core: HostOperatorCore::new(operator),
        }
    }

    /// Its operator uid.
    pub fn operator(&self) -> &str {
        &self.core.operator
    }

    /// Gives it its keyed state (declared as [`window_states`]).
    pub fn attach_state(&mut self, backend: Box<dyn KeyedStateBackend>) {
        self.core.attach(backend);
    }

    /// Adds every record of `batch` to its windows; returns what fired at
    /// once (late firings within the allowed lateness, full count windows)
    /// and the late records.
    pub fn process(&mut self, batch: &Batch) -> Result<Emitted, OperatorError> {
        for r in batch.iter() {
            let Some(key) = r.key else {
                return Err(self.core.fail(
                    FailureKind::Host,
                    "a record without a key reached a window (a bug: its input edge is keyed)"
                        .into(),
                ));
            };
            let x = self.number(key, r.value)?;
            let on_time = match self.spec.assigner {
                WindowAssigner::Tumbling { size_ms } => {
                    let size = size_ms as i64;
                    let start = r.timestamp - r.timestamp.rem_euclid(size);
                    self.add(key, start_window(start, size), x)?
                }
                WindowAssigner::Sliding { size_ms, slide_ms } => {
                    let (size, slide) = (size_ms as i64, slide_ms as i64);
                    let mut start = r.timestamp - r.timestamp.rem_euclid(slide);
                    let mut on_time = false;
                    while start > r.timestamp.saturating_sub(size) {
                        on_time |= self.add(key, start_window(start, size), x)?;
                        start = start.saturating_sub(slide);
                    }
                    on_time
                }
                WindowAssigner::Session { gap_ms } => {
                    let window = start_window(r.timestamp, gap_ms as i64);
                    self.add_to_session(key, window, x)?
                }
                WindowAssigner::Global { count } => {
                    self.add_to_global(key, x, count, r.timestamp)?;
                    true
                }
            };
            if !on_time {
                self.core.side(LATE_TAG, key, r.value, r.timestamp);
            }
        }
        Ok(self.core.take_out())
    }

    /// The number a record contributes (1 for `count`).
    fn number(&self, key: &[u8], value: &[u8]) -> Result<f64, OperatorError> {
        let bad = |what: String| {
            self.core.fail(
                FailureKind::Host,
                format!(
                    "bad record for aggregate = \"{}\" (key {:?}, value {:?}): {what}",
                    self.spec.aggregate.name(),
                    String::from_utf8_lossy(key),
                    excerpt(value)
                ),
            )
        };
        match &self.spec.field {
            None => Ok(1.0),
            Some(KeySelector::JsonField(field)) => {
                let v: serde_json::Value = serde_json::from_slice(value).map_err(|e| {
                    bad(format!("field = \"json:{field}\", but it is not JSON: {e}"))
                })?;
                v.get(field)
                    .and_then(serde_json::Value::as_f64)
                    .ok_or_else(|| {
                        bad(format!(
                            "field = \"json:{field}\": no number in field `{field}`"
                        ))
                    })
            }
            Some(_) => std::str::from_utf8(value)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad("field = \"value\": the value is not a decimal number".into())),
        }
    }

    fn is_late(&self, window: Window) -> bool {
        window
            .max_timestamp()
            .saturating_add(self.spec.allowed_lateness_ms as i64)
            <= self.core.watermark
    }

    /// Adds `x` to `window` of `key` unless the window is late; registers
    /// its timers when it is new; fires it at once if it already fired.
    fn add(&mut self, key: &[u8], window: Window, x: f64) -> Result<bool, OperatorError> {
        if self.is_late(window) {
            return Ok(false);
        }
        let user_key = window.encode();
        let old = self
            .core
            .backend()?
            .map_get(STATE, key, &user_key)
            .map_err(|e| self.core.host(e))?;
        let acc = match old.as_deref().and_then(Acc::decode) {
            Some(mut acc) => {
                acc.merge(self.spec.aggregate, Acc::of(x));
                acc
            }
            None => {
                self.register(key, window);
                Acc::of(x)
            }
        };
        self.put(key, window, acc)?;
        Ok(true)
    }

    /// Writes `acc` for `window`, and fires it if the watermark already
    /// passed its end (a late record within the allowed lateness).
    fn put(&mut self, key: &[u8], window: Window, acc: Acc) -> Result<(), OperatorError> {
        self.core
            .backend()?
            .map_put(STATE, key, &window.encode(), &acc.encode())
            .map_err(|e| self.core.host(e))?;
        if window.max_timestamp() <= self.core.watermark {
            self.emit(key, window, acc, window.max_timestamp());
        }
        Ok(())
    }

    fn register(&mut self, key: &[u8], window: Window) {
        let fire = window.max_timestamp();
        self.core.timers.insert((fire, key.to_vec()));
        let lateness = self.spec.allowed_lateness_ms as i64;
        if lateness > 0 {
            self.core
                .timers
                .insert((fire.saturating_add(lateness), key.to_vec()));
        }
    }

    fn windows_of(&mut self, key: &[u8]) -> Result<Vec<(Window, Acc)>, OperatorError> {
        let entries = self
            .core
            .backend()?
            .map_entries(STATE, key)
            .map_err(|e| self.core.host(e))?;
        entries
            .iter()
            .map(|(w, a)| match (Window::decode(w), Acc::decode(a)) {
                (Some(w), Some(a)) => Ok((w, a)),
                _ => Err(self.core.fail(
                    FailureKind::Host,
                    format!(
                        "corrupt window state for key {:?}",
                        String::from_utf8_lossy(key)
                    ),
                )),
            })
            .collect()
    }

    fn add_to_session(
        &mut self,
        key: &[u8],
        window: Window,
        x: f64,
    ) -> Result<bool, OperatorError> {
        let existing = self.windows_of(key)?;
        let mut merged = window;
        let mut absorbed = vec![false; existing.len()];
        loop {
            let mut grew = false;
            for (i, (w, _)) in existing.iter().enumerate() {
                if !absorbed[i] && w.intersects(merged) {
                    absorbed[i] = true;
                    merged = merged.cover(*w);
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        if self.is_late(merged) {
            return Ok(false);
        }
        let mut acc = Acc::of(x);
        for (i, (w, a)) in existing.iter().enumerate() {
            if absorbed[i] {
                acc.merge(self.spec.aggregate, *a);
                if *w != merged {
                    self.core
                        .backend()?
                        .map_remove(STATE, key, &w.encode())
                        .map_err(|e| self.core.host(e))?;
                }
            }
        }
        if !existing.iter().any(|(w, _)| *w == merged) {
            self.register(key, merged);
        }
        self.put(key, merged, acc)?;
        Ok(true)
    }

    fn add_to_global(
        &mut self,
        key: &[u8],
        x: f64,
        count: u64,
        ts: i64,
    ) -> Result<(), OperatorError> {
        let user_key = GLOBAL.encode();
        let old = self
            .core
            .backend()?
            .map_get(STATE, key, &user_key)
            .map_err(|e| self.core.host(e))?;
        let mut acc = Acc::of(x);
        if let Some(old) = old.as_deref().and_then(Acc::decode) {
            let mut old = old;
            old.merge(self.spec.aggregate, acc);
            acc = old;
        }
        let backend = self.core.backend()?;
        let written = if acc.count >= count {
            backend.map_remove(STATE, key, &user_key)
        } else {
            backend.map_put(STATE, key, &user_key, &acc.encode())
        };
        written.map_err(|e| self.core.host(e))?;
        if acc.count >= count {
            self.emit(key, GLOBAL, acc, ts);
        }
        Ok(())
    }

    fn emit(&mut self, key: &[u8], window: Window, acc: Acc, timestamp: i64) {
        let name = serde_json::to_string(&String::from_utf8_lossy(key)).unwrap_or_default();
        let aggregate = self.spec.aggregate;
        let value = if window == GLOBAL {
            format!(
                r#"{{"key":{name},"{}":{}}}"#,
                aggregate.name(),
                acc.result(aggregate)
            )
        } else {
            format!(
                r#"{{"key":{name},"start":{},"end":{},"{}":{}}}"#,
                window.start,
                window.end,
                aggregate.name(),
                acc.result(aggregate)
            )
        };
        self.core
            .out
            .main
            .push(Some(key), value.as_bytes(), timestamp);
    }

    /// Advances the watermark: fires (and cleans up) every window whose
    /// timer it passed, in time order.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<Vec<Emitted>, OperatorError> {
        if !self.core.advance_to(watermark) {
            return Ok(Vec::new());
        }
        while let Some((time, key)) = self.core.pop_due() {
            self.on_timer(&key, time)?;
        }
        Ok(vec![self.core.take_out()])
    }

    fn on_timer(&mut self, key: &[u8], time: i64) -> Result<(), OperatorError> {
        let lateness = self.spec.allowed_lateness_ms as i64;
        let size = match self.spec.assigner {
            WindowAssigner::Tumbling { size_ms } | WindowAssigner::Sliding { size_ms, .. } => {
                size_ms as i64
            }
            WindowAssigner::Session { .. } | WindowAssigner::Global { .. } => 0,
        };
        let windows = if size > 0 {
            // Fixed-size windows: the timer names them (the one that ends
            // here, the one whose lateness ends here): point lookups, no
            // scan of the key's windows.
            let mut windows = Vec::new();
            for last in [time, time.saturating_sub(lateness)] {
                let window = start_window(last.saturating_add(1).saturating_sub(size), size);
                if windows.iter().any(|(w, _)| *w == window) {
                    continue;
                }
                let found = self
                    .core
                    .backend()?
                    .map_get(STATE, key, &window.encode())
                    .map_err(|e| self.core.host(e))?;
                if let Some(bytes) = found {
                    let acc = Acc::decode(&bytes).ok_or_else(|| {
                        self.core.fail(
                            FailureKind::Host,
                            format!(
                                "corrupt window state for key {:?}",
                                String::from_utf8_lossy(key)
                            ),
                        )
                    })?;
                    windows.push((window, acc));
                }
            }
            windows
        } else {
            self.windows_of(key)?
        };
        for (window, acc) in windows {
            if window == GLOBAL {
                continue;
            }
            let fire = window.max_timestamp();
            if fire == time {
                self.emit(key, window, acc, fire);
            }
            if fire.saturating_add(lateness) == time {
                self.core
                    .backend()?
                    .map_remove(STATE, key, &window.encode())
                    .map_err(|e| self.core.host(e))?;
            }
        }
        Ok(())
    }

    /// Its state, timers and watermark (checkpoints and restores go
    /// through them).
    pub(crate) fn core_mut(&mut self) -> &mut HostOperatorCore {
        &mut self.core
    }

    /// Its state, timers and watermark, to read.
    pub(crate) fn core(&self) -> &HostOperatorCore {
        &self.core
    }
}

fn start_window(start: i64, size: i64) -> Window {
    Window {
        start,
        end: start.saturating_add(size),
    }
}

/// The first 64 bytes of a value, for error messages.
fn excerpt(value: &[u8]) -> String {
    let end = value.len().min(64);
    let mut s = String::from_utf8_lossy(&value[..end]).into_owned();
    if value.len() > end {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests;
