//! The TaskManager's checkpoint ledger for one deployment (one attempt of a
//! job): which local snapshots to upload and from which base, when to
//! acknowledge or decline them to the JobManager, and when to commit the
//! sinks' pre-committed output (phase two of the two-phase commit).
//!
//! A pure state machine in the style of [`super::coordinator`]: no clock,
//! no channels, no storage, no tasks. The TaskManager's shell
//! (`JobCheckpoints` in `taskmanager/src/checkpoints.rs`) feeds it events and
//! carries out the [`Command`]s it returns, in the order returned:
//! * [`AckLedger::trigger`]: the JobManager triggered a checkpoint.
//! * [`AckLedger::taken`]: a local subtask took the synchronous part of its
//!   snapshot (its sink pre-committed its output); the shell uploads it
//!   from the base returned, then reports with [`AckLedger::uploaded`] or
//!   [`AckLedger::upload_failed`].
//! * [`AckLedger::finished`]: a local subtask reached the end of its input
//!   (its snapshot with [`crate::taskmanager::FINISHED`]).
//! * [`AckLedger::complete`], [`AckLedger::aborted`]: the JobManager
//!   completed or abandoned a checkpoint.
//! * [`AckLedger::job_finished`], [`AckLedger::stop`]: the attempt ends.
//!   Only the outcomes of uploads still running may follow; the shell
//!   waits for them until [`AckLedger::quiet`].
//!
//! # Key types
//! * [`AckLedger`]: the state machine. It starts from what the attempt
//!   restored: finished subtasks' parts and the restored state handles.
//! * [`Command`]: ask local sources for a barrier, send an Ack or a Decline
//!   to the JobManager, commit one sink committable.
//!
//! # Invariants
//! * A subtask's snapshot is acked only once it is uploaded, with what was
//!   uploaded; a failed upload is declined. Acks are per subtask, as the
//!   JobManager counts them.
//! * A finished subtask's last part (no state, its source position and its
//!   final pre-committed output) answers each checkpoint newer than every
//!   one the subtask acked: the newest triggered when it finishes, and
//!   each one triggered later. Never one it acked with its state: the
//!   JobManager keeps the first ack, and a restore from that checkpoint
//!   would produce the final output again after it was committed.
//! * Sink output pre-committed at checkpoint `n`'s barrier is committed
//!   when the first checkpoint `>= n` completes (or the job finishes), in
//!   checkpoint order, once. Never earlier: until then a restore could
//!   produce it again. Never dropped while the attempt runs, even when `n`
//!   is aborted or its upload fails: its records come before the barrier
//!   of the next completed checkpoint, whose source positions are past
//!   them, so no restore produces them again (Flink's two-phase commit
//!   sink does the same).
//! * A finished subtask's final output is committed with each checkpoint
//!   its last part answers (commits are idempotent), and once more when the
//!   job finishes.
//! * An upload's base is, per operator vertex and subtask, its state handle
//!   in the newest completed checkpoint (at first, the restored one). An
//!   aborted checkpoint's uploads are forgotten; one that ends after the
//!   abort is overwritten by the next completed checkpoint's in the same
//!   step that would make it a base (for every subtask still uploading:
//!   each acks every checkpoint with an upload).
//! * [`AckLedger::stop`] commits nothing: a restore commits the restored
//!   checkpoint's output and deletes the rest.
//! * Every upload started is acked, also one that ends after the attempt
//!   ended: the JobManager finds no pending checkpoint for it and deletes
//!   its files. Without that ack nobody would know they exist (a finished
//!   job's storage is never swept).
//!
//! # Must not touch
//! No I/O: the shell uploads (on the blocking pool), sends to the
//! JobManager, and commits with [`crate::connectors::commit`]. The ledger
//! does not decide when checkpoints complete: the coordinator does.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::coordinator::SubtaskId;
use super::snapshot::StateHandle;
use super::snapshot::SubtaskCheckpoint;

/// An operator's state in one subtask: (vertex index, subtask index).
pub type StateKey = (usize, u32);

/// What the shell must do, in the order returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Ask every local source to inject the barrier of `checkpoint` (a
    /// request that only raises: an older id is a no-op).
    InjectBarrier {
        /// The checkpoint triggered.
        checkpoint: u64,
    },
    /// Acknowledge `checkpoint` for `subtask` to the JobManager.
    Ack {
        /// The checkpoint acked.
        checkpoint: u64,
        /// The local subtask acking.
        subtask: SubtaskId,
        /// Its part of the checkpoint.
        part: SubtaskCheckpoint,
        /// Its barrier alignment time.
        alignment: Duration,
    },
    /// Decline `checkpoint` for `subtask`: the JobManager aborts it.
    Decline {
        /// The checkpoint declined.
        checkpoint: u64,
        /// The local subtask declining.
        subtask: SubtaskId,
        /// Why, for the JobManager's history.
        reason: String,
    },
    /// Publish a sink's pre-committed output (phase two), or a source's
    /// committable.
    Commit(serde_json::Value),
}

/// One deployment's checkpoint ledger on a TaskManager. See the module docs.
#[derive(Debug, Default)]
pub struct AckLedger {
    /// Finished subtasks' last part: it answers every later checkpoint.
    finished: BTreeMap<SubtaskId, SubtaskCheckpoint>,
    /// The base of the next incremental upload of each operator's state:
    /// its handle in the last completed (or the restored) checkpoint.
    previous: HashMap<StateKey, StateHandle>,
    /// The newest checkpoint triggered.
    last_trigger: u64,
    /// The newest checkpoint each subtask acked.
    acked: HashMap<SubtaskId, u64>,
    /// Sink committables not committed yet, by checkpoint: pre-committed at
    /// its barrier, or a finished subtask's final output answering it.
    pending_commits: BTreeMap<u64, Vec<serde_json::Value>>,
    /// Handles uploaded by checkpoint, until it completes or aborts.
    uploaded: BTreeMap<u64, HashMap<StateKey, StateHandle>>,
    /// Uploads started and not reported yet.
    uploading: usize,
    /// The attempt ended ([`AckLedger::job_finished`] or
    /// [`AckLedger::stop`]): uploads still running are acked, nothing else.
    ended: bool,
}

impl AckLedger {
    /// A ledger starting from what the attempt restored: `finished`, the
    /// parts of subtasks that had finished (their output already
    /// committed), and `previous`, the restored state handles (the base of
    /// the first incremental uploads). Both empty for a fresh start.
    pub fn new(
        finished: impl IntoIterator<Item = (SubtaskId, SubtaskCheckpoint)>,
        previous: HashMap<StateKey, StateHandle>,
    ) -> Self {
        Self {
            finished: finished.into_iter().collect(),
            previous,
            ..Self::default()
        }
    }

    /// The JobManager triggered `checkpoint`: sources inject its barrier,
    /// finished subtasks answer it with their last part (unless they acked
    /// it already: a barrier from another TaskManager's source can reach a
    /// subtask before this trigger reaches its TaskManager).
    pub fn trigger(&mut self, checkpoint: u64) -> Vec<Command> {
        self.last_trigger = self.last_trigger.max(checkpoint);
        let mut commands = vec![Command::InjectBarrier { checkpoint }];
        let finished: Vec<(SubtaskId, SubtaskCheckpoint)> = self
            .finished
            .iter()
            .filter(|(s, _)| self.acked_up_to(**s) < checkpoint)
            .map(|(s, part)| (*s, part.clone()))
            .collect();
        for (subtask, part) in finished {
            commands.push(self.answer_finished(checkpoint, subtask, part));
        }
        commands
    }

    /// `subtask` took the synchronous part of its snapshot for
    /// `checkpoint` (not [`crate::taskmanager::FINISHED`]: that is
    /// [`AckLedger::finished`]), with local state for the operator
    /// `vertices`; `sink` is its sink's output pre-committed at the
    /// barrier. The shell uploads it, each vertex's state incrementally
    /// from the returned base (vertices without one upload in full), and
    /// reports the outcome with [`AckLedger::uploaded`] or
    /// [`AckLedger::upload_failed`].
    pub fn taken(
        &mut self,
        checkpoint: u64,
        subtask: SubtaskId,
        vertices: impl IntoIterator<Item = usize>,
        sink: Option<serde_json::Value>,
    ) -> HashMap<usize, StateHandle> {
        self.uploading += 1;
        // Recorded now, not when acked: whatever becomes of this checkpoint
        // (aborted, its upload failed), the output is committed with the
        // next one to complete.
        if let Some(sink) = sink {
            self.pending_commits
                .entry(checkpoint)
                .or_default()
                .push(sink);
        }
        vertices
            .into_iter()
            .filter_map(|v| self.previous.get(&(v, subtask.1)).map(|h| (v, h.clone())))
            .collect()
    }

    /// `subtask` reached the end of its input: `source` is its final
    /// position, `sink` its final pre-committed output. The newest
    /// checkpoint triggered gets this part if it is newer than every one
    /// the subtask acked, and so does every checkpoint triggered from now
    /// on (see [`AckLedger::trigger`]).
    pub fn finished(
        &mut self,
        subtask: SubtaskId,
        source: Option<serde_json::Value>,
        sink: Option<serde_json::Value>,
    ) -> Vec<Command> {
        let part = SubtaskCheckpoint {
            finished: true,
            source,
            sink,
            ..SubtaskCheckpoint::default()
        };
        let mut commands = Vec::new();
        // A checkpoint triggered while it was finishing gets this part.
        if self.last_trigger > self.acked_up_to(subtask) {
            commands.push(self.answer_finished(self.last_trigger, subtask, part.clone()));
        }
        self.finished.insert(subtask, part);
        commands
    }

    /// A source's [`crate::connectors::Source::committable`] taken with
    /// `checkpoint` (or, for [`crate::taskmanager::FINISHED`], with its
    /// last position): committed with the sinks' output once the first
    /// checkpoint `>= checkpoint` (for a finished source: `>=` the newest
    /// triggered) completes, or the job finishes. Not part of any
    /// checkpoint: a restore does not commit it again.
    pub fn source_taken(&mut self, checkpoint: u64, committable: serde_json::Value) {
        if self.ended {
            return;
        }
        let at = if checkpoint == crate::taskmanager::FINISHED {
            self.last_trigger
        } else {
            checkpoint
        };
        self.pending_commits
            .entry(at)
            .or_default()
            .push(committable);
    }

    /// The upload of `subtask`'s snapshot for `checkpoint` succeeded:
    /// `part` names what was uploaded. Acks it.
    pub fn uploaded(
        &mut self,
        checkpoint: u64,
        subtask: SubtaskId,
        part: SubtaskCheckpoint,
        alignment: Duration,
    ) -> Vec<Command> {
        self.uploading = self.uploading.saturating_sub(1);
        if !self.ended {
            let entry = self.uploaded.entry(checkpoint).or_default();
            for (v, h) in &part.states {
                entry.insert((*v, subtask.1), h.clone());
            }
        }
        vec![self.ack(checkpoint, subtask, part, alignment)]
    }

    /// The upload of `subtask`'s snapshot for `checkpoint` failed: declines
    /// it. Its sink's output stays pending (see [`AckLedger::taken`]).
    pub fn upload_failed(
        &mut self,
        checkpoint: u64,
        subtask: SubtaskId,
        reason: String,
    ) -> Vec<Command> {
        self.uploading = self.uploading.saturating_sub(1);
        if self.ended {
            return Vec::new();
        }
        vec![Command::Decline {
            checkpoint,
            subtask,
            reason,
        }]
    }

    /// The JobManager completed `checkpoint`: commits the output pending
    /// for it and for every older checkpoint, oldest first; its uploads
    /// (and older ones) become the base of the next ones.
    pub fn complete(&mut self, checkpoint: u64) -> Vec<Command> {
        let commands = self.commit_up_to(checkpoint);
        let done: Vec<u64> = self
            .uploaded
            .range(..=checkpoint)
            .map(|(k, _)| *k)
            .collect();
        for k in done {
            if let Some(handles) = self.uploaded.remove(&k) {
                self.previous.extend(handles);
            }
        }
        commands
    }

    /// The JobManager abandoned `checkpoint`: forgets what was uploaded for
    /// it. Its output stays pending: it is committed with the next
    /// checkpoint to complete.
    pub fn aborted(&mut self, checkpoint: u64) {
        self.uploaded.remove(&checkpoint);
    }

    /// Every subtask of the job finished: commits everything pending, then
    /// every finished subtask's final output (also what no checkpoint
    /// completed after it finished). Uploads still running are acked when
    /// they end (see [`AckLedger::quiet`]).
    pub fn job_finished(&mut self) -> Vec<Command> {
        if std::mem::replace(&mut self.ended, true) {
            return Vec::new();
        }
        let mut commands = self.commit_up_to(u64::MAX);
        for part in self.finished.values() {
            if let Some(sink) = &part.sink {
                commands.push(Command::Commit(sink.clone()));
            }
        }
        commands
    }

    /// The attempt ended without finishing: nothing is committed (the
    /// restore of the next attempt commits what its checkpoint holds).
    /// Uploads still running are acked when they end, for the JobManager to
    /// delete (see [`AckLedger::quiet`]).
    pub fn stop(&mut self) {
        self.ended = true;
        self.pending_commits.clear();
    }

    /// Whether no upload is running: once the attempt ended, the shell may
    /// drop the ledger (and report the end) only then.
    pub fn quiet(&self) -> bool {
        self.uploading == 0
    }

    /// Acks `checkpoint` with a finished subtask's last part: its final
    /// output is committed when the checkpoint completes.
    fn answer_finished(
        &mut self,
        checkpoint: u64,
        subtask: SubtaskId,
        part: SubtaskCheckpoint,
    ) -> Command {
        if let Some(sink) = &part.sink {
            self.pending_commits
                .entry(checkpoint)
                .or_default()
                .push(sink.clone());
        }
        self.ack(checkpoint, subtask, part, Duration::ZERO)
    }

    fn ack(
        &mut self,
        checkpoint: u64,
        subtask: SubtaskId,
        part: SubtaskCheckpoint,
        alignment: Duration,
    ) -> Command {
        let acked = self.acked.entry(subtask).or_default();
        *acked = (*acked).max(checkpoint);
        Command::Ack {
            checkpoint,
            subtask,
            part,
            alignment,
        }
    }

    /// The newest checkpoint `subtask` acked (0: none).
    fn acked_up_to(&self, subtask: SubtaskId) -> u64 {
        self.acked.get(&subtask).copied().unwrap_or(0)
    }

    fn commit_up_to(&mut self, checkpoint: u64) -> Vec<Command> {
        let ids: Vec<u64> = self
            .pending_commits
            .range(..=checkpoint)
            .map(|(k, _)| *k)
            .collect();
        ids.into_iter()
            .flat_map(|k| self.pending_commits.remove(&k).unwrap_or_default())
            .map(Command::Commit)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::BackendKind;
    use serde_json::{Value, json};

    const A: SubtaskId = (0, 0);
    const B: SubtaskId = (1, 0);
    /// The operator vertex whose state subtask `A` snapshots.
    const V: usize = 1;
    const ALIGN: Duration = Duration::from_millis(7);

    /// A state handle told apart by `tag` (its size).
    fn handle(tag: u64) -> StateHandle {
        StateHandle {
            backend: BackendKind::Heap,
            files: Vec::new(),
            full_size: tag,
            incremental_size: tag,
        }
    }

    /// A sink committable told apart by `name`.
    fn txn(name: &str) -> Value {
        json!({ "parts": [name] })
    }

    /// What an upload of a snapshot with state `h` and output `sink` yields.
    fn part(h: Option<u64>, sink: Option<&str>) -> SubtaskCheckpoint {
        SubtaskCheckpoint {
            states: h.map(|h| vec![(V, handle(h))]).unwrap_or_default(),
            sink: sink.map(txn),
            ..SubtaskCheckpoint::default()
        }
    }

    /// `subtask` takes its snapshot for `checkpoint` and the upload succeeds.
    fn take_and_upload(
        l: &mut AckLedger,
        checkpoint: u64,
        subtask: SubtaskId,
        sink: &str,
    ) -> Vec<Command> {
        l.taken(checkpoint, subtask, [V], Some(txn(sink)));
        l.uploaded(
            checkpoint,
            subtask,
            part(Some(checkpoint), Some(sink)),
            ALIGN,
        )
    }

    fn commits(commands: &[Command]) -> Vec<Value> {
        commands
            .iter()
            .filter_map(|c| match c {
                Command::Commit(v) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }

    /// (checkpoint, subtask, finished) of every Ack.
    fn acks(commands: &[Command]) -> Vec<(u64, SubtaskId, bool)> {
        commands
            .iter()
            .filter_map(|c| match c {
                Command::Ack {
                    checkpoint,
                    subtask,
                    part,
                    ..
                } => Some((*checkpoint, *subtask, part.finished)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_snapshot_is_acked_only_once_uploaded_with_what_was_uploaded() {
        let mut l = AckLedger::default();
        assert_eq!(l.trigger(1), vec![Command::InjectBarrier { checkpoint: 1 }]);
        l.taken(1, A, [V], Some(txn("a-1")));
        l.taken(1, B, [], None);
        // Taking a snapshot acks nothing; each subtask acks when its own
        // upload is done.
        let uploaded = part(Some(10), Some("a-1"));
        assert_eq!(
            l.uploaded(1, A, uploaded.clone(), ALIGN),
            vec![Command::Ack {
                checkpoint: 1,
                subtask: A,
                part: uploaded,
                alignment: ALIGN,
            }]
        );
        let commands = l.uploaded(1, B, part(None, None), Duration::ZERO);
        assert_eq!(acks(&commands), vec![(1, B, false)]);
    }

    #[test]
    fn a_failed_upload_declines_and_acks_nothing() {
        let mut l = AckLedger::default();
        l.trigger(1);
        l.taken(1, A, [V], None);
        assert_eq!(
            l.upload_failed(1, A, "disk full".to_owned()),
            vec![Command::Decline {
                checkpoint: 1,
                subtask: A,
                reason: "disk full".to_owned(),
            }]
        );
    }

    #[test]
    fn output_is_committed_only_when_its_checkpoint_completes() {
        let mut l = AckLedger::default();
        l.trigger(1);
        let commands = take_and_upload(&mut l, 1, A, "a-1");
        assert!(commits(&commands).is_empty(), "{commands:?}");
        assert_eq!(commits(&l.complete(1)), vec![txn("a-1")]);
        // Once.
        assert!(l.complete(1).is_empty());
    }

    #[test]
    fn a_sources_offsets_are_committed_with_their_checkpoint_never_before_nor_after_a_stop() {
        let mut l = AckLedger::default();
        l.trigger(1);
        l.source_taken(1, txn("offsets-1"));
        take_and_upload(&mut l, 1, A, "a-1");
        l.trigger(2);
        l.source_taken(2, txn("offsets-2"));
        assert_eq!(commits(&l.complete(1)), vec![txn("offsets-1"), txn("a-1")]);
        // A finished source's last offsets wait for the newest checkpoint
        // triggered (2), or a later one.
        l.source_taken(crate::taskmanager::FINISHED, txn("offsets-end"));
        assert_eq!(
            commits(&l.complete(2)),
            vec![txn("offsets-2"), txn("offsets-end")]
        );
        l.trigger(3);
        l.source_taken(3, txn("offsets-3"));
        l.stop();
        l.source_taken(4, txn("offsets-4"));
        assert!(commits(&l.complete(4)).is_empty());
    }

    #[test]
    fn completing_a_checkpoint_commits_it_and_every_older_one_in_checkpoint_order() {
        let mut l = AckLedger::default();
        l.trigger(1);
        l.trigger(2);
        l.trigger(3);
        // Uploads end out of order.
        take_and_upload(&mut l, 2, A, "a-2");
        take_and_upload(&mut l, 3, A, "a-3");
        take_and_upload(&mut l, 1, A, "a-1");
        assert_eq!(commits(&l.complete(2)), vec![txn("a-1"), txn("a-2")]);
        assert_eq!(commits(&l.complete(3)), vec![txn("a-3")]);
    }

    #[test]
    fn a_newer_checkpoint_completing_subsumes_older_pending_commits() {
        let mut l = AckLedger::default();
        l.trigger(4);
        l.trigger(5);
        take_and_upload(&mut l, 4, A, "a-4");
        take_and_upload(&mut l, 4, B, "b-4");
        take_and_upload(&mut l, 5, A, "a-5");
        take_and_upload(&mut l, 5, B, "b-5");
        // The coordinator completes 5 and aborts 4, in this order.
        assert_eq!(
            commits(&l.complete(5)),
            vec![txn("a-4"), txn("b-4"), txn("a-5"), txn("b-5")]
        );
        l.aborted(4);
        assert!(commits(&l.job_finished()).is_empty());
    }

    #[test]
    fn an_aborted_checkpoints_output_is_committed_with_the_next_completed_one() {
        // Its records precede the next completed checkpoint's barrier: no
        // restore produces them again, so dropping them would lose them.
        let mut l = AckLedger::default();
        l.trigger(1);
        take_and_upload(&mut l, 1, A, "a-1");
        l.aborted(1);
        l.trigger(2);
        take_and_upload(&mut l, 2, A, "a-2");
        assert_eq!(commits(&l.complete(2)), vec![txn("a-1"), txn("a-2")]);
    }

    #[test]
    fn a_failed_uploads_output_is_committed_with_the_next_completed_one() {
        let mut l = AckLedger::default();
        l.trigger(1);
        l.taken(1, A, [V], Some(txn("a-1")));
        l.upload_failed(1, A, "disk full".to_owned());
        l.aborted(1);
        l.trigger(2);
        take_and_upload(&mut l, 2, A, "a-2");
        assert_eq!(commits(&l.complete(2)), vec![txn("a-1"), txn("a-2")]);
    }

    #[test]
    fn output_still_uploading_is_committed_when_a_newer_checkpoint_completes() {
        let mut l = AckLedger::default();
        l.trigger(5);
        l.trigger(6);
        l.taken(5, A, [V], Some(txn("a-5")));
        take_and_upload(&mut l, 6, A, "a-6");
        // 6 completes before the upload for 5 ends (and subsumes 5).
        assert_eq!(commits(&l.complete(6)), vec![txn("a-5"), txn("a-6")]);
        l.aborted(5);
        let late = l.uploaded(5, A, part(Some(5), Some("a-5")), ALIGN);
        assert!(commits(&late).is_empty(), "{late:?}");
        assert!(commits(&l.job_finished()).is_empty());
    }

    #[test]
    fn a_late_upload_of_an_aborted_checkpoint_is_acked_for_cleanup_but_never_becomes_the_base() {
        let mut l = AckLedger::default();
        l.trigger(5);
        l.trigger(6);
        l.taken(5, A, [V], None);
        l.taken(6, A, [V], None);
        l.aborted(6);
        // The JobManager answers a late ack by deleting what it uploaded.
        let commands = l.uploaded(6, A, part(Some(6), None), ALIGN);
        assert_eq!(acks(&commands), vec![(6, A, false)]);
        l.uploaded(5, A, part(Some(5), None), ALIGN);
        l.complete(5);
        // Checkpoint 7 is uploaded on top of 5, the newest completed.
        l.trigger(7);
        assert_eq!(l.taken(7, A, [V], None), HashMap::from([(V, handle(5))]));
    }

    #[test]
    fn uploads_start_from_the_restored_state_then_from_the_newest_completed_checkpoint() {
        let restored = HashMap::from([((V, A.1), handle(100))]);
        let mut l = AckLedger::new([], restored);
        l.trigger(1);
        assert_eq!(l.taken(1, A, [V], None), HashMap::from([(V, handle(100))]));
        // A vertex without a base uploads in full.
        assert_eq!(l.taken(1, A, [V + 1], None), HashMap::new());
        l.uploaded(1, A, part(Some(1), None), ALIGN);
        // Not before the checkpoint completes.
        assert_eq!(l.taken(2, A, [V], None), HashMap::from([(V, handle(100))]));
        l.complete(1);
        assert_eq!(l.taken(3, A, [V], None), HashMap::from([(V, handle(1))]));
    }

    #[test]
    fn a_finished_subtask_answers_every_later_trigger_with_its_last_part() {
        let restored = SubtaskCheckpoint {
            finished: true,
            sink: Some(txn("b-final")),
            ..SubtaskCheckpoint::default()
        };
        let mut l = AckLedger::new([(B, restored.clone())], HashMap::new());
        let commands = l.trigger(3);
        assert_eq!(
            commands,
            vec![
                Command::InjectBarrier { checkpoint: 3 },
                Command::Ack {
                    checkpoint: 3,
                    subtask: B,
                    part: restored,
                    alignment: Duration::ZERO,
                },
            ]
        );
        // Committing it again is harmless (commits are idempotent).
        assert_eq!(commits(&l.complete(3)), vec![txn("b-final")]);
        assert_eq!(acks(&l.trigger(4)), vec![(4, B, true)]);
    }

    #[test]
    fn a_subtask_finishing_before_acking_the_newest_trigger_answers_it_with_its_last_part() {
        let mut l = AckLedger::default();
        l.trigger(1);
        take_and_upload(&mut l, 1, A, "a-1");
        // Acked: finishing now answers nothing.
        assert!(l.finished(A, None, Some(txn("a-end"))).is_empty());

        l.trigger(2);
        // Triggered, but B's source finished before injecting the barrier.
        let commands = l.finished(B, Some(json!(42)), Some(txn("b-end")));
        assert_eq!(acks(&commands), vec![(2, B, true)]);
        let Command::Ack { part, .. } = &commands[0] else {
            unreachable!()
        };
        assert_eq!(part.source, Some(json!(42)));
        assert_eq!(part.sink, Some(txn("b-end")));
    }

    #[test]
    fn a_late_upload_of_an_older_checkpoint_does_not_let_the_final_output_answer_a_newer_one() {
        let mut l = AckLedger::default();
        l.trigger(1);
        l.trigger(2);
        l.taken(1, A, [V], Some(txn("a-1")));
        take_and_upload(&mut l, 2, A, "a-2");
        // The upload for 1 ends after the one for 2.
        l.uploaded(1, A, part(Some(1), Some("a-1")), ALIGN);
        // 2 was acked with A's state: finishing answers nothing.
        assert!(l.finished(A, None, Some(txn("a-end"))).is_empty());
        // A restore from 2 produces A's final output again: not committed.
        assert_eq!(commits(&l.complete(2)), vec![txn("a-1"), txn("a-2")]);
        assert_eq!(acks(&l.trigger(3)), vec![(3, A, true)]);
        assert_eq!(commits(&l.complete(3)), vec![txn("a-end")]);
    }

    #[test]
    fn a_trigger_arriving_after_the_subtask_acked_it_is_not_answered_with_the_last_part() {
        let mut l = AckLedger::default();
        l.trigger(3);
        take_and_upload(&mut l, 3, A, "a-3");
        // A barrier from another TaskManager's source reaches A before
        // this TaskManager hears of checkpoint 4; then A finishes.
        take_and_upload(&mut l, 4, A, "a-4");
        assert!(l.finished(A, None, Some(txn("a-end"))).is_empty());
        assert_eq!(l.trigger(4), vec![Command::InjectBarrier { checkpoint: 4 }]);
        assert_eq!(commits(&l.complete(4)), vec![txn("a-3"), txn("a-4")]);
    }

    #[test]
    fn job_finished_commits_what_was_pre_committed_at_end_of_input() {
        let mut l = AckLedger::default();
        l.trigger(1);
        take_and_upload(&mut l, 1, A, "a-1");
        l.finished(A, None, Some(txn("a-end")));
        // No checkpoint completed after A finished: its final output is
        // committed when the job finishes, after the pending one.
        assert_eq!(commits(&l.job_finished()), vec![txn("a-1"), txn("a-end")]);
    }

    #[test]
    fn uploads_running_when_the_job_finishes_are_still_acked_before_it_is_quiet() {
        let mut l = AckLedger::default();
        l.trigger(1);
        l.trigger(2);
        take_and_upload(&mut l, 1, A, "a-1");
        l.taken(2, A, [V], Some(txn("a-2")));
        l.taken(2, B, [V], None);
        assert!(!l.quiet(), "two uploads run");
        assert_eq!(commits(&l.job_finished()), vec![txn("a-1"), txn("a-2")]);
        // Ending twice commits nothing again.
        assert!(l.job_finished().is_empty());
        assert!(!l.quiet());
        // The JobManager learns of the upload (and deletes its files if no
        // checkpoint completes with it).
        assert_eq!(
            acks(&l.uploaded(2, A, part(Some(2), Some("a-2")), ALIGN)),
            vec![(2, A, false)]
        );
        assert!(!l.quiet());
        // A failed upload of an ended attempt is not declined.
        assert!(l.upload_failed(2, B, "gone".to_owned()).is_empty());
        assert!(l.quiet());
    }

    #[test]
    fn a_stopped_attempt_commits_nothing_but_acks_the_uploads_still_running() {
        let mut l = AckLedger::default();
        l.trigger(1);
        l.taken(1, A, [V], Some(txn("a-1")));
        l.stop();
        assert!(!l.quiet());
        let commands = l.uploaded(1, A, part(Some(1), Some("a-1")), ALIGN);
        assert_eq!(acks(&commands), vec![(1, A, false)]);
        assert!(commits(&commands).is_empty());
        assert!(l.quiet());
        // Nothing pending is committed after a stop, even by a late finish.
        assert!(commits(&l.job_finished()).is_empty());
    }
}
