//! The JobManager's checkpoint storage I/O, carried out off its locks.
//!
//! Owns [`StorageCommand`] (one write, delete or sweep, decided under the
//! lock with everything it needs), [`StorageQueue`] (a job's commands in
//! the order they were decided) and [`run`] (one command against a
//! [`CheckpointStorage`], on a blocking-pool thread).
//!
//! # How it is used
//! Under a job's lock the JobManager decides what to write and delete —
//! the coordinator's actions, the [`weir_runtime::checkpoint::SharedStateRegistry`]'s
//! answers about which files no retained checkpoint references — and
//! appends commands to the job's queue. When a queue goes from idle to
//! busy, a drain task is started for it; the drain task takes the queued
//! commands under the lock, releases it, runs them one after the other
//! with [`tokio::task::spawn_blocking`], then records their
//! [`Outcome`]s under the lock again, until the queue is empty.
//!
//! # Invariants
//! * One drain task per job at a time (the queue's `draining` flag, kept
//!   under the job's lock): a job's commands run in the order they were
//!   decided. So a checkpoint's metadata is written before the files of
//!   the checkpoints it subsumes are deleted, and a restart's sweep runs
//!   after everything decided before it. Jobs do not wait for each other.
//! * Nothing here decides what may be deleted: a command deletes what the
//!   registry said, under the lock, no retained checkpoint references.
//!   Deleting later than decided is safe: every path written to storage
//!   is new (checkpoint ids are never reused, shared file names carry a
//!   random token), so a delayed delete never meets a newer file.
//! * Errors are logged, never retried: a failed delete leaks a file (as
//!   before), a failed metadata write leaves the checkpoint without
//!   `_metadata` (it is then never reported as the latest, and a
//!   restarted JobManager cannot restore it).
//!
//! Must not touch the JobManager's state: [`run`] sees only a command and
//! the storage.

use std::collections::{BTreeSet, VecDeque};

use weir_runtime::checkpoint::{CheckpointStorage, StoragePath};

/// One storage step, decided under the job's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StorageCommand {
    /// Writes checkpoint `checkpoint`'s `_metadata` at `path`.
    WriteMetadata {
        /// The checkpoint.
        checkpoint: u64,
        /// `<job>/chk-<checkpoint>/_metadata`.
        path: StoragePath,
        /// Its contents (JSON).
        bytes: Vec<u8>,
        /// Its authentication tag and where it goes (`_metadata.hmac`),
        /// written first: a JobManager that recovers its jobs trusts only
        /// metadata whose tag its key confirms ([`crate::recovery`]).
        tag: Option<(StoragePath, String)>,
    },
    /// Deletes one file.
    Delete(StoragePath),
    /// Deletes a checkpoint's directory.
    DeletePrefix(StoragePath),
    /// Deletes every file under `prefix` (the job's shared folder) that is
    /// not in `keep` (what the retained checkpoints reference): uploads of
    /// a failed attempt that were never acked. Comes before the restart to
    /// `attempt`, which waits for it.
    Sweep {
        /// `<job>/shared`.
        prefix: StoragePath,
        /// Every shared file a retained checkpoint references.
        keep: BTreeSet<StoragePath>,
        /// The attempt it prepares.
        attempt: u32,
    },
}

/// What the JobManager records once a command has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Checkpoint `0`'s metadata is in storage.
    MetadataStored(u64),
    /// Checkpoint `0`'s metadata could not be written (logged).
    MetadataFailed(u64),
    /// The sweep before attempt `0` has run (whether or not it could list
    /// or delete everything: it is best effort, as every delete).
    Swept(u32),
    /// Nothing to record.
    Nothing,
}

/// A job's storage commands not yet taken by its drain task.
#[derive(Debug, Default)]
pub(super) struct StorageQueue {
    commands: VecDeque<StorageCommand>,
    /// Whether a drain task is running for this job.
    draining: bool,
}

impl StorageQueue {
    /// Appends `command`. Returns `true` when the caller must start a drain
    /// task (none is running); the queue counts as draining from then on.
    pub(super) fn push(&mut self, command: StorageCommand) -> bool {
        self.commands.push_back(command);
        !std::mem::replace(&mut self.draining, true)
    }

    /// The drain task takes everything queued, in order. With nothing
    /// queued it stops: the queue is idle until the next [`Self::push`].
    pub(super) fn take(&mut self) -> Option<Vec<StorageCommand>> {
        if self.commands.is_empty() {
            self.draining = false;
            None
        } else {
            Some(self.commands.drain(..).collect())
        }
    }

    /// Whether every command pushed has run.
    pub(super) fn is_idle(&self) -> bool {
        !self.draining && self.commands.is_empty()
    }
}

/// Runs one command of job `job` against `storage` (blocking I/O). A
/// panicking storage counts as a failed command: a sweep still counts as
/// run, so that the restart waiting for it goes on.
pub(super) fn run(job: &str, command: StorageCommand, storage: &dyn CheckpointStorage) -> Outcome {
    let failed = match &command {
        StorageCommand::Sweep { attempt, .. } => Outcome::Swept(*attempt),
        StorageCommand::WriteMetadata { checkpoint, .. } => Outcome::MetadataFailed(*checkpoint),
        _ => Outcome::Nothing,
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_unguarded(job, command, storage)
    }))
    .unwrap_or_else(|_| {
        tracing::error!(job, "checkpoint storage panicked");
        failed
    })
}

fn run_unguarded(job: &str, command: StorageCommand, storage: &dyn CheckpointStorage) -> Outcome {
    match command {
        StorageCommand::WriteMetadata {
            checkpoint,
            path,
            bytes,
            tag,
        } => {
            let written = match &tag {
                Some((at, tag)) => storage.put_bytes(at, tag.as_bytes()),
                None => Ok(()),
            }
            .and_then(|()| storage.put_bytes(&path, &bytes));
            match written {
                Ok(()) => Outcome::MetadataStored(checkpoint),
                Err(e) => {
                    tracing::error!(job, checkpoint, "cannot write checkpoint metadata: {e}");
                    Outcome::MetadataFailed(checkpoint)
                }
            }
        }
        StorageCommand::Delete(path) => {
            if let Err(e) = storage.delete(&path) {
                tracing::warn!(job, "cannot delete checkpoint file {path}: {e}");
            }
            Outcome::Nothing
        }
        StorageCommand::DeletePrefix(prefix) => {
            if let Err(e) = storage.delete_prefix(&prefix) {
                tracing::warn!(job, "cannot delete checkpoint directory {prefix}: {e}");
            }
            Outcome::Nothing
        }
        StorageCommand::Sweep {
            prefix,
            keep,
            attempt,
        } => {
            match storage.list(&prefix) {
                Ok(listed) => {
                    for file in listed.into_iter().filter(|f| !keep.contains(f)) {
                        tracing::debug!(job, file = %file, "deleting an unreferenced checkpoint file");
                        if let Err(e) = storage.delete(&file) {
                            tracing::warn!(job, "cannot delete checkpoint file {file}: {e}");
                        }
                    }
                }
                Err(e) => tracing::warn!(job, "cannot list {prefix} to sweep it: {e}"),
            }
            Outcome::Swept(attempt)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::checkpoint::DirStorage;

    fn p(s: &str) -> StoragePath {
        StoragePath::new(s).unwrap()
    }

    #[test]
    fn a_queue_starts_one_drain_and_is_idle_only_when_taken_empty() {
        let mut q = StorageQueue::default();
        assert!(q.is_idle());
        assert!(q.push(StorageCommand::Delete(p("j/a"))), "starts a drain");
        assert!(
            !q.push(StorageCommand::Delete(p("j/b"))),
            "one drain at a time"
        );
        assert!(!q.is_idle());
        assert_eq!(
            q.take().unwrap(),
            [
                StorageCommand::Delete(p("j/a")),
                StorageCommand::Delete(p("j/b"))
            ],
            "in order"
        );
        assert!(!q.is_idle(), "taken, not yet run");
        assert!(
            !q.push(StorageCommand::Delete(p("j/c"))),
            "the drain runs on"
        );
        assert_eq!(q.take().unwrap(), [StorageCommand::Delete(p("j/c"))]);
        assert!(q.take().is_none());
        assert!(q.is_idle());
        assert!(q.push(StorageCommand::Delete(p("j/d"))), "a new drain");
    }

    #[test]
    fn commands_write_delete_and_sweep() {
        let tmp = tempfile::tempdir().unwrap();
        let s = DirStorage::new(tmp.path().to_path_buf());
        for f in ["j/shared/kept.sst", "j/shared/never-acked.sst", "j/chk-1/x"] {
            s.put_bytes(&p(f), b"x").unwrap();
        }
        let write = StorageCommand::WriteMetadata {
            checkpoint: 2,
            path: p("j/chk-2/_metadata"),
            bytes: b"{}".to_vec(),
            tag: Some((p("j/chk-2/_metadata.hmac"), "ab".into())),
        };
        assert_eq!(run("j", write, &s), Outcome::MetadataStored(2));
        assert_eq!(s.get_bytes(&p("j/chk-2/_metadata")).unwrap(), b"{}");
        assert_eq!(s.get_bytes(&p("j/chk-2/_metadata.hmac")).unwrap(), b"ab");
        let sweep = StorageCommand::Sweep {
            prefix: p("j/shared"),
            keep: [p("j/shared/kept.sst")].into(),
            attempt: 3,
        };
        assert_eq!(run("j", sweep, &s), Outcome::Swept(3));
        assert_eq!(s.list(&p("j/shared")).unwrap(), [p("j/shared/kept.sst")]);
        run("j", StorageCommand::DeletePrefix(p("j/chk-1")), &s);
        run("j", StorageCommand::Delete(p("j/shared/kept.sst")), &s);
        assert_eq!(
            s.list(&p("j")).unwrap(),
            [p("j/chk-2/_metadata"), p("j/chk-2/_metadata.hmac")]
        );
    }
}
