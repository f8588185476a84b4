//! A job's checkpoints on the JobManager: the coordinator and registry it
//! holds ([`JobCheckpoints`]), the sweep before a restart, and carrying
//! out the coordinator's actions (trigger, complete, discard, abort) as
//! messages to TaskManagers and storage commands.

use super::*;
use weir_runtime::checkpoint::savepoint::SavedState;
use weir_runtime::checkpoint::snapshot::JobLayout;

/// Where the sweep before a restart stands: requested or done, for the
/// attempt it prepares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sweep {
    Requested(u32),
    Done(u32),
}

/// A job's checkpoint coordinator and the shared files its checkpoints use.
pub(crate) struct JobCheckpoints {
    pub(crate) coordinator: Coordinator<SubtaskCheckpoint>,
    pub(crate) registry: SharedStateRegistry,
    /// Retained checkpoints a TaskManager could not restore (a file missing
    /// or corrupt in storage, its `_metadata` missing or not matching):
    /// restarts pass over them to an older one.
    pub(crate) unrestorable: BTreeSet<u64>,
    /// Retained checkpoints whose metadata is in storage.
    pub(crate) stored: BTreeSet<u64>,
    /// Completed checkpoints the TaskManagers have not been told of yet:
    /// they are told once the metadata is in storage (`announce`), and no
    /// checkpoint is triggered meanwhile.
    pub(crate) unannounced: BTreeSet<u64>,
}

impl JobCheckpoints {
    /// The checkpoint a restart restores from: the newest retained one not
    /// known to be unrestorable; with the newer ones passed over, newest
    /// first.
    pub(crate) fn restore_point(
        &self,
    ) -> (Option<&CompletedCheckpoint<SubtaskCheckpoint>>, Vec<u64>) {
        let mut skipped = Vec::new();
        for c in self.coordinator.retained().rev() {
            if self.unrestorable.contains(&c.id) {
                skipped.push(c.id);
            } else {
                return (Some(c), skipped);
            }
        }
        (None, skipped)
    }
}

/// Carries out what the coordinator decided, under the job's lock:
/// TaskManagers are told at once, storage work is queued for the job's
/// drain task ([`storage_io`]) in the order the coordinator gave it.
///
/// A completed checkpoint is announced (`CheckpointComplete`, on which
/// sinks commit) only once its metadata is in storage ([`announce`]), as
/// Flink's coordinator does: a JobManager killed before that restarts the
/// job from the checkpoint before, and output committed for this one would
/// be produced again. Until it is announced the coordinator triggers no
/// other checkpoint (`tick_jobs`), so a subtask still learns of a
/// completion before the next trigger, which its next incremental
/// upload's base needs: built on an older base, it could name files the
/// completion discarded, the case the registry cannot see
/// ([`weir_runtime::checkpoint::registry`]). A savepoint's checkpoint is
/// announced at once: the job stops or drains at it, and its sinks must
/// commit before they are canceled.
pub(crate) fn checkpoint_actions(
    taskmanagers: &TaskManagers,
    job: &mut Job,
    jm: &JobManager,
    actions: Vec<Action<SubtaskCheckpoint>>,
) {
    use weir_runtime::checkpoint::layout::checkpoint_dir as chk_dir;
    for action in actions {
        match action {
            Action::Trigger { id, .. } => {
                tell(taskmanagers, job, |job, attempt| {
                    ToTaskManager::TriggerCheckpoint {
                        job,
                        attempt,
                        checkpoint: id,
                    }
                });
            }
            Action::Complete(done) => {
                let Some(c) = job.checkpoints.as_mut() else {
                    continue;
                };
                let handles = || {
                    done.acks
                        .values()
                        .flat_map(|a| a.states.iter().map(|(_, h)| h))
                };
                let full: u64 = handles().map(|h| h.full_size).sum();
                let incremental: u64 = handles().map(|h| h.incremental_size).sum();
                let over_quota = jm.max_job_state_bytes.filter(|max| full > *max);
                c.coordinator.set_sizes(done.id, full, incremental);
                c.registry
                    .register(done.id, handles().flat_map(|h| h.shared_paths().cloned()));
                let metadata = CheckpointMetadata {
                    job: job.id.clone(),
                    checkpoint: done.id,
                    triggered_at_ms: done.triggered_at_ms,
                    completed_at_ms: done.completed_at_ms,
                    subtasks: done.acks.iter().map(|(id, a)| (*id, a.clone())).collect(),
                    layout: Some(JobLayout {
                        graph: job.graph.clone(),
                        tasks: job.tasks.clone(),
                        states: job
                            .states
                            .iter()
                            .map(|(v, d)| (*v, d.iter().map(SavedState::of).collect()))
                            .collect(),
                    }),
                };
                let savepoint = job
                    .savepoints
                    .iter()
                    .any(|s| s.status == SavepointStatus::Pending && s.checkpoint == Some(done.id));
                let mut queued = false;
                if let (Ok(path), Ok(bytes)) = (
                    metadata_path(&job.id, done.id),
                    serde_json::to_vec(&metadata),
                ) {
                    let tag = jm.journal.get().and_then(|store| {
                        let at =
                            weir_runtime::checkpoint::layout::metadata_tag_path(&job.id, done.id);
                        at.ok().map(|at| (at, store.tag(&bytes)))
                    });
                    jm.enqueue(
                        job,
                        StorageCommand::WriteMetadata {
                            checkpoint: done.id,
                            path,
                            bytes,
                            tag,
                        },
                    );
                    queued = true;
                }
                tracing::info!(job = %job.id, checkpoint = done.id, full, incremental, "checkpoint completed");
                if queued && !savepoint {
                    if let Some(c) = job.checkpoints.as_mut() {
                        c.unannounced.insert(done.id);
                    }
                } else {
                    announce(taskmanagers, job, done.id);
                }
                let stale = upgrade_checkpointed(job);
                if !stale.is_empty() {
                    jm.handle.spawn_blocking(move || {
                        for dir in stale {
                            if let Err(e) = std::fs::remove_dir_all(&dir) {
                                tracing::warn!("cannot delete {}: {e}", dir.display());
                            }
                        }
                    });
                }
                savepoint_checkpoint_completed(job, jm, &done);
                if let Some(max) = over_quota {
                    // Committed all the same (it is consistent); the job
                    // stops here: a restart would grow past it again.
                    job.fatal = true;
                    let reason = format!(
                        "checkpoint {} holds {} bytes of state, over the cluster's limit of {} \
                         bytes per job (weir jobmanager --max-job-state-mb); not restarted",
                        done.id, full, max
                    );
                    tracing::warn!(job = %job.id, "{reason}");
                    fail(taskmanagers, job, Cause::new(reason), true, jm.clock.now());
                }
            }
            Action::Discard(old) => {
                let Some(c) = job.checkpoints.as_mut() else {
                    continue;
                };
                c.stored.remove(&old.id);
                // Decided here, under the lock: after the checkpoint that
                // subsumes it was registered, so these are files no
                // retained checkpoint references.
                let unused = c.registry.release(old.id);
                for file in unused {
                    jm.enqueue(job, StorageCommand::Delete(file));
                }
                if let Ok(dir) = chk_dir(&job.id, old.id) {
                    jm.enqueue(job, StorageCommand::DeletePrefix(dir));
                }
            }
            Action::Abort { id, reason, acked } => {
                tracing::info!(job = %job.id, checkpoint = id, "checkpoint aborted: {reason}");
                savepoint_checkpoint_aborted(taskmanagers, job, id, &reason);
                tell(taskmanagers, job, |job, attempt| {
                    ToTaskManager::CheckpointAborted {
                        job,
                        attempt,
                        checkpoint: id,
                    }
                });
                let uploaded: Vec<StoragePath> = acked
                    .iter()
                    .flat_map(|(_, a)| a.shared_paths().cloned())
                    .collect();
                discard_uploads(jm, job, id, &uploaded);
            }
        }
    }
}

/// Tells the job's TaskManagers that checkpoint `id` completed (its sinks
/// commit what they pre-committed up to it), once.
pub(crate) fn announce(taskmanagers: &TaskManagers, job: &mut Job, id: u64) {
    if let Some(c) = job.checkpoints.as_mut() {
        c.unannounced.remove(&id);
    }
    tell(taskmanagers, job, |job, attempt| {
        ToTaskManager::CheckpointComplete {
            job,
            attempt,
            checkpoint: id,
        }
    });
}

/// Queues the deletion of what was uploaded for a checkpoint that will
/// never complete: its private directory and the shared files no completed
/// checkpoint uses (decided now, under the lock).
pub(crate) fn discard_uploads(jm: &JobManager, job: &mut Job, id: u64, shared: &[StoragePath]) {
    discard_shared(jm, job, shared);
    let Some(c) = &job.checkpoints else {
        return;
    };
    // Never a completed checkpoint's own folder.
    let retained = c.coordinator.retained().any(|r| r.id == id);
    if !retained && let Ok(dir) = weir_runtime::checkpoint::layout::checkpoint_dir(&job.id, id) {
        jm.enqueue(job, StorageCommand::DeletePrefix(dir));
    }
}

/// Queues the deletion of the files of `shared` that are the job's own and
/// that no completed checkpoint uses (decided now, under the job's lock).
pub(crate) fn discard_shared(jm: &JobManager, job: &mut Job, shared: &[StoragePath]) {
    // Only the job's own shared files (acks naming others are refused
    // before they get here; this keeps it so).
    let own = weir_runtime::checkpoint::layout::shared_dir(&job.id);
    let shared: Vec<StoragePath> = shared
        .iter()
        .filter(|f| own.as_ref().is_ok_and(|own| f.starts_with(own)))
        .cloned()
        .collect();
    let Some(c) = &job.checkpoints else {
        return;
    };
    for file in c.registry.orphans(&shared) {
        jm.enqueue(job, StorageCommand::Delete(file));
    }
}
