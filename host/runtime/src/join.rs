//! The host's joins of two keyed inputs: Flink's interval join
//! (`IntervalJoinOperator`) and tumbling window join. Records of the left
//! input (edges with `input = "left"`) and the right input are buffered per
//! key in the keyed state backend; pairs are emitted once; the buffers are
//! cleaned by the watermark, so state stays bounded by what can still join.
//!
//! # Rules
//!
//! - A record at or below the current watermark is *late*: it goes,
//!   unchanged, to the side output [`LATE_TAG`] (Flink drops it).
//! - Interval (`lower_ms`, `upper_ms`): left `l` and right `r` of one key
//!   join when `r.ts` is in `[l.ts + lower, l.ts + upper]`. Each pair is
//!   emitted when the later of the two arrives (it finds the other in its
//!   buffer), with timestamp `max(l.ts, r.ts)`. A left record is dropped
//!   from state once the watermark reaches `l.ts + upper` (no right record
//!   still to come can match it), a right one at `r.ts - lower`.
//! - Window (`size_ms`): left and right records of one key in the same
//!   tumbling window join when the watermark reaches the window's last
//!   millisecond (every left × every right, each side in timestamp order);
//!   timestamp `end - 1`; then the window's records are dropped.
//! - Output value: `{"key":…,"left":…,"right":…}` (window joins add
//!   `"start"` and `"end"`), where a value that is JSON is embedded as is
//!   and any other value as a JSON string.
//!
//! State: two map states, [`LEFT_STATE`] and [`RIGHT_STATE`]: key →
//! (timestamp, or window start and timestamp) → the values with it.

use std::collections::BTreeSet;

use crate::host_operator::HostOperatorCore;
use crate::job::{JoinKind, JoinSpec};
use crate::record::{Batch, Emitted};
use crate::state::{KeyedStateBackend, StateDescriptor, StateKind};
use crate::wasm::{FailureKind, OperatorError};

/// The state of buffered left records.
pub const LEFT_STATE: &str = "left";
/// The state of buffered right records.
pub const RIGHT_STATE: &str = "right";
/// The side output late records go to.
pub const LATE_TAG: &str = "late";

/// The states a join declares: left (id 0), right (id 1).
pub fn join_states() -> Vec<StateDescriptor> {
    [LEFT_STATE, RIGHT_STATE]
        .into_iter()
        .map(|name| StateDescriptor {
            name: name.to_owned(),
            kind: StateKind::Map,
            ttl: None,
        })
        .collect()
}

/// Order-preserving bytes of a timestamp.
fn ts_bytes(ts: i64) -> [u8; 8] {
    ((ts as u64) ^ (1 << 63)).to_be_bytes()
}

fn ts_of(bytes: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(bytes.try_into().ok()?) ^ (1 << 63)) as i64)
}

/// Values with one timestamp: each as `u32` length + bytes.
fn encode_values(values: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn decode_values(mut bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        out.push(bytes.get(4..4 + len)?.to_vec());
        bytes = &bytes[4 + len..];
    }
    Some(out)
}

/// A value as JSON: itself if it is JSON, else a JSON string.
fn as_json(value: &[u8]) -> String {
    if serde_json::from_slice::<serde::de::IgnoredAny>(value).is_ok() {
        String::from_utf8_lossy(value).into_owned()
    } else {
        serde_json::to_string(&String::from_utf8_lossy(value)).unwrap_or_default()
    }
}

/// One buffered record: (timestamp, value); for window joins the user key
/// also holds the window start.
type Buffered = (i64, Vec<u8>);

/// See the [module docs](self).
pub struct JoinOperator {
    spec: JoinSpec,
    core: HostOperatorCore,
}

impl std::fmt::Debug for JoinOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinOperator")
            .field("spec", &self.spec)
            .field("core", &self.core)
            .finish()
    }
}

impl JoinOperator {
    /// The join `operator` (its uid) of `spec`; give it its state with
    /// [`JoinOperator::attach_state`] before the first record.
    pub fn new(operator: &str, spec: JoinSpec) -> JoinOperator {
        JoinOperator {
            spec,
            core: HostOperatorCore::new(operator),
        }
    }

    /// Gives it its keyed state (declared as [`join_states`]).
    pub fn attach_state(&mut self, backend: Box<dyn KeyedStateBackend>) {
        self.core.attach(backend);
    }

    /// Joins the records of `batch`, which arrived on input `input` (0
    /// left, 1 right).
    pub fn process(&mut self, input: u8, batch: &Batch) -> Result<Emitted, OperatorError> {
        let side = u32::from(input.min(1));
        for r in batch.iter() {
            let Some(key) = r.key else {
                return Err(self.core.fail(
                    FailureKind::Host,
                    "a record without a key reached a join (a bug: its input edges are keyed)"
                        .into(),
                ));
            };
            if r.timestamp <= self.core.watermark {
                self.core.side(LATE_TAG, key, r.value, r.timestamp);
                continue;
            }
            match self.spec.kind {
                JoinKind::Interval { lower_ms, upper_ms } => {
                    self.interval(side, key, r.value, r.timestamp, lower_ms, upper_ms)?
                }
                JoinKind::Window { size_ms } => {
                    let size = size_ms as i64;
                    let start = r.timestamp - r.timestamp.rem_euclid(size);
                    let end = start.saturating_add(size);
                    if end - 1 <= self.core.watermark {
                        self.core.side(LATE_TAG, key, r.value, r.timestamp);
                        continue;
                    }
                    let mut user_key = ts_bytes(start).to_vec();
                    user_key.extend_from_slice(&ts_bytes(r.timestamp));
                    self.append(side, key, &user_key, r.value)?;
                    self.core.timers.insert((end - 1, key.to_vec()));
                }
            }
        }
        Ok(self.core.take_out())
    }

    /// Adds `value` to the values under `user_key` in `side`'s buffer.
    fn append(
        &mut self,
        side: u32,
        key: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), OperatorError> {
        let old = self
            .core
            .backend()?
            .map_get(side, key, user_key)
            .map_err(|e| self.core.host(e))?;
        let mut values = match old {
            Some(bytes) => decode_values(&bytes).ok_or_else(|| self.core.corrupt(key))?,
            None => Vec::new(),
        };
        values.push(value.to_vec());
        self.core
            .backend()?
            .map_put(side, key, user_key, &encode_values(&values))
            .map_err(|e| self.core.host(e))
    }

    /// Every buffered record of `side` for `key`: (user key, timestamp, value).
    fn buffered(
        &mut self,
        side: u32,
        key: &[u8],
    ) -> Result<Vec<(Vec<u8>, Buffered)>, OperatorError> {
        let entries = self
            .core
            .backend()?
            .map_entries(side, key)
            .map_err(|e| self.core.host(e))?;
        let mut out = Vec::new();
        for (user_key, values) in entries {
            let ts = ts_of(&user_key[user_key.len().saturating_sub(8)..])
                .ok_or_else(|| self.core.corrupt(key))?;
            for v in decode_values(&values).ok_or_else(|| self.core.corrupt(key))? {
                out.push((user_key.clone(), (ts, v)));
            }
        }
        Ok(out)
    }

    fn interval(
        &mut self,
        side: u32,
        key: &[u8],
        value: &[u8],
        ts: i64,
        lower: i64,
        upper: i64,
    ) -> Result<(), OperatorError> {
        // The other side's records this one joins: for a left record
        // r.ts in [ts + lower, ts + upper]; for a right one l.ts in
        // [ts - upper, ts - lower].
        let (from, to) = if side == 0 {
            (ts.saturating_add(lower), ts.saturating_add(upper))
        } else {
            (ts.saturating_sub(upper), ts.saturating_sub(lower))
        };
        for (_, (other_ts, other)) in self.buffered(1 - side, key)? {
            if (from..=to).contains(&other_ts) {
                let (l, r) = if side == 0 {
                    (value, &other[..])
                } else {
                    (&other[..], value)
                };
                self.emit_pair(key, None, l, r, ts.max(other_ts));
            }
        }
        self.append(side, key, &ts_bytes(ts), value)?;
        // When no record still to come can join this one.
        let cleanup = if side == 0 {
            ts.saturating_add(upper)
        } else {
            ts.saturating_sub(lower)
        };
        self.core.timers.insert((cleanup, key.to_vec()));
        Ok(())
    }

    fn emit_pair(
        &mut self,
        key: &[u8],
        window: Option<(i64, i64)>,
        left: &[u8],
        right: &[u8],
        ts: i64,
    ) {
        let name = serde_json::to_string(&String::from_utf8_lossy(key)).unwrap_or_default();
        let bounds = window.map_or(String::new(), |(s, e)| format!(r#","start":{s},"end":{e}"#));
        let value = format!(
            r#"{{"key":{name}{bounds},"left":{},"right":{}}}"#,
            as_json(left),
            as_json(right)
        );
        self.core.out.main.push(Some(key), value.as_bytes(), ts);
    }

    /// Advances the watermark: fires window joins and cleans buffers whose
    /// timers it passed, in time order.
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
        match self.spec.kind {
            JoinKind::Interval { lower_ms, upper_ms } => {
                // Drop what can no longer join, on both sides.
                let watermark = self.core.watermark;
                for (side, reach) in [(0u32, upper_ms), (1, lower_ms.saturating_neg())] {
                    let mut seen = BTreeSet::new();
                    for (user_key, (ts, _)) in self.buffered(side, key)? {
                        if ts.saturating_add(reach) <= watermark && seen.insert(user_key.clone()) {
                            self.core
                                .backend()?
                                .map_remove(side, key, &user_key)
                                .map_err(|e| self.core.host(e))?;
                        }
                    }
                }
                Ok(())
            }
            JoinKind::Window { size_ms } => {
                let end = time + 1;
                let start = end.saturating_sub(size_ms as i64);
                let in_window = |(user_key, _): &(Vec<u8>, Buffered)| {
                    ts_of(&user_key[..8.min(user_key.len())]) == Some(start)
                };
                let left: Vec<_> = self
                    .buffered(0, key)?
                    .into_iter()
                    .filter(in_window)
                    .collect();
                let right: Vec<_> = self
                    .buffered(1, key)?
                    .into_iter()
                    .filter(in_window)
                    .collect();
                for (_, (_, l)) in &left {
                    for (_, (_, r)) in &right {
                        self.emit_pair(key, Some((start, end)), l, r, time);
                    }
                }
                for (side, records) in [(0u32, &left), (1, &right)] {
                    let keys: BTreeSet<&Vec<u8>> = records.iter().map(|(k, _)| k).collect();
                    for user_key in keys {
                        self.core
                            .backend()?
                            .map_remove(side, key, user_key)
                            .map_err(|e| self.core.host(e))?;
                    }
                }
                Ok(())
            }
        }
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

    /// Entries in its state (buffered timestamps per key and side), counted
    /// in the backend: what the watermark must keep bounded.
    pub fn state_entries(&mut self) -> Result<usize, OperatorError> {
        let mut n = 0;
        let exported = self.core.backend()?.export(&mut |_, _, _| {
            n += 1;
            Ok(())
        });
        exported.map_err(|e| self.core.host(e))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
