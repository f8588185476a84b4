//! The checkpoint coordinator: when to trigger a checkpoint, when one is
//! complete, when one is aborted, and which completed ones are retained.
//!
//! It is a pure state machine in the style of quinn-proto: no sockets, no
//! threads, no clock reads. The JobManager's shell feeds it events — a
//! [`Coordinator::tick`] when time passes, [`Coordinator::ack`] and
//! [`Coordinator::decline`] when subtasks answer, [`Coordinator::suspend`]
//! and [`Coordinator::resume`] around a failover — each with the current
//! [`Instant`], and carries out the [`Action`]s it returns. The shell asks
//! [`Coordinator::next_wakeup`] when it next needs a tick.
//!
//! # Key types
//! * [`CheckpointConfig`]: interval, timeout, max concurrent, min pause and
//!   retention, as set in the job spec (`interval_ms`, `timeout_ms`, ...).
//! * [`Coordinator`]: the state machine, generic over the acknowledgement
//!   payload `A` (state handles; opaque here).
//! * [`Action`]: trigger a barrier, complete, discard or abort a checkpoint.
//! * [`CompletedCheckpoint`], [`CheckpointStats`], [`RestoreRecord`]: what
//!   is retained and what `weir checkpoints` and the REST API show.
//!
//! # Time
//! Deadlines use the monotonic [`Instant`]s passed in. Wall-clock values
//! (`*_ms`, milliseconds since the Unix epoch) are derived from them and the
//! one wall-clock reading given to [`Coordinator::new`]: `now_ms` at `now`.
//! They are for display and for the barrier timestamp, never for deadlines.
//!
//! # Invariants
//! * Checkpoint ids are strictly increasing, starting at `next_id`; an id
//!   is never reused, so acks from a previous attempt of the job (or for a
//!   checkpoint that was aborted) can never complete a new checkpoint.
//! * At most `max_concurrent` checkpoints are pending; with a non-zero
//!   `min_pause`, at most one (the pause is measured from the end of the
//!   last one, as in Flink).
//! * A checkpoint completes only when every subtask has acked it; it ends
//!   exactly once, as completed or aborted.
//! * A completed checkpoint subsumes every older pending one (they are
//!   aborted); the latest completed checkpoint is never discarded.
//! * Duplicate acks, acks and declines for unknown, completed or aborted
//!   ids, and acks from subtasks that are not part of the job are ignored.
//! * Actions come in the order the caller must carry them out: `Complete`
//!   (persist metadata, register the shared files) before the `Abort`s of
//!   the checkpoints it subsumes and the `Discard`s it causes, so releasing
//!   or deleting those never removes a file the new checkpoint references.
//!
//! # Must not touch
//! No I/O, no clocks, no tasks, no storage: the caller injects barriers,
//! writes the metadata file, registers, releases and deletes files, and
//! notifies tasks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::job::config::{
    CheckpointConfig, ConfigError, DEFAULT_MAX_CONCURRENT, DEFAULT_MIN_PAUSE, DEFAULT_RETAIN,
    DEFAULT_TIMEOUT,
};

/// Checkpoints kept in [`Coordinator::history`]: enough for `weir
/// checkpoints` and the web UI, bounded so a long-running job's
/// JobManager does not grow (at 500 ms intervals this is the last ~50 s).
pub const HISTORY_LEN: usize = 100;

/// Restores kept in [`Coordinator::restores`]; bounded like the history,
/// for a job that fails over and over.
pub const RESTORE_HISTORY_LEN: usize = 100;

/// Missing subtasks named in a timeout reason; the rest are counted. Keeps
/// the reason readable in the CLI for a job with thousands of subtasks.
pub const MAX_NAMED_MISSING: usize = 10;

/// Identifies one subtask that must acknowledge: (task index, subtask index).
pub type SubtaskId = (u32, u32);

/// What the caller must do, in the order returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<A> {
    /// Inject barrier `id` at every source.
    Trigger {
        /// The new checkpoint's id.
        id: u64,
        /// Wall-clock trigger time, carried by the barrier.
        timestamp_ms: u64,
    },
    /// Every subtask acked: persist the metadata, register shared files,
    /// then tell tasks (sinks commit).
    Complete(CompletedCheckpoint<A>),
    /// No longer retained (beyond `retain` completed ones, oldest first):
    /// the caller releases its shared files and deletes its private ones.
    Discard(CompletedCheckpoint<A>),
    /// Timed out, declined, subsumed or suspended: the caller tells tasks
    /// and deletes what was uploaded for it (the payloads received so far
    /// are included so their uploads can be found).
    Abort {
        /// The aborted checkpoint.
        id: u64,
        /// Why, for the history and the logs.
        reason: String,
        /// The acks received before the abort, by subtask.
        acked: Vec<(SubtaskId, A)>,
    },
}

/// A checkpoint every subtask acked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedCheckpoint<A> {
    /// Its id.
    pub id: u64,
    /// Wall-clock trigger time.
    pub triggered_at_ms: u64,
    /// Wall-clock completion time (the last ack).
    pub completed_at_ms: u64,
    /// Every subtask's payload.
    pub acks: BTreeMap<SubtaskId, A>,
    /// The longest barrier alignment any subtask reported.
    pub max_alignment: Duration,
}

/// Where a checkpoint in the history stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointStatus {
    /// Triggered, not every subtask has acked.
    Pending,
    /// Every subtask acked.
    Completed,
    /// Timed out, declined, subsumed or suspended.
    Aborted,
}

impl CheckpointStatus {
    /// Its name in the REST API and on the terminal (`completed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointStatus::Pending => "pending",
            CheckpointStatus::Completed => "completed",
            CheckpointStatus::Aborted => "aborted",
        }
    }
}

/// One checkpoint as `weir checkpoints` and the REST API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointStats {
    /// Its id.
    pub id: u64,
    /// Pending, completed or aborted.
    pub status: CheckpointStatus,
    /// Wall-clock trigger time.
    pub triggered_at_ms: u64,
    /// From trigger to completion or abort; `None` while pending.
    pub duration_ms: Option<u64>,
    /// Subtasks that acked.
    pub acked: u32,
    /// Subtasks that must ack.
    pub total: u32,
    /// The longest barrier alignment among the acks so far.
    pub max_alignment_ms: u64,
    /// Why it was aborted.
    pub failure: Option<String>,
    /// Bytes the checkpoint references in total (set by the caller with
    /// [`Coordinator::set_sizes`]; 0 until then).
    pub full_size: u64,
    /// Bytes uploaded for this checkpoint (the rest was already in storage).
    pub incremental_size: u64,
}

/// One restore of the job, for the restore history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRecord {
    /// The checkpoint restored from; `None` for a restart from scratch.
    pub checkpoint: Option<u64>,
    /// Wall-clock time of the restore.
    pub at_ms: u64,
    /// The job attempt that was started (1 for the first restart).
    pub attempt: u32,
    /// Newer retained checkpoints passed over because restoring them
    /// failed (a file missing or corrupt in storage), newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<u64>,
    /// Set when this restore started an upgrade (`weir upgrade`, its
    /// number) or its rollback, from the upgrade's savepoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<u32>,
}

/// A triggered checkpoint waiting for acks.
#[derive(Debug)]
struct Pending<A> {
    triggered_at: Instant,
    triggered_at_ms: u64,
    acks: BTreeMap<SubtaskId, A>,
    max_alignment: Duration,
}

/// The checkpoint coordinator of one job. See the module docs.
#[derive(Debug)]
pub struct Coordinator<A> {
    config: CheckpointConfig,
    subtasks: BTreeSet<SubtaskId>,
    next_id: u64,
    /// `epoch` is wall-clock `epoch_ms`: the anchor for every `*_ms` value.
    epoch: Instant,
    epoch_ms: u64,
    suspended: bool,
    /// No trigger before this (the interval since the last trigger, or
    /// since construction or `resume`).
    next_due: Instant,
    /// When the last checkpoint completed or was aborted (for `min_pause`).
    last_end: Option<Instant>,
    pending: BTreeMap<u64, Pending<A>>,
    /// Completed checkpoints still retained, oldest first.
    retained: VecDeque<CompletedCheckpoint<A>>,
    /// Oldest first, sorted by id, at most [`HISTORY_LEN`].
    history: VecDeque<CheckpointStats>,
    /// Oldest first, at most [`RESTORE_HISTORY_LEN`].
    restores: Vec<RestoreRecord>,
}

impl<A: Clone + std::fmt::Debug> Coordinator<A> {
    /// `subtasks`: every subtask of the job (all must ack a checkpoint);
    /// `next_id`: first id to use (restores continue numbering after the
    /// restored checkpoint); `now_ms`: the wall clock at `now`. The first
    /// trigger comes one `interval` after `now`.
    pub fn new(
        config: CheckpointConfig,
        subtasks: Vec<SubtaskId>,
        next_id: u64,
        now: Instant,
        now_ms: u64,
    ) -> Self {
        let next_due = now + config.interval;
        Self {
            config,
            subtasks: subtasks.into_iter().collect(),
            next_id,
            epoch: now,
            epoch_ms: now_ms,
            suspended: false,
            next_due,
            last_end: None,
            pending: BTreeMap::new(),
            retained: VecDeque::new(),
            history: VecDeque::new(),
            restores: Vec::new(),
        }
    }

    /// Called periodically (and after events): aborts checkpoints that
    /// timed out, then triggers one if it is due. Returns what to do now.
    pub fn tick(&mut self, now: Instant) -> Vec<Action<A>> {
        let mut actions = self.expire(now);
        if self.next_trigger_at().is_some_and(|at| now >= at) {
            self.trigger(now, &mut actions);
        }
        actions
    }

    /// When the caller should call [`Coordinator::tick`] next: the next
    /// trigger or the earliest timeout, whichever comes first. `None` when
    /// suspended with nothing pending. Events (acks, declines) can move it.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let timeouts = self
            .pending
            .values()
            .map(|p| p.triggered_at + self.config.timeout);
        timeouts.chain(self.next_trigger_at()).min()
    }

    /// A subtask acknowledged checkpoint `id` with its payload and its
    /// alignment time. Completes the checkpoint when it is the last ack.
    /// Ignored when the checkpoint is not pending (unknown, completed,
    /// aborted), the subtask is not part of the job, or it already acked.
    /// An ack at or after the checkpoint's deadline is too late: the
    /// checkpoint is aborted as timed out instead.
    pub fn ack(
        &mut self,
        id: u64,
        subtask: SubtaskId,
        payload: A,
        alignment: Duration,
        now: Instant,
    ) -> Vec<Action<A>> {
        let mut actions = self.expire(now);
        if !self.subtasks.contains(&subtask) {
            return actions;
        }
        let Some(pending) = self.pending.get_mut(&id) else {
            return actions;
        };
        if pending.acks.contains_key(&subtask) {
            return actions;
        }
        pending.acks.insert(subtask, payload);
        pending.max_alignment = pending.max_alignment.max(alignment);
        let (acked, max_alignment) = (pending.acks.len(), pending.max_alignment);
        if let Some(stats) = self.stats_mut(id) {
            stats.acked = count(acked);
            stats.max_alignment_ms = millis(max_alignment);
        }
        if acked == self.subtasks.len() {
            self.complete(id, now, &mut actions);
        }
        actions
    }

    /// What `subtask` acked for pending checkpoint `id`, if it did.
    pub fn acked(&self, id: u64, subtask: SubtaskId) -> Option<&A> {
        self.pending.get(&id)?.acks.get(&subtask)
    }

    /// A subtask declined / failed checkpoint `id` (e.g. its upload
    /// failed): abort it. Ignored like [`Coordinator::ack`].
    pub fn decline(
        &mut self,
        id: u64,
        subtask: SubtaskId,
        reason: String,
        now: Instant,
    ) -> Vec<Action<A>> {
        let mut actions = self.expire(now);
        if self.subtasks.contains(&subtask) && self.pending.contains_key(&id) {
            let (task, sub) = subtask;
            let reason = format!("declined by task {task} subtask {sub}: {reason}");
            actions.push(self.abort(id, reason, now));
        }
        actions
    }

    /// The job is failing or being restarted: abort everything pending
    /// (with `reason`, unless it already timed out); no more triggers until
    /// [`Coordinator::resume`]. Acks arriving later are ignored.
    pub fn suspend(&mut self, reason: &str, now: Instant) -> Vec<Action<A>> {
        let mut actions = self.expire(now);
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        for id in ids {
            actions.push(self.abort(id, reason.to_owned(), now));
        }
        self.suspended = true;
        actions
    }

    /// Triggers again after [`Coordinator::suspend`], the first one an
    /// `interval` from `now` (and at least `min_pause` after the last end).
    /// Does nothing when not suspended.
    pub fn resume(&mut self, now: Instant) {
        if self.suspended {
            self.suspended = false;
            self.next_due = now + self.config.interval;
        }
    }

    /// Starts over with another set of subtasks and `config` (a job
    /// upgraded to another graph, or back): every pending checkpoint is
    /// aborted and every retained one discarded — they belong to the graph
    /// the job no longer runs, which a savepoint now stands for. Ids go on;
    /// the history and the restore history stay. Stays suspended (or not)
    /// as it was.
    pub fn rescope(
        &mut self,
        subtasks: Vec<SubtaskId>,
        config: CheckpointConfig,
        now: Instant,
    ) -> Vec<Action<A>> {
        let mut actions = Vec::new();
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        for id in ids {
            actions.push(self.abort(id, "the job is upgraded".to_owned(), now));
        }
        actions.extend(self.retained.drain(..).map(Action::Discard));
        self.subtasks = subtasks.into_iter().collect();
        self.config = config;
        actions
    }

    /// Marks the latest restore as the one that started upgrade `upgrade`
    /// (from its savepoint) in the restore history.
    pub fn mark_upgrade(&mut self, upgrade: u32) {
        if let Some(last) = self.restores.last_mut() {
            last.upgrade = Some(upgrade);
        }
    }

    /// Triggers a checkpoint now, whatever the interval, the pause and the
    /// checkpoints pending (a savepoint); its id with what to do. `None`
    /// while suspended. The next periodic trigger comes an `interval` later.
    pub fn trigger_now(&mut self, now: Instant) -> Option<(u64, Vec<Action<A>>)> {
        if self.suspended {
            return None;
        }
        let mut actions = self.expire(now);
        let id = self.next_id;
        self.trigger(now, &mut actions);
        Some((id, actions))
    }

    /// Whether [`Coordinator::suspend`] stopped triggering.
    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

    /// The latest completed checkpoint, if any.
    pub fn latest(&self) -> Option<&CompletedCheckpoint<A>> {
        self.retained.back()
    }

    /// Every retained completed checkpoint, oldest first (the last is
    /// [`Coordinator::latest`]).
    pub fn retained(&self) -> impl DoubleEndedIterator<Item = &CompletedCheckpoint<A>> {
        self.retained.iter()
    }

    /// Ids of the pending checkpoints, ascending.
    pub fn pending(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending.keys().copied()
    }

    /// The id the next trigger will use.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The configuration this coordinator runs with.
    pub fn config(&self) -> &CheckpointConfig {
        &self.config
    }

    /// Retains a checkpoint completed before this coordinator existed (a
    /// JobManager restart, or a job started from a retained checkpoint), so
    /// retention discards it in time and [`Coordinator::latest`] can return
    /// it. Raises `next_id` past its id. Returns the `Discard`s retention
    /// causes. Ignored if a checkpoint with that id is already retained.
    pub fn adopt(&mut self, checkpoint: CompletedCheckpoint<A>) -> Vec<Action<A>> {
        let id = checkpoint.id;
        if self.retained.iter().any(|c| c.id == id) {
            return Vec::new();
        }
        self.next_id = self.next_id.max(id + 1);
        let stats = CheckpointStats {
            id,
            status: CheckpointStatus::Completed,
            triggered_at_ms: checkpoint.triggered_at_ms,
            duration_ms: Some(
                checkpoint
                    .completed_at_ms
                    .saturating_sub(checkpoint.triggered_at_ms),
            ),
            acked: count(checkpoint.acks.len()),
            total: count(checkpoint.acks.len()),
            max_alignment_ms: millis(checkpoint.max_alignment),
            failure: None,
            full_size: 0,
            incremental_size: 0,
        };
        if self.stats_mut(id).is_none() {
            let at = self.history.partition_point(|s| s.id < id);
            self.history.insert(at, stats);
            self.trim_history();
        }
        let at = self.retained.partition_point(|c| c.id < id);
        self.retained.insert(at, checkpoint);
        let mut actions = Vec::new();
        self.enforce_retention(&mut actions);
        actions
    }

    /// History for `weir checkpoints` / REST: newest first, at most
    /// [`HISTORY_LEN`] entries, completed, aborted and pending alike.
    pub fn history(&self) -> Vec<CheckpointStats> {
        self.history.iter().rev().cloned().collect()
    }

    /// Sets the sizes of checkpoint `id` in the history (the caller knows
    /// them once the metadata is written). Returns false if `id` is no
    /// longer (or was never) in the history.
    pub fn set_sizes(&mut self, id: u64, full_size: u64, incremental_size: u64) -> bool {
        match self.stats_mut(id) {
            Some(stats) => {
                stats.full_size = full_size;
                stats.incremental_size = incremental_size;
                true
            }
            None => false,
        }
    }

    /// Records a restore (from checkpoint `from`, at wall-clock `at_ms`, as
    /// job attempt `attempt`) for the restore history.
    pub fn record_restore(&mut self, from: Option<u64>, at_ms: u64, attempt: u32) {
        self.record_restore_skipping(from, Vec::new(), at_ms, attempt);
    }

    /// Like [`Coordinator::record_restore`], for a restore that passed over
    /// the newer retained checkpoints `skipped` because they could not be
    /// restored.
    pub fn record_restore_skipping(
        &mut self,
        from: Option<u64>,
        skipped: Vec<u64>,
        at_ms: u64,
        attempt: u32,
    ) {
        if self.restores.len() == RESTORE_HISTORY_LEN {
            self.restores.remove(0);
        }
        self.restores.push(RestoreRecord {
            checkpoint: from,
            at_ms,
            attempt,
            skipped,
            upgrade: None,
        });
    }

    /// The restore history, oldest first, at most [`RESTORE_HISTORY_LEN`].
    pub fn restores(&self) -> &[RestoreRecord] {
        &self.restores
    }

    /// The earliest time the next trigger may happen, or `None` if none may
    /// happen until something ends (or resumes).
    fn next_trigger_at(&self) -> Option<Instant> {
        let max_concurrent = self.config.max_concurrent.max(1) as usize;
        if self.suspended || self.pending.len() >= max_concurrent {
            return None;
        }
        if !self.config.min_pause.is_zero() && !self.pending.is_empty() {
            return None;
        }
        let after_pause = self.last_end.map(|end| end + self.config.min_pause);
        Some(after_pause.map_or(self.next_due, |at| at.max(self.next_due)))
    }

    fn trigger(&mut self, now: Instant, actions: &mut Vec<Action<A>>) {
        let id = self.next_id;
        self.next_id += 1;
        // Measured from this trigger, not from the missed due time: a late
        // trigger does not cause a burst of catch-up triggers.
        self.next_due = now + self.config.interval;
        let triggered_at_ms = self.wall_ms(now);
        self.pending.insert(
            id,
            Pending {
                triggered_at: now,
                triggered_at_ms,
                acks: BTreeMap::new(),
                max_alignment: Duration::ZERO,
            },
        );
        self.history.push_back(CheckpointStats {
            id,
            status: CheckpointStatus::Pending,
            triggered_at_ms,
            duration_ms: None,
            acked: 0,
            total: count(self.subtasks.len()),
            max_alignment_ms: 0,
            failure: None,
            full_size: 0,
            incremental_size: 0,
        });
        self.trim_history();
        actions.push(Action::Trigger {
            id,
            timestamp_ms: triggered_at_ms,
        });
        if self.subtasks.is_empty() {
            // Nothing to wait for: a job without subtasks is trivially done.
            self.complete(id, now, actions);
        }
    }

    /// Aborts every pending checkpoint whose deadline is at or before `now`.
    fn expire(&mut self, now: Instant) -> Vec<Action<A>> {
        let timeout = self.config.timeout;
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now >= p.triggered_at + timeout)
            .map(|(id, _)| *id)
            .collect();
        expired
            .into_iter()
            .map(|id| {
                let reason = self.timeout_reason(id);
                self.abort(id, reason, now)
            })
            .collect()
    }

    fn timeout_reason(&self, id: u64) -> String {
        let acks = &self.pending[&id].acks;
        let missing: Vec<SubtaskId> = self
            .subtasks
            .iter()
            .filter(|s| !acks.contains_key(s))
            .copied()
            .collect();
        let mut named: Vec<String> = missing
            .iter()
            .take(MAX_NAMED_MISSING)
            .map(|(task, sub)| format!("task {task} subtask {sub}"))
            .collect();
        if missing.len() > MAX_NAMED_MISSING {
            named.push(format!("and {} more", missing.len() - MAX_NAMED_MISSING));
        }
        format!(
            "timed out after {:?} waiting for {} of {} subtasks: {}",
            self.config.timeout,
            missing.len(),
            self.subtasks.len(),
            named.join(", ")
        )
    }

    /// Ends pending checkpoint `id` as completed: `Complete`, then the
    /// `Abort`s of older pending ones it subsumes, then the `Discard`s.
    fn complete(&mut self, id: u64, now: Instant, actions: &mut Vec<Action<A>>) {
        let pending = self
            .pending
            .remove(&id)
            .expect("complete is only called for a pending checkpoint");
        self.last_end = Some(now);
        let checkpoint = CompletedCheckpoint {
            id,
            triggered_at_ms: pending.triggered_at_ms,
            completed_at_ms: self.wall_ms(now),
            acks: pending.acks,
            max_alignment: pending.max_alignment,
        };
        if let Some(stats) = self.stats_mut(id) {
            stats.status = CheckpointStatus::Completed;
            stats.duration_ms = Some(millis(now - pending.triggered_at));
        }
        actions.push(Action::Complete(checkpoint.clone()));
        let subsumed: Vec<u64> = self.pending.range(..id).map(|(id, _)| *id).collect();
        for old in subsumed {
            actions.push(self.abort(old, format!("subsumed by checkpoint {id}"), now));
        }
        self.retained.push_back(checkpoint);
        self.enforce_retention(actions);
    }

    /// Discards the oldest retained checkpoints beyond `retain` (never the
    /// latest: `retain` counts as at least 1).
    fn enforce_retention(&mut self, actions: &mut Vec<Action<A>>) {
        let retain = self.config.retain.max(1) as usize;
        while self.retained.len() > retain {
            let oldest = self.retained.pop_front().expect("more than one retained");
            actions.push(Action::Discard(oldest));
        }
    }

    /// Ends pending checkpoint `id` as aborted.
    fn abort(&mut self, id: u64, reason: String, now: Instant) -> Action<A> {
        let pending = self
            .pending
            .remove(&id)
            .expect("abort is only called for a pending checkpoint");
        self.last_end = Some(now);
        if let Some(stats) = self.stats_mut(id) {
            stats.status = CheckpointStatus::Aborted;
            stats.duration_ms = Some(millis(now - pending.triggered_at));
            stats.failure = Some(reason.clone());
        }
        Action::Abort {
            id,
            reason,
            acked: pending.acks.into_iter().collect(),
        }
    }

    fn stats_mut(&mut self, id: u64) -> Option<&mut CheckpointStats> {
        let at = self.history.partition_point(|s| s.id < id);
        self.history.get_mut(at).filter(|s| s.id == id)
    }

    fn trim_history(&mut self) {
        while self.history.len() > HISTORY_LEN {
            self.history.pop_front();
        }
    }

    fn wall_ms(&self, at: Instant) -> u64 {
        self.epoch_ms + millis(at.saturating_duration_since(self.epoch))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
