//! A native test harness: run an operator without Wasm.
//!
//! Owns [`Harness`], which drives any [`Operator`] (including the function
//! adapters [`Map`](crate::Map), [`FlatMap`](crate::FlatMap),
//! [`Filter`](crate::Filter), [`Keyed`](crate::Keyed)) through the same calls
//! the host makes — `open`, `process` with packed batches, `on-timer`,
//! `on-watermark`, `close` — against in-memory keyed state and timers, and
//! [`Output`], what each call emitted.
//!
//! Semantics kept from the host: state is scoped by the key passed with each
//! access (the record's key in `process_element`, the timer's key in
//! `on_timer`); undeclared state ids and wrong kinds are errors; a timer
//! fires once, when the watermark reaches its time, in time order (then key
//! order), with the watermark already advanced; `on_watermark` follows the
//! timers it made due; emitted batches are checked like the host checks
//! them. Not emulated: key-group ownership (`key-out-of-range`), state TTL,
//! and resource limits.
//!
//! Two tools for testing the SDK's own machinery with an operator:
//!
//! - **The per-call path.** Keyed process functions read and write value
//!   state through a batch cache (one `value-get-many` and one
//!   `value-set-many` per state and batch; [`Harness::batched_state_calls`]
//!   counts them). [`HarnessBuilder::batched_state`]`(false)` runs the
//!   operator without it, every access its own host call, as before
//!   contract 0.1.3: the same operator on the same input must give the
//!   same output, state and timers either way. The switch exists only
//!   natively; a component always uses the cache.
//! - **Checkpoint and restore.** [`Harness::snapshot`] copies what a
//!   checkpoint holds — every value, list and map state of every key, the
//!   registered event-time and processing-time timers, the watermark (and
//!   the harness's processing-time clock) — and
//!   [`HarnessBuilder::restore`] opens a fresh instance of the operator
//!   on it, as the host does after a failure. Snapshots compare equal
//!   exactly when they hold the same, so `assert_eq!` on two snapshots
//!   compares every key of every state and every timer.
//!   [`HarnessBuilder::run_with_failure`] scripts the whole recovery: a
//!   list of [`Step`]s (a batch, then maybe a watermark), a checkpoint
//!   after one step, a failure after a later one, the replay from the
//!   checkpoint in a restored instance, and the end of input; it returns
//!   what was committed, what was lost and the state before and after
//!   the end ([`FailureRun`]).
//!   [`HarnessBuilder::run_with_failure_both_ways`] does it with the batch
//!   cache and on the per-call path and asserts that both saw the same.
//!
//! ```
//! # use weir_sdk::{Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor, ValueState};
//! # struct CountPerKey { count: ValueState<u64> }
//! # impl KeyedProcessFunction for CountPerKey {
//! #     const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("count")];
//! #     fn open(ctx: &OpenContext) -> Result<Self, Error> {
//! #         Ok(CountPerKey { count: ctx.value_state("count")? })
//! #     }
//! #     fn process_element(&mut self, _r: Record<'_>, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
//! #         let n = self.count.get(ctx)?.unwrap_or(0);
//! #         self.count.set(ctx, &(n + 1))
//! #     }
//! # }
//! use weir_sdk::{Keyed, testing::Harness};
//!
//! let mut h = Harness::<Keyed<CountPerKey>>::builder().batched_state(false).open()?;
//! h.process([Record::keyed("a", "x", 1), Record::keyed("a", "y", 2)])?;
//! assert_eq!(h.batched_state_calls(), 0);
//! let checkpoint = h.snapshot();
//! h.process([Record::keyed("a", "z", 3)])?; // lost in the failure
//! let h = Harness::<Keyed<CountPerKey>>::builder().restore(&checkpoint).open()?;
//! assert_eq!(h.value_state::<u64>("count", "a")?, Some(2));
//! assert_eq!(h.snapshot(), checkpoint);
//! # Ok::<(), Error>(())
//! ```
//!
//! Natively only: on `wasm32` this module is empty.
//!
//! ```
//! use weir_sdk::testing::Harness;
//! use weir_sdk::{Error, MapFunction, Map, OpenContext, Record};
//!
//! struct Shout;
//! impl MapFunction for Shout {
//!     fn open(_ctx: &OpenContext) -> Result<Self, Error> {
//!         Ok(Shout)
//!     }
//!     fn map<'a>(&'a mut self, record: Record<'a>) -> Result<Record<'a>, Error> {
//!         Ok(record.with_value(b"HEY"))
//!     }
//! }
//!
//! let mut h = Harness::<Map<Shout>>::open(&[])?;
//! let out = h.process([Record::new("hey", 7)])?;
//! assert_eq!(out.values(), ["HEY"]);
//! # Ok::<(), Error>(())
//! ```

#![cfg(not(target_arch = "wasm32"))]

use std::cell::RefCell;
use std::rc::Rc;

use crate::Error;
use crate::backend::{self, MemoryBackend, Stored};
use crate::bindings::exports::weir::operator::window_function::Accumulated;
use crate::bindings::weir::operator::types::{Batch, Emitted, OperatorInfo};
use crate::codec::StateCodec;
use crate::context::{Config, OpenContext};
use crate::export;
use crate::log::Level;
use crate::operator::Operator;
use crate::record::{OwnedRecord, Record};
use crate::state::{StateDescriptor, StateKind, check_declared};
use crate::window::Window;

/// What one call of an operator emitted, decoded into owned records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The main output, in order.
    pub main: Vec<OwnedRecord>,
    /// Side outputs as `(tag, record)`, in the order the operator sent them
    /// (grouped by tag within one call).
    pub side: Vec<(String, OwnedRecord)>,
}

impl Output {
    /// The main output's values as UTF-8 (lossy).
    pub fn values(&self) -> Vec<String> {
        self.main
            .iter()
            .map(|r| r.value_str().into_owned())
            .collect()
    }

    /// The records of the side output `tag`.
    pub fn side(&self, tag: &str) -> Vec<&OwnedRecord> {
        self.side
            .iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, r)| r)
            .collect()
    }

    /// True if nothing was emitted.
    pub fn is_empty(&self) -> bool {
        self.main.is_empty() && self.side.is_empty()
    }

    /// Appends `other` to this output.
    pub fn extend(&mut self, other: Output) {
        self.main.extend(other.main);
        self.side.extend(other.side);
    }

    fn from_emitted(emitted: &Emitted) -> Result<Self, Error> {
        let decode = |batch: &Batch| -> Result<Vec<OwnedRecord>, Error> {
            Ok(batch
                .records()
                .map_err(|e| e.context("the operator emitted a bad batch"))?
                .map(|r| r.to_owned_record())
                .collect())
        };
        let mut output = Output {
            main: decode(&emitted.main)?,
            side: Vec::new(),
        };
        for side in &emitted.side {
            for record in decode(&side.records)? {
                output.side.push((side.tag.clone(), record));
            }
        }
        Ok(output)
    }
}

/// What a checkpoint of one operator instance holds, taken by
/// [`Harness::snapshot`] and opened again by [`HarnessBuilder::restore`]:
/// every value, list and map state of every key, the registered event-time
/// and processing-time timers, the watermark and the harness's
/// processing-time clock. Not in it: logs, metrics and the counts of host
/// calls, which a restored harness starts afresh.
///
/// Two snapshots are equal exactly when they hold the same; `Debug` prints
/// every entry, with the state's name and the bytes escaped.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The operator's declared states (name, kind), by id.
    states: Vec<(&'static str, StateKind)>,
    stored: Stored,
}

impl Snapshot {
    /// The registered event-time timers as `(time, key)`, in firing order.
    pub fn timers(&self) -> Vec<(i64, Vec<u8>)> {
        self.stored.timers.iter().cloned().collect()
    }

    /// The watermark when the snapshot was taken.
    pub fn watermark(&self) -> i64 {
        self.stored.watermark
    }

    fn state_name(&self, id: u32) -> &'static str {
        self.states.get(id as usize).map_or("?", |(name, _)| *name)
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = |b: &[u8]| b.escape_ascii().to_string();
        let mut list = f.debug_list();
        for ((id, key), value) in &self.stored.values {
            let name = self.state_name(*id);
            list.entry(&format_args!("{name}[{}] = {}", bytes(key), bytes(value)));
        }
        for ((id, key), elements) in &self.stored.lists {
            let elements: Vec<_> = elements.iter().map(|e| bytes(e)).collect();
            let name = self.state_name(*id);
            list.entry(&format_args!("{name}[{}] = {elements:?}", bytes(key)));
        }
        for ((id, key), map) in &self.stored.maps {
            let map: Vec<_> = map.iter().map(|(k, v)| (bytes(k), bytes(v))).collect();
            let name = self.state_name(*id);
            list.entry(&format_args!("{name}[{}] = {map:?}", bytes(key)));
        }
        for (time, key) in &self.stored.timers {
            list.entry(&format_args!("timer {time} {}", bytes(key)));
        }
        for (time, key) in &self.stored.processing_timers {
            list.entry(&format_args!("processing-time timer {time} {}", bytes(key)));
        }
        list.entry(&format_args!("watermark {}", self.stored.watermark));
        list.entry(&format_args!(
            "processing time {}",
            self.stored.processing_time
        ));
        list.finish()
    }
}

/// One step of a scripted run ([`HarnessBuilder::run_with_failure`]): a
/// batch to `process`, then, if set, a watermark to advance to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// The batch (may be empty).
    pub records: Vec<OwnedRecord>,
    /// Where the watermark goes after the batch (at or past the current one).
    pub watermark: Option<i64>,
}

/// What a run that failed once and recovered saw
/// ([`HarnessBuilder::run_with_failure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRun {
    /// What an exactly-once sink commits: everything the first instance
    /// emitted up to the checkpoint, then everything the restored instance
    /// emitted (the replay, the steps after it, and the end of input: the
    /// final watermark and `close`).
    pub committed: Output,
    /// What the first instance emitted after the checkpoint, before it
    /// failed: discarded by the sink, and emitted again by the replay.
    pub lost: Output,
    /// The restored instance's state, timers and watermark after the last
    /// step, before the end of input.
    pub before_end: Snapshot,
    /// The same after the end of input.
    pub at_end: Snapshot,
    /// Batched value-state calls of both instances together
    /// ([`Harness::batched_state_calls`]).
    pub batched_state_calls: u64,
}

/// Settings of the simulated subtask; [`Harness::builder`] makes one.
#[derive(Debug)]
pub struct HarnessBuilder<O> {
    operator_id: String,
    subtask_index: u32,
    parallelism: u32,
    max_parallelism: u32,
    config: Vec<(String, String)>,
    batched_state: bool,
    restore: Option<Snapshot>,
    _operator: std::marker::PhantomData<fn() -> O>,
}

/// Not derived: that would need `O: Clone`, and the builder holds no `O`.
impl<O> Clone for HarnessBuilder<O> {
    fn clone(&self) -> Self {
        Self {
            operator_id: self.operator_id.clone(),
            subtask_index: self.subtask_index,
            parallelism: self.parallelism,
            max_parallelism: self.max_parallelism,
            config: self.config.clone(),
            batched_state: self.batched_state,
            restore: self.restore.clone(),
            _operator: std::marker::PhantomData,
        }
    }
}

impl<O: Operator> HarnessBuilder<O> {
    /// The operator's uid (default `"test-operator"`).
    pub fn operator_id(mut self, id: impl Into<String>) -> Self {
        self.operator_id = id.into();
        self
    }

    /// This subtask's index and the operator's parallelism (default 0 of 1).
    pub fn subtask(mut self, index: u32, parallelism: u32) -> Self {
        self.subtask_index = index;
        self.parallelism = parallelism;
        self
    }

    /// The number of key groups (default 128).
    pub fn max_parallelism(mut self, max_parallelism: u32) -> Self {
        self.max_parallelism = max_parallelism;
        self
    }

    /// Adds a config entry, as the host flattens it (strings as they are,
    /// other scalars in TOML syntax).
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.push((key.into(), value.into()));
        self
    }

    /// Whether a keyed process function reads and writes its value states
    /// through the batch cache (default true, as in a component). False runs
    /// it on the per-call path: every access its own host call, and
    /// [`Harness::batched_state_calls`] stays 0. For tests that the cache
    /// changes nothing but the number of calls.
    pub fn batched_state(mut self, batched: bool) -> Self {
        self.batched_state = batched;
        self
    }

    /// Opens the operator on what `snapshot` holds (state, timers,
    /// watermark), as the host restores a checkpoint into a fresh instance.
    /// Opening fails if the operator declares other states than the one
    /// the snapshot was taken of.
    pub fn restore(mut self, snapshot: &Snapshot) -> Self {
        self.restore = Some(snapshot.clone());
        self
    }

    /// Runs `steps` as a job that checkpoints after `checkpoint` steps and
    /// fails after `failure` steps (`checkpoint <= failure <= steps.len()`):
    /// one instance runs the steps up to the failure, taking a
    /// [`Snapshot`] at the checkpoint; a fresh instance restored from it
    /// replays the steps from the checkpoint on, then ends the input
    /// ([`Harness::finish`]). The host's recovery, for tests that an
    /// operator (or the SDK under it) survives one: compare two runs
    /// (e.g. with and without [`batched_state`](Self::batched_state)), or
    /// `committed` with what the input should give.
    pub fn run_with_failure(
        self,
        steps: &[Step],
        checkpoint: usize,
        failure: usize,
    ) -> Result<FailureRun, Error> {
        if checkpoint > failure || failure > steps.len() {
            crate::bail!(
                "a checkpoint after step {checkpoint} and a failure after step {failure} \
                 do not fit {} steps in this order",
                steps.len()
            );
        }
        let mut first = self.clone().open()?;
        let mut committed = first.run(&steps[..checkpoint])?;
        let snapshot = first.snapshot();
        let lost = first.run(&steps[checkpoint..failure])?;
        let mut restored = self.restore(&snapshot).open()?;
        committed.extend(restored.run(&steps[checkpoint..])?);
        let before_end = restored.snapshot();
        committed.extend(restored.finish()?);
        Ok(FailureRun {
            committed,
            lost,
            before_end,
            at_end: restored.snapshot(),
            batched_state_calls: first.batched_state_calls() + restored.batched_state_calls(),
        })
    }

    /// [`run_with_failure`](Self::run_with_failure) twice, with the batch
    /// cache and on the per-call path ([`batched_state`](Self::batched_state)),
    /// for tests that the cache changes nothing but the number of host
    /// calls. Returns the batched run.
    ///
    /// # Panics
    /// If the batched run made no batched calls or the per-call run made
    /// some, or the two runs differ in what they committed, lost, or held
    /// before and after the end of input (the assertion names which).
    pub fn run_with_failure_both_ways(
        self,
        steps: &[Step],
        checkpoint: usize,
        failure: usize,
    ) -> Result<FailureRun, Error> {
        let per_call = self
            .clone()
            .batched_state(false)
            .run_with_failure(steps, checkpoint, failure)?;
        let batched = self
            .batched_state(true)
            .run_with_failure(steps, checkpoint, failure)?;
        assert!(batched.batched_state_calls > 0, "no batched calls");
        assert_eq!(
            per_call.batched_state_calls, 0,
            "batched calls on the per-call path"
        );
        assert_eq!(batched.committed, per_call.committed, "committed output");
        assert_eq!(batched.lost, per_call.lost, "output lost in the failure");
        assert_eq!(
            batched.before_end, per_call.before_end,
            "state before the end"
        );
        assert_eq!(batched.at_end, per_call.at_end, "state at the end");
        Ok(batched)
    }

    /// Opens the operator.
    pub fn open(self) -> Result<Harness<O>, Error> {
        check_declared(O::STATES)?;
        let mut backend = match self.restore {
            None => MemoryBackend::new(O::STATES),
            Some(snapshot) => {
                if snapshot.states != declared(O::STATES) {
                    crate::bail!(
                        "the snapshot is of an operator with the states {:?}, this one declares {:?}",
                        snapshot.states,
                        declared(O::STATES)
                    );
                }
                MemoryBackend::restored(O::STATES, snapshot.stored)
            }
        };
        backend.batched_state = self.batched_state;
        let backend = Rc::new(RefCell::new(backend));
        let ctx = OpenContext::new(
            self.operator_id,
            self.subtask_index,
            self.parallelism,
            self.max_parallelism,
            Config::new(self.config),
            O::STATES,
        );
        let op = {
            let _installed = backend::install(backend.clone());
            O::open(&ctx)?
        };
        Ok(Harness {
            op,
            backend,
            closed: false,
        })
    }
}

/// The (name, kind) of each declared state, by id.
fn declared(states: &[StateDescriptor]) -> Vec<(&'static str, StateKind)> {
    states.iter().map(|s| (s.name, s.kind)).collect()
}

/// Runs one operator instance natively; see the [module docs](self).
pub struct Harness<O> {
    op: O,
    backend: Rc<RefCell<MemoryBackend>>,
    closed: bool,
}

impl<O: Operator> Harness<O> {
    /// A builder to set the subtask, uid and config before opening.
    pub fn builder() -> HarnessBuilder<O> {
        HarnessBuilder {
            operator_id: "test-operator".to_owned(),
            subtask_index: 0,
            parallelism: 1,
            max_parallelism: 128,
            config: Vec::new(),
            batched_state: true,
            restore: None,
            _operator: std::marker::PhantomData,
        }
    }

    /// Opens the operator as subtask 0 of 1 with `config`.
    pub fn open(config: &[(&str, &str)]) -> Result<Self, Error> {
        config
            .iter()
            .fold(Self::builder(), |b, (k, v)| b.config(*k, *v))
            .open()
    }

    /// What `describe` returns (an empty name or version falls back to
    /// `"test"` / `"0.0.0"`, where a component would use its crate's).
    pub fn describe() -> OperatorInfo {
        export::describe::<O>("test", "0.0.0")
    }

    /// What the host's `migration.migrate-state` gets from the component
    /// on `weir upgrade`, for one stored value (or list element, or map
    /// value) `old` of state `state` written by operator version
    /// `from_version`: the state's migration function's result, or `old`
    /// unchanged for a state without one. Needs no open operator (the host
    /// calls it before `open`).
    pub fn migrate_state(state: &str, from_version: &str, old: &[u8]) -> Result<Vec<u8>, Error> {
        export::migrate::<O>(state, from_version, old.to_vec())
    }

    /// Sends `records` as one batch to `process`.
    pub fn process<'a>(
        &mut self,
        records: impl IntoIterator<Item = Record<'a>>,
    ) -> Result<Output, Error> {
        let batch = Batch::from_records(records);
        self.process_batch(batch)
    }

    /// Sends `records` as one batch to input `input` of a two-input
    /// operator (0 left, 1 right).
    pub fn process_input<'a>(
        &mut self,
        input: u32,
        records: impl IntoIterator<Item = Record<'a>>,
    ) -> Result<Output, Error> {
        let batch = Batch::from_records(records);
        self.call(|op| op.process_input(input, batch))
    }

    /// Sends a packed batch as it is (e.g. a malformed one) to `process`.
    pub fn process_batch(&mut self, batch: Batch) -> Result<Output, Error> {
        self.call(|op| op.process(batch))
    }

    /// Advances the watermark to `watermark`: fires every timer at or before
    /// it (including timers registered while firing), then calls
    /// `on_watermark`. Returns everything emitted. A watermark below the
    /// current one is an error; the same one again does nothing.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<Output, Error> {
        let current = self.current_watermark();
        if watermark < current {
            crate::bail!("watermark {watermark} is behind the current watermark {current}");
        }
        if watermark == current {
            return Ok(Output::default());
        }
        self.backend.borrow_mut().watermark = watermark;
        let mut output = Output::default();
        loop {
            let due = {
                let mut backend = self.backend.borrow_mut();
                match backend.timers.first() {
                    Some((time, _)) if *time <= watermark => backend.timers.pop_first(),
                    _ => None,
                }
            };
            let Some((time, key)) = due else { break };
            output.extend(self.call(|op| op.on_timer(key, time))?);
        }
        output.extend(self.call(|op| op.on_watermark(watermark))?);
        Ok(output)
    }

    /// Moves the harness's processing-time clock forward by `ms` (it starts
    /// at 0) and fires every processing-time timer now due, in time order.
    /// Returns everything emitted.
    pub fn advance_processing_time(&mut self, ms: i64) -> Result<Output, Error> {
        let now = {
            let mut backend = self.backend.borrow_mut();
            backend.processing_time = backend.processing_time.saturating_add(ms);
            backend.processing_time
        };
        let mut output = Output::default();
        loop {
            let due = {
                let mut backend = self.backend.borrow_mut();
                match backend.processing_timers.first() {
                    Some((time, _)) if *time <= now => backend.processing_timers.pop_first(),
                    _ => None,
                }
            };
            let Some((time, key)) = due else { break };
            output.extend(self.call(|op| op.on_processing_timer(key, time))?);
        }
        Ok(output)
    }

    /// The registered processing-time timers as `(time, key)`, in firing order.
    pub fn processing_timers(&self) -> Vec<(i64, Vec<u8>)> {
        self.backend
            .borrow()
            .processing_timers
            .iter()
            .cloned()
            .collect()
    }

    /// Calls `close`. Calling it twice is an error.
    pub fn close(&mut self) -> Result<Output, Error> {
        if self.closed {
            crate::bail!("the operator is already closed");
        }
        let output = self.call(|op| op.close());
        self.closed = true;
        output
    }

    /// End of bounded input, as the host does it: the final watermark
    /// (`i64::MAX`, which fires every timer), then `close`.
    pub fn finish(&mut self) -> Result<Output, Error> {
        let mut output = self.advance_watermark(i64::MAX)?;
        output.extend(self.close()?);
        Ok(output)
    }

    /// The current watermark (`i64::MIN` before the first advance).
    pub fn current_watermark(&self) -> i64 {
        self.backend.borrow().watermark
    }

    /// The registered timers as `(time, key)`, in firing order.
    pub fn timers(&self) -> Vec<(i64, Vec<u8>)> {
        self.backend.borrow().timers.iter().cloned().collect()
    }

    /// Runs `steps`: each batch, then its watermark if it has one.
    /// Returns everything emitted.
    pub fn run(&mut self, steps: &[Step]) -> Result<Output, Error> {
        let mut output = Output::default();
        for step in steps {
            output.extend(self.process(step.records.iter().map(OwnedRecord::as_record))?);
            if let Some(watermark) = step.watermark {
                output.extend(self.advance_watermark(watermark)?);
            }
        }
        Ok(output)
    }

    /// A checkpoint: a copy of every state, the timers and the watermark,
    /// to open a fresh instance on ([`HarnessBuilder::restore`]) or to
    /// compare with another run's.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            states: declared(O::STATES),
            stored: self.backend.borrow().stored(),
        }
    }

    /// The value state `name` of `key`, decoded.
    pub fn value_state<T: StateCodec>(
        &self,
        name: &str,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<T>, Error> {
        let Some(id) = O::STATES.iter().position(|s| s.name == name) else {
            crate::bail!("state `{name}` is not declared");
        };
        let backend = self.backend.borrow();
        backend
            .raw_value(id as u32, key.as_ref())
            .map(|bytes| T::decode(bytes).map_err(Error::from))
            .transpose()
    }

    /// Puts raw `bytes` into value state `name` for `key`, as a restore
    /// would (e.g. what [`Harness::migrate_state`] returned for an old
    /// version's value), so a test can continue from migrated state.
    pub fn set_value_state_bytes(
        &mut self,
        name: &str,
        key: impl AsRef<[u8]>,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let Some(id) = O::STATES.iter().position(|s| s.name == name) else {
            crate::bail!("state `{name}` is not declared");
        };
        self.backend
            .borrow_mut()
            .set_raw_value(id as u32, key.as_ref(), bytes);
        Ok(())
    }

    /// The keys that hold anything in state `name`, in byte order.
    pub fn state_keys(&self, name: &str) -> Vec<Vec<u8>> {
        match O::STATES.iter().position(|s| s.name == name) {
            Some(id) => self.backend.borrow().keys(id as u32).into_iter().collect(),
            None => Vec::new(),
        }
    }

    /// Everything logged so far, in order.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.backend.borrow().logs.clone()
    }

    /// The counter `name` (0 if never added to).
    pub fn counter(&self, name: &str) -> u64 {
        self.backend
            .borrow()
            .counters
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    /// The gauge `name`, if ever set.
    pub fn gauge(&self, name: &str) -> Option<f64> {
        self.backend.borrow().gauges.get(name).copied()
    }

    /// How many batched value-state calls (`value-get-many`,
    /// `value-set-many`) the operator made since it was opened: what keyed
    /// process functions use instead of one call per record (0 with
    /// [`HarnessBuilder::batched_state`]`(false)`).
    pub fn batched_state_calls(&self) -> u64 {
        self.backend.borrow().batched_calls
    }

    /// The operator instance.
    pub fn operator(&self) -> &O {
        &self.op
    }

    /// The operator instance, mutably.
    pub fn operator_mut(&mut self) -> &mut O {
        &mut self.op
    }

    /// Runs a window function's aggregate as the host does for `window` of
    /// `key`: `records` added `chunk` at a time (each `add` call gets the
    /// accumulator as bytes and returns it as bytes), then `get-result`.
    /// Returns the result value.
    pub fn aggregate(
        &mut self,
        key: impl AsRef<[u8]>,
        window: Window,
        records: &[Record<'_>],
        chunk: usize,
    ) -> Result<Vec<u8>, Error> {
        let acc = self.accumulate(records, chunk)?;
        self.result(key.as_ref(), window, acc)
    }

    /// Runs an aggregate as the host does when a record joins two session
    /// windows: `a` and `b` each into its own accumulator (one `add` call
    /// with both), then `merge`, then `get-result`.
    pub fn merged_aggregate(
        &mut self,
        key: impl AsRef<[u8]>,
        window: Window,
        a: &[Record<'_>],
        b: &[Record<'_>],
    ) -> Result<Vec<u8>, Error> {
        let records = Batch::from_records(a.iter().chain(b).copied());
        let targets = (0..a.len())
            .map(|_| 0)
            .chain((0..b.len()).map(|_| 1))
            .collect();
        let mut accs = self.window_call(|op| op.window_add(vec![None, None], targets, records))?;
        if accs.len() != 2 {
            crate::bail!("`add` returned {} accumulators for 2", accs.len());
        }
        let b = accs.pop().expect("two");
        let a = accs.pop().expect("two");
        let mut merged = self.window_call(|op| op.window_merge(vec![(a, b)]))?;
        if merged.len() != 1 {
            crate::bail!("`merge` returned {} accumulators for 1 pair", merged.len());
        }
        self.result(key.as_ref(), window, merged.pop().expect("one"))
    }

    /// Runs a process-window function on `window` of `key` with `records`
    /// as the host does: every record emitted gets the timestamp
    /// `window.max_timestamp()`.
    pub fn process_window(
        &mut self,
        key: impl AsRef<[u8]>,
        window: Window,
        records: &[Record<'_>],
    ) -> Result<Output, Error> {
        let batch = Batch::from_records(records.iter().copied());
        let key = key.as_ref().to_vec();
        let mut output = self.call(|op| op.process_window(key, window, batch))?;
        for r in output
            .main
            .iter_mut()
            .chain(output.side.iter_mut().map(|(_, r)| r))
        {
            r.timestamp = window.max_timestamp();
        }
        Ok(output)
    }

    fn accumulate(&mut self, records: &[Record<'_>], chunk: usize) -> Result<Vec<u8>, Error> {
        let mut acc = None;
        let mut chunks: Vec<&[Record<'_>]> = records.chunks(chunk.max(1)).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        for part in chunks {
            let batch = Batch::from_records(part.iter().copied());
            let targets = vec![0; part.len()];
            let mut out = self.window_call(|op| op.window_add(vec![acc], targets, batch))?;
            if out.len() != 1 {
                crate::bail!("`add` returned {} accumulators for 1", out.len());
            }
            acc = out.pop();
        }
        Ok(acc.expect("at least one add"))
    }

    fn result(
        &mut self,
        key: &[u8],
        window: Window,
        accumulator: Vec<u8>,
    ) -> Result<Vec<u8>, Error> {
        let fired = Accumulated {
            key: key.to_vec(),
            window: window.into(),
            accumulator,
        };
        let mut out = self.window_call(|op| op.window_results(vec![fired]))?;
        if out.len() != 1 {
            crate::bail!("`get-result` returned {} values for 1 window", out.len());
        }
        Ok(out.pop().expect("one"))
    }

    fn window_call<T>(&mut self, f: impl FnOnce(&mut O) -> Result<T, Error>) -> Result<T, Error> {
        if self.closed {
            crate::bail!("the operator is closed");
        }
        let _installed = backend::install(self.backend.clone());
        f(&mut self.op)
    }

    fn call(&mut self, f: impl FnOnce(&mut O) -> Result<Emitted, Error>) -> Result<Output, Error> {
        let emitted = self.window_call(f)?;
        Output::from_emitted(&emitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Collector, Filter, FilterFunction, FlatMap, FlatMapFunction, Keyed, KeyedContext,
        KeyedProcessFunction, ListState, MapState, StateDescriptor, StateKind, ValueState,
    };

    /// Exercises every state kind, timers, side outputs, logs and metrics.
    struct Probe {
        last: ValueState<String>,
        seen: ListState<i64>,
        by_value: MapState<String, u32>,
    }

    impl KeyedProcessFunction for Probe {
        const NAME: &'static str = "probe";
        const VERSION: &'static str = "1.2.3";
        const STATES: &'static [StateDescriptor] = &[
            StateDescriptor::value("last"),
            StateDescriptor::list("seen").with_ttl_ms(1000),
            StateDescriptor::map("by-value"),
        ];

        fn open(ctx: &OpenContext) -> Result<Self, Error> {
            crate::log::info!(
                "open {} {}/{}",
                ctx.operator_id(),
                ctx.subtask_index(),
                ctx.parallelism()
            );
            Ok(Probe {
                last: ctx.value_state("last")?,
                seen: ctx.list_state("seen")?,
                by_value: ctx.map_state("by-value")?,
            })
        }

        fn process_element(
            &mut self,
            record: Record<'_>,
            ctx: &mut KeyedContext<'_>,
        ) -> Result<(), Error> {
            let value = record.value_str().into_owned();
            self.last.set(ctx, &value)?;
            self.seen.add(ctx, &record.timestamp)?;
            let n = self.by_value.get(ctx, &value)?.unwrap_or(0);
            self.by_value.put(ctx, &value, &(n + 1))?;
            ctx.register_event_time_timer(record.timestamp + 10)?;
            if value == "late" {
                ctx.output("late", record);
            }
            crate::metrics::counter_add("records", 1);
            Ok(())
        }

        fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
            let key = String::from_utf8_lossy(ctx.key()).into_owned();
            let last = self.last.get(ctx)?.unwrap_or_default();
            let seen = self.seen.get(ctx)?;
            let counts = self.by_value.entries(ctx)?;
            let value = format!(
                "{key}@{time} wm={} last={last} seen={seen:?} counts={counts:?}",
                ctx.current_watermark()
            );
            ctx.collect(Record::keyed(ctx.key(), &value, time));
            // A timer in the past fires within the same watermark advance.
            if key == "a" && time == 11 {
                ctx.register_event_time_timer(time - 1000)?;
            }
            Ok(())
        }

        fn on_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<(), Error> {
            crate::metrics::gauge_set("watermark", watermark as f64);
            out.collect(Record::new("watermark", watermark));
            Ok(())
        }

        fn close(&mut self, out: &mut Collector) -> Result<(), Error> {
            out.collect(Record::new("closed", 0));
            Ok(())
        }
    }

    #[test]
    fn state_and_timers_are_scoped_to_the_current_key() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Probe>>::builder()
            .operator_id("p1")
            .subtask(1, 2)
            .open()?;
        let out = h.process([
            Record::keyed("a", "x", 1),
            Record::keyed("b", "y", 2),
            Record::keyed("a", "x", 3),
            Record::keyed("b", "late", 4),
        ])?;
        assert!(out.main.is_empty());
        assert_eq!(out.side("late").len(), 1);
        assert_eq!(out.side[0].0, "late");
        assert_eq!(h.value_state::<String>("last", "a")?.as_deref(), Some("x"));
        assert_eq!(
            h.value_state::<String>("last", "b")?.as_deref(),
            Some("late")
        );
        assert_eq!(h.state_keys("seen"), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(h.counter("records"), 4);
        assert_eq!(
            h.timers(),
            [
                (11, b"a".to_vec()),
                (12, b"b".to_vec()),
                (13, b"a".to_vec()),
                (14, b"b".to_vec())
            ]
        );

        // Timers at or before 12 fire, in time order, each seeing its own key's state.
        let out = h.advance_watermark(12)?;
        assert_eq!(
            out.values(),
            [
                r#"a@11 wm=12 last=x seen=[1, 3] counts=[("x", 2)]"#,
                r#"a@-989 wm=12 last=x seen=[1, 3] counts=[("x", 2)]"#,
                r#"b@12 wm=12 last=late seen=[2, 4] counts=[("late", 1), ("y", 1)]"#,
                "watermark",
            ]
        );
        assert_eq!(out.main[0].key.as_deref(), Some(&b"a"[..]));
        assert_eq!(out.main[3].timestamp, 12);
        assert_eq!(h.gauge("watermark"), Some(12.0));
        assert_eq!(h.timers().len(), 2);

        let out = h.finish()?;
        assert_eq!(
            out.main.len(),
            4,
            "two timers, the watermark, close: {out:?}"
        );
        assert_eq!(out.values()[3], "closed");
        assert_eq!(
            h.logs(),
            [(crate::log::Level::Info, "open p1 1/2".to_owned())]
        );
        assert!(h.close().is_err(), "closing twice");
        assert!(h.process([]).is_err(), "processing after close");
        Ok(())
    }

    #[test]
    fn describe_reports_the_declared_states() {
        let info = Harness::<Keyed<Probe>>::describe();
        assert_eq!(
            (info.name.as_str(), info.version.as_str(), info.keyed),
            ("probe", "1.2.3", true)
        );
        let states: Vec<_> = info
            .states
            .iter()
            .map(|s| (s.name.as_str(), s.kind, s.ttl_ms))
            .collect();
        assert_eq!(
            states,
            [
                ("last", StateKind::Value, None),
                ("seen", StateKind::List, Some(1000)),
                ("by-value", StateKind::Map, None),
            ]
        );
    }

    #[test]
    fn keyed_operators_reject_records_without_a_key() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Probe>>::open(&[])?;
        let err = h
            .process([Record::keyed("a", "x", 1), Record::new("x", 2)])
            .unwrap_err();
        assert_eq!(
            err.message(),
            "record 1 of the batch has no key, but this operator runs on a keyed stream"
        );
        Ok(())
    }

    #[test]
    fn watermarks_only_advance() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Probe>>::open(&[])?;
        assert_eq!(h.current_watermark(), i64::MIN);
        h.advance_watermark(5)?;
        assert!(h.advance_watermark(5)?.is_empty());
        assert!(h.advance_watermark(4).is_err());
        Ok(())
    }

    #[test]
    fn malformed_input_batches_are_errors() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Probe>>::open(&[])?;
        let mut batch = Batch::from_records([Record::keyed("a", "x", 1)]);
        batch.data.pop();
        assert!(
            h.process_batch(batch)
                .unwrap_err()
                .message()
                .starts_with("malformed batch")
        );
        Ok(())
    }

    /// Uses a state as the wrong kind and an undeclared id, as a buggy SDK would.
    struct Misuse;

    impl KeyedProcessFunction for Misuse {
        const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("v")];

        fn open(_ctx: &OpenContext) -> Result<Self, Error> {
            Ok(Misuse)
        }

        fn process_element(
            &mut self,
            record: Record<'_>,
            ctx: &mut KeyedContext<'_>,
        ) -> Result<(), Error> {
            let (id, kind) = match record.value {
                b"undeclared" => (7, "list"),
                _ => (0, "list"),
            };
            assert_eq!(kind, "list");
            ListState::<u8>::new(id, "bogus").add(ctx, &1)
        }
    }

    #[test]
    fn the_backend_checks_state_ids_and_kinds_like_the_host() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Misuse>>::open(&[])?;
        assert_eq!(
            h.process([Record::keyed("k", "wrong kind", 1)])
                .unwrap_err()
                .message(),
            "state `bogus`: state id 0 is of another kind on the host"
        );
        assert_eq!(
            h.process([Record::keyed("k", "undeclared", 1)])
                .unwrap_err()
                .message(),
            "state `bogus`: the host knows no state with id 7"
        );
        Ok(())
    }

    #[test]
    fn decoding_bad_state_is_an_error() -> Result<(), Error> {
        struct Bytes;
        impl KeyedProcessFunction for Bytes {
            const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("n")];
            fn open(_ctx: &OpenContext) -> Result<Self, Error> {
                Ok(Bytes)
            }
            fn process_element(
                &mut self,
                record: Record<'_>,
                ctx: &mut KeyedContext<'_>,
            ) -> Result<(), Error> {
                // Write 3 bytes, read them back as a u64.
                ValueState::<Vec<u8>>::new(0, "n").set(ctx, &record.value.to_vec())?;
                ValueState::<u64>::new(0, "n").get(ctx).map(drop)
            }
        }
        let mut h = Harness::<Keyed<Bytes>>::open(&[])?;
        assert_eq!(
            h.process([Record::keyed("k", "abc", 1)])
                .unwrap_err()
                .message(),
            "state `n`: cannot decode u64: expected 8 bytes, got 3"
        );
        Ok(())
    }

    #[test]
    fn duplicate_state_names_fail_open() {
        struct Twice;
        impl KeyedProcessFunction for Twice {
            const STATES: &'static [StateDescriptor] =
                &[StateDescriptor::value("s"), StateDescriptor::list("s")];
            fn open(_ctx: &OpenContext) -> Result<Self, Error> {
                Ok(Twice)
            }
            fn process_element(
                &mut self,
                _record: Record<'_>,
                _ctx: &mut KeyedContext<'_>,
            ) -> Result<(), Error> {
                Ok(())
            }
        }
        let err = Harness::<Keyed<Twice>>::open(&[]).err().unwrap();
        assert_eq!(err.message(), "state `s` is declared twice");
    }

    #[test]
    fn state_outside_the_harness_is_a_clear_error() {
        let state = ValueState::<u64>::new(0, "count");
        let err = state.get(&crate::ExplicitKey(b"k")).unwrap_err();
        assert!(
            err.message()
                .contains("only inside weir_sdk::testing::Harness"),
            "{err}"
        );
        assert_eq!(crate::current_watermark(), i64::MIN);
    }

    /// Keeps values with an even length.
    struct Even;

    impl FilterFunction for Even {
        fn open(_ctx: &OpenContext) -> Result<Self, Error> {
            Ok(Even)
        }
        fn filter(&mut self, record: &Record<'_>) -> Result<bool, Error> {
            Ok(record.value.len().is_multiple_of(2))
        }
    }

    #[test]
    fn filter_compacts_in_place() -> Result<(), Error> {
        let mut h = Harness::<Filter<Even>>::open(&[])?;
        let input = [
            Record::keyed("k1", "odd", 1),
            Record::keyed("k2", "even", 2),
            Record::new("x", 3),
            Record::new("", 4),
            Record::keyed("key", "ab", 5),
        ];
        let out = h.process(input)?;
        let kept: Vec<_> = out.main.iter().map(OwnedRecord::as_record).collect();
        assert_eq!(kept, [input[1], input[3], input[4]]);
        assert!(h.process([Record::new("ab", 1)])?.main.len() == 1);
        assert!(h.process([Record::new("a", 1)])?.is_empty());
        Ok(())
    }

    /// Emits each byte of the value as its own record, keyed by the input's key.
    struct Bytes;

    impl FlatMapFunction for Bytes {
        fn open(_ctx: &OpenContext) -> Result<Self, Error> {
            Ok(Bytes)
        }
        fn flat_map(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
            for b in record.value.chunks(1) {
                out.collect(record.with_value(b));
            }
            if record.value.is_empty() {
                out.output("empty", record);
            }
            Ok(())
        }
    }

    #[test]
    fn flat_map_emits_zero_or_more_records_and_side_outputs() -> Result<(), Error> {
        let mut h = Harness::<FlatMap<Bytes>>::open(&[])?;
        let out = h.process([
            Record::keyed("k", "ab", 1),
            Record::new("", 2),
            Record::new("c", 3),
        ])?;
        assert_eq!(out.values(), ["a", "b", "c"]);
        assert_eq!(out.main[1].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(out.side("empty").len(), 1);
        // Outputs do not leak into the next call.
        assert_eq!(h.process([Record::new("d", 4)])?.values(), ["d"]);
        Ok(())
    }

    /// Counts per key, reads another key explicitly, clears on "reset",
    /// and reports the count from a timer.
    struct Counter {
        count: ValueState<u64>,
    }

    impl KeyedProcessFunction for Counter {
        const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("count")];

        fn open(ctx: &OpenContext) -> Result<Self, Error> {
            Ok(Counter {
                count: ctx.value_state("count")?,
            })
        }

        fn process_element(
            &mut self,
            record: Record<'_>,
            ctx: &mut KeyedContext<'_>,
        ) -> Result<(), Error> {
            if record.value == b"reset" {
                self.count.clear(ctx)?;
                return Ok(());
            }
            if record.value == b"peek" {
                let other = self.count.get(&crate::ExplicitKey(b"outside"))?;
                ctx.collect(Record::keyed(ctx.key(), &format!("{other:?}"), 0));
                return Ok(());
            }
            let n = self.count.get(ctx)?.unwrap_or(0) + 1;
            self.count.set(ctx, &n)?;
            ctx.register_event_time_timer(100)?;
            ctx.collect(Record::keyed(ctx.key(), &n.to_string(), 0));
            Ok(())
        }

        fn on_timer(&mut self, _time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
            let n = self.count.get(ctx)?;
            ctx.collect(Record::keyed(ctx.key(), &format!("final {n:?}"), 0));
            Ok(())
        }
    }

    #[test]
    fn value_state_is_read_and_written_once_per_batch_with_per_record_semantics()
    -> Result<(), Error> {
        let mut h = Harness::<Keyed<Counter>>::open(&[])?;
        // Several records of one key in one batch see each other's updates.
        let out = h.process([
            Record::keyed("a", "x", 1),
            Record::keyed("b", "x", 1),
            Record::keyed("a", "x", 1),
            Record::keyed("a", "x", 1),
        ])?;
        assert_eq!(out.values(), ["1", "1", "2", "3"]);
        // One read and one write for the whole batch.
        assert_eq!(h.batched_state_calls(), 2);
        assert_eq!(h.value_state::<u64>("count", "a")?, Some(3));
        // A clear in the batch, then counting again from nothing; a key
        // outside the batch goes to the backend directly.
        h.set_value_state_bytes("count", "outside", &7u64.to_bytes())?;
        let out = h.process([
            Record::keyed("a", "reset", 1),
            Record::keyed("a", "x", 1),
            Record::keyed("b", "reset", 1),
            Record::keyed("c", "peek", 1),
        ])?;
        assert_eq!(out.values(), ["1", "Some(7)"]);
        assert_eq!(h.value_state::<u64>("count", "a")?, Some(1));
        assert_eq!(h.value_state::<u64>("count", "b")?, None);
        // Timers (later host calls) see what the batches wrote.
        let out = h.advance_watermark(100)?;
        assert_eq!(out.values(), ["final Some(1)", "final None"]);
        // A clear before any read of the state in a batch goes to the
        // backend at once (the cache does not know the state's kind yet).
        let before = h.batched_state_calls();
        h.process([Record::keyed("a", "reset", 2)])?;
        assert_eq!(h.batched_state_calls(), before);
        assert_eq!(h.value_state::<u64>("count", "a")?, None);
        Ok(())
    }

    /// Appends each record's value to its key's text, or to another key's
    /// (`to:<key>:<text>`, through an explicit key), or clears it
    /// (`clear`), and emits what it holds after.
    struct Appender {
        text: ValueState<String>,
    }

    impl KeyedProcessFunction for Appender {
        const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("text")];

        fn open(ctx: &OpenContext) -> Result<Self, Error> {
            Ok(Appender {
                text: ctx.value_state("text")?,
            })
        }

        fn process_element(
            &mut self,
            record: Record<'_>,
            ctx: &mut KeyedContext<'_>,
        ) -> Result<(), Error> {
            let value = std::str::from_utf8(record.value).expect("UTF-8 test input");
            if value == "clear" {
                self.text.clear(ctx)?;
                ctx.collect(Record::keyed(ctx.key(), "", 0));
                return Ok(());
            }
            let (key, text) = match value.strip_prefix("to:") {
                Some(rest) => rest.split_once(':').expect("to:<key>:<text>"),
                None => (std::str::from_utf8(ctx.key()).expect("UTF-8 key"), value),
            };
            let scope = crate::ExplicitKey(key.as_bytes());
            let mut held = self.text.get(&scope)?.unwrap_or_default();
            held.push_str(text);
            self.text.set(&scope, &held)?;
            ctx.collect(Record::keyed(ctx.key(), &held, 0));
            Ok(())
        }
    }

    /// Random batches of appends (values growing and shrinking), clears
    /// and writes to other keys of the same batch or outside it: every
    /// output and the state afterwards equal a plain map's.
    #[test]
    fn the_batch_cache_equals_a_map_under_random_batches() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Appender>>::open(&[])?;
        let mut model: std::collections::HashMap<String, String> = Default::default();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let keys = ["a", "b", "c", "d", "e", "f", "g", "outside-1", "outside-2"];
        for _ in 0..200 {
            let len = 1 + next(40) as usize;
            let mut records = Vec::new();
            let mut expected = Vec::new();
            for _ in 0..len {
                // The first seven keys come as records; all nine as targets.
                let key = keys[next(7) as usize];
                let value = match next(10) {
                    0 => "clear".to_owned(),
                    1..=3 => format!("to:{}:{}", keys[next(9) as usize], next(1000)),
                    _ => "x".repeat(1 + next(3) as usize),
                };
                if value == "clear" {
                    model.remove(key);
                    expected.push(String::new());
                } else {
                    let (target, text) = match value.strip_prefix("to:") {
                        Some(rest) => rest.split_once(':').unwrap(),
                        None => (key, value.as_str()),
                    };
                    let held = model.entry(target.to_owned()).or_default();
                    held.push_str(text);
                    expected.push(held.clone());
                }
                records.push((key, value));
            }
            let out = h.process(records.iter().map(|(k, v)| Record::keyed(k, v, 0)))?;
            assert_eq!(out.values(), expected, "batch {records:?}");
            // Shorten the texts now and then, so that writes shrink too.
            if next(4) == 0 {
                model.clear();
                let clears = keys.iter().map(|k| Record::keyed(k, "clear", 0));
                h.process(clears)?;
            }
        }
        for key in keys {
            assert_eq!(
                h.value_state::<String>("text", key)?,
                model.get(key).cloned(),
                "state of {key}"
            );
        }
        Ok(())
    }

    #[test]
    fn the_per_call_path_makes_no_batched_calls() -> Result<(), Error> {
        let input = [
            Record::keyed("a", "x", 1),
            Record::keyed("b", "x", 1),
            Record::keyed("a", "x", 1),
        ];
        let mut batched = Harness::<Keyed<Counter>>::open(&[])?;
        let mut per_call = Harness::<Keyed<Counter>>::builder()
            .batched_state(false)
            .open()?;
        assert_eq!(batched.process(input)?, per_call.process(input)?);
        assert_eq!(batched.batched_state_calls(), 2);
        assert_eq!(per_call.batched_state_calls(), 0);
        assert_eq!(batched.snapshot(), per_call.snapshot());
        Ok(())
    }

    #[test]
    fn a_restored_harness_goes_on_from_the_snapshot() -> Result<(), Error> {
        let mut h = Harness::<Keyed<Probe>>::open(&[])?;
        h.process([Record::keyed("a", "x", 1), Record::keyed("b", "y", 5)])?;
        h.advance_watermark(2)?;
        let checkpoint = h.snapshot();
        assert_eq!(checkpoint.watermark(), 2);
        assert_eq!(
            checkpoint.timers(),
            [(11, b"a".to_vec()), (15, b"b".to_vec())]
        );
        // After the checkpoint: lost in the failure.
        h.process([Record::keyed("a", "lost", 3)])?;
        assert_ne!(h.snapshot(), checkpoint);

        let mut restored = Harness::<Keyed<Probe>>::builder()
            .restore(&checkpoint)
            .open()?;
        assert_eq!(restored.snapshot(), checkpoint);
        assert_eq!(restored.current_watermark(), 2);
        assert_eq!(restored.batched_state_calls(), 0, "counted afresh");
        let out = restored.advance_watermark(11)?;
        assert_eq!(
            out.values(),
            [
                r#"a@11 wm=11 last=x seen=[1] counts=[("x", 1)]"#,
                r#"a@-989 wm=11 last=x seen=[1] counts=[("x", 1)]"#,
                "watermark"
            ]
        );
        // The snapshot is a copy: what the restored instance does leaves it alone.
        assert_ne!(restored.snapshot(), checkpoint);
        assert_eq!(checkpoint.timers().len(), 2);
        let printed = format!("{checkpoint:?}");
        assert!(printed.contains("last[a] = x"), "{printed}");
        assert!(printed.contains("timer 15 b"), "{printed}");
        Ok(())
    }

    #[test]
    fn a_snapshot_restores_only_into_an_operator_with_the_same_states() -> Result<(), Error> {
        let checkpoint = Harness::<Keyed<Counter>>::open(&[])?.snapshot();
        let err = Harness::<Keyed<Probe>>::builder()
            .restore(&checkpoint)
            .open()
            .err()
            .unwrap();
        assert!(
            err.message()
                .starts_with("the snapshot is of an operator with the states"),
            "{err}"
        );
        Ok(())
    }

    /// Counts per key and keeps the last value (two value states); each
    /// record registers a timer 5 ms later, which emits the count and
    /// doubles it: timers read what the batches wrote, and the next batch
    /// reads what the timers wrote.
    struct Doubler {
        count: ValueState<u64>,
        last: ValueState<String>,
    }

    impl KeyedProcessFunction for Doubler {
        const STATES: &'static [StateDescriptor] = &[
            StateDescriptor::value("count"),
            StateDescriptor::value("last"),
        ];

        fn open(ctx: &OpenContext) -> Result<Self, Error> {
            Ok(Doubler {
                count: ctx.value_state("count")?,
                last: ctx.value_state("last")?,
            })
        }

        fn process_element(
            &mut self,
            record: Record<'_>,
            ctx: &mut KeyedContext<'_>,
        ) -> Result<(), Error> {
            let value = record.value_str();
            if value == "reset" {
                self.count.clear(ctx)?;
            } else {
                let n = self.count.get(ctx)?.unwrap_or(0) + 1;
                self.count.set(ctx, &n)?;
                self.last.set(ctx, &value.into_owned())?;
                ctx.register_event_time_timer(record.timestamp + 5)?;
            }
            let n = self.count.get(ctx)?;
            let last = self.last.get(ctx)?.unwrap_or_default();
            ctx.collect(Record::keyed(ctx.key(), &format!("{n:?}|{last}"), 0));
            Ok(())
        }

        fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
            let n = self.count.get(ctx)?;
            ctx.collect(Record::keyed(ctx.key(), &format!("t:{n:?}"), time));
            if let Some(n) = n {
                self.count.set(ctx, &(n * 2))?;
            }
            Ok(())
        }
    }

    /// `Doubler` computed directly: counts, last values and timers in maps.
    #[derive(Default)]
    struct DoublerModel {
        count: std::collections::HashMap<String, u64>,
        last: std::collections::HashMap<String, String>,
        timers: std::collections::BTreeSet<(i64, String)>,
    }

    impl DoublerModel {
        fn process(&mut self, key: &str, value: &str, timestamp: i64) -> String {
            if value == "reset" {
                self.count.remove(key);
            } else {
                *self.count.entry(key.to_owned()).or_default() += 1;
                self.last.insert(key.to_owned(), value.to_owned());
                self.timers.insert((timestamp + 5, key.to_owned()));
            }
            let last = self.last.get(key).cloned().unwrap_or_default();
            format!("{:?}|{last}", self.count.get(key))
        }

        fn advance(&mut self, watermark: i64) -> Vec<String> {
            let mut out = Vec::new();
            while let Some((time, key)) = self.timers.first().cloned() {
                if time > watermark {
                    break;
                }
                self.timers.pop_first();
                let n = self.count.get(&key).copied();
                out.push(format!("t:{n:?}"));
                if let Some(n) = n {
                    self.count.insert(key, n * 2);
                }
            }
            out
        }
    }

    /// Random batches with several records per key, watermarks between
    /// batches that fire timers, and a checkpoint, a lost batch and a
    /// restore in between: the batch cache gives what single calls give,
    /// and what a plain model gives.
    #[test]
    fn the_batch_cache_equals_single_calls_across_timers_and_a_restore() -> Result<(), Error> {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut ts, mut watermark) = (0, i64::MIN);
        let steps: Vec<Step> = (0..40)
            .map(|_| {
                let records = (0..1 + next(12))
                    .map(|_| {
                        ts += next(3) as i64;
                        let key = ["a", "b", "c", "d"][next(4) as usize];
                        let value = ["x", "y", "reset"][next(3) as usize];
                        Record::keyed(key, value, ts).to_owned_record()
                    })
                    .collect();
                let advance = next(2) == 0;
                if advance {
                    watermark = watermark.max(ts - next(6) as i64);
                }
                Step {
                    records,
                    watermark: advance.then_some(watermark),
                }
            })
            .collect();
        let (checkpoint, failure) = (17, 19);
        let batched = Harness::<Keyed<Doubler>>::builder()
            .run_with_failure_both_ways(&steps, checkpoint, failure)?;

        // Not vacuous: a batch with a key twice, timers fired mid-stream,
        // and the output a plain model computes.
        assert!(steps.iter().any(|step| {
            let keys = step.records.iter().map(|r| &r.key);
            keys.clone()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                < keys.count()
        }));
        let mut model = DoublerModel::default();
        let per_step: Vec<Vec<String>> = steps
            .iter()
            .map(|step| {
                let mut out: Vec<String> = step
                    .records
                    .iter()
                    .map(|r| {
                        let key = r.key_str().unwrap_or_default();
                        model.process(&key, &r.value_str(), r.timestamp)
                    })
                    .collect();
                out.extend(step.watermark.map_or(Vec::new(), |w| model.advance(w)));
                out
            })
            .collect();
        let mid_stream = per_step
            .concat()
            .iter()
            .filter(|v| v.starts_with("t:"))
            .count();
        assert!(mid_stream > 10, "{mid_stream} timers fired mid-stream");
        let mut expected = per_step.concat();
        expected.extend(model.advance(i64::MAX));
        assert_eq!(batched.committed.values(), expected);
        assert_eq!(
            batched.lost.values(),
            per_step[checkpoint..failure].concat()
        );
        Ok(())
    }
}
