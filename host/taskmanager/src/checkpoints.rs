//! The checkpoint shell of one deployment: [`JobCheckpoints`] feeds the
//! pure [`AckLedger`] the snapshots the local subtasks take, the outcomes
//! of their uploads and the JobManager's checkpoint events ([`JobEvent`]),
//! and carries out the ledger's [`Command`]s in the order returned: inject
//! barriers, send Acks and Declines, commit sinks.
//!
//! Uploads run on the blocking pool (`upload_snapshot`: state
//! incrementally from the ledger's base, then timers) and report back on a
//! channel; when the attempt ends the shell waits for those still running
//! and acks them, so the JobManager can delete what nobody references.
//!
//! All decisions are the ledger's: this module must not decide what to
//! ack, decline or commit, only move bytes and messages.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use weir_runtime::checkpoint::CheckpointError;
use weir_runtime::checkpoint::acks::{AckLedger, Command};
use weir_runtime::checkpoint::layout;
use weir_runtime::checkpoint::snapshot::{StateHandle, sha256_hex};
use weir_runtime::checkpoint::storage::CheckpointStorage;
use weir_runtime::rpc::{SubtaskCheckpoint, ToJobManager};
use weir_runtime::taskmanager::{FINISHED, TakenSnapshot};

use crate::node::Inner;

/// Events of one deployment's checkpoints, in order.
#[derive(Debug)]
pub(crate) enum JobEvent {
    /// The JobManager triggered this checkpoint.
    Trigger(u64),
    /// The JobManager completed this checkpoint.
    Complete(u64),
    /// The JobManager abandoned this checkpoint.
    Aborted(u64),
    /// Every subtask of the job finished: commit everything pending.
    JobFinished,
    /// The attempt ended without finishing: drop everything.
    Stop,
}

/// The outcome of one background upload: (checkpoint, subtask, the part to
/// acknowledge, alignment), or why it failed.
type Uploaded = Result<(u64, (u32, u32), SubtaskCheckpoint, Duration), (u64, (u32, u32), String)>;

/// The shell of one deployment's checkpoint bookkeeping: feeds its
/// [`AckLedger`] the snapshots local subtasks take, the outcomes of their
/// uploads and the JobManager's checkpoint events, and carries out the
/// ledger's commands (uploads run on the blocking pool).
pub(crate) struct JobCheckpoints {
    pub(crate) inner: Arc<Inner>,
    pub(crate) job: String,
    pub(crate) attempt: u32,
    /// Where this job's checkpoints are uploaded.
    pub(crate) storage: Arc<dyn CheckpointStorage>,
    /// The state backend's kind (how its snapshot files are shared).
    pub(crate) backend: weir_runtime::state::BackendKind,
    /// Each local source subtask's barrier trigger: the newest checkpoint
    /// it is to inject.
    pub(crate) triggers: HashMap<(usize, u32), Arc<std::sync::atomic::AtomicU64>>,
    /// Restored: finished subtasks' last parts (the ledger starts from them).
    pub(crate) finished: HashMap<(u32, u32), SubtaskCheckpoint>,
    /// Restored: the state handles (the ledger starts from them).
    pub(crate) previous: HashMap<(usize, u32), StateHandle>,
}

impl JobCheckpoints {
    /// Runs the shell until the attempt ends: the JobManager says the job
    /// finished (everything pending is committed, then `Committed` is
    /// sent) or it stops (`events` says so or closes).
    pub(crate) async fn run(
        mut self,
        mut taken: mpsc::UnboundedReceiver<TakenSnapshot>,
        mut events: mpsc::UnboundedReceiver<JobEvent>,
    ) {
        let mut ledger = AckLedger::new(
            std::mem::take(&mut self.finished),
            std::mem::take(&mut self.previous),
        );
        let (uploaded_tx, mut uploaded_rx) = mpsc::unbounded_channel();
        loop {
            // In this order, not at random: a subtask hands in its last
            // snapshot (`FINISHED`, with its sink's final output) before it
            // reports finished, and the JobManager says `JobFinished` only
            // after every subtask did; with both ready, taking the event
            // first would commit without that output and leave it pending
            // forever. Snapshots, then uploads, then events keeps causes
            // before their effects.
            let commands = tokio::select! {
                biased;
                Some(mut snapshot) = taken.recv() => {
                    let subtask = (snapshot.task, snapshot.subtask);
                    if let Some(c) = snapshot.source_commit.take() {
                        ledger.source_taken(snapshot.checkpoint, c);
                    }
                    if snapshot.checkpoint == FINISHED {
                        ledger.finished(subtask, snapshot.source, snapshot.sink)
                    } else {
                        let base = ledger.taken(
                            snapshot.checkpoint,
                            subtask,
                            snapshot.states.iter().map(|(v, _)| *v),
                            snapshot.sink.clone(),
                        );
                        self.upload(snapshot, base, &uploaded_tx);
                        Vec::new()
                    }
                }
                Some(done) = uploaded_rx.recv() => match done {
                    Ok((id, subtask, part, alignment)) => ledger.uploaded(id, subtask, part, alignment),
                    Err((id, subtask, reason)) => ledger.upload_failed(id, subtask, reason),
                },
                event = events.recv() => match event {
                    Some(JobEvent::Trigger(id)) => ledger.trigger(id),
                    Some(JobEvent::Complete(id)) => ledger.complete(id),
                    Some(JobEvent::Aborted(id)) => {
                        ledger.aborted(id);
                        Vec::new()
                    }
                    Some(JobEvent::JobFinished) => {
                        let error = self.carry_out(ledger.job_finished());
                        self.drain(&mut ledger, uploaded_tx, uploaded_rx).await;
                        self.inner.send(ToJobManager::Committed {
                            job: self.job.clone(),
                            attempt: self.attempt,
                            error,
                        });
                        return;
                    }
                    Some(JobEvent::Stop) | None => {
                        ledger.stop();
                        self.drain(&mut ledger, uploaded_tx, uploaded_rx).await;
                        return;
                    }
                },
            };
            self.carry_out(commands);
        }
    }

    /// After the attempt ended: waits for the uploads still running and
    /// acks each, so the JobManager deletes what nobody will reference.
    async fn drain(
        &self,
        ledger: &mut AckLedger,
        uploaded_tx: mpsc::UnboundedSender<Uploaded>,
        mut uploaded_rx: mpsc::UnboundedReceiver<Uploaded>,
    ) {
        // Only the uploads hold senders now: should one die without
        // reporting, `recv` ends instead of waiting forever.
        drop(uploaded_tx);
        while !ledger.quiet() {
            let commands = match uploaded_rx.recv().await {
                Some(Ok((id, subtask, part, alignment))) => {
                    ledger.uploaded(id, subtask, part, alignment)
                }
                Some(Err((id, subtask, reason))) => ledger.upload_failed(id, subtask, reason),
                None => return,
            };
            self.carry_out(commands);
        }
    }

    /// Carries out the ledger's commands, in order; returns why a commit
    /// failed, if one did.
    fn carry_out(&self, commands: Vec<Command>) -> Option<String> {
        let mut failed = None;
        for command in commands {
            match command {
                Command::InjectBarrier { checkpoint } => {
                    for trigger in self.triggers.values() {
                        trigger.fetch_max(checkpoint, Ordering::AcqRel);
                    }
                }
                Command::Ack {
                    checkpoint,
                    subtask: (task, subtask),
                    part,
                    alignment,
                } => self.inner.send(ToJobManager::Ack {
                    job: self.job.clone(),
                    attempt: self.attempt,
                    checkpoint,
                    task,
                    subtask,
                    snapshot: part,
                    alignment_ms: alignment.as_millis() as u64,
                }),
                Command::Decline {
                    checkpoint,
                    subtask: (task, subtask),
                    reason,
                } => self.inner.send(ToJobManager::Decline {
                    job: self.job.clone(),
                    attempt: self.attempt,
                    checkpoint,
                    task,
                    subtask,
                    reason,
                }),
                Command::Commit(committable) => {
                    let commit = || {
                        weir_runtime::connectors::commit(
                            &committable,
                            self.inner.cluster.allowed_roots(),
                        )
                    };
                    // A commit waits on the network (a broker's acks, for
                    // up to its request timeout): off this async worker,
                    // so the heartbeats and the session's other tasks run
                    // meanwhile (they stopped for as long as a broker was
                    // gone, and the JobManager declared this process lost).
                    let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|h| {
                        h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                    });
                    let committed = if multi_thread {
                        tokio::task::block_in_place(commit)
                    } else {
                        commit()
                    };
                    if let Err(e) = committed {
                        // The data stays pending; a restore commits it again.
                        tracing::error!(job = %self.job, "sink commit failed: {e}");
                        failed.get_or_insert_with(|| format!("sink commit failed: {e}"));
                    }
                }
            }
        }
        failed
    }

    /// Uploads `snapshot` on the blocking pool, each vertex's state
    /// incrementally from `base`, then deletes the local snapshot and
    /// reports the outcome on `uploaded`.
    fn upload(
        &self,
        snapshot: TakenSnapshot,
        base: HashMap<usize, StateHandle>,
        uploaded: &mpsc::UnboundedSender<Uploaded>,
    ) {
        let storage = self.storage.clone();
        let job = self.job.clone();
        let backend = self.backend;
        let uploaded = uploaded.clone();
        tokio::task::spawn_blocking(move || {
            let id = snapshot.checkpoint;
            let subtask = (snapshot.task, snapshot.subtask);
            let result = upload_snapshot(&snapshot, storage.as_ref(), &job, backend, &base);
            let message = match result {
                Ok(part) => Ok((id, subtask, part, snapshot.alignment)),
                Err(e) => Err((id, subtask, e.to_string())),
            };
            // The local snapshot (hard links) is no longer needed.
            if let Some(dir) = snapshot.states.first().and_then(|(_, d)| d.parent()) {
                let _ = std::fs::remove_dir_all(dir);
            }
            let _ = uploaded.send(message);
        });
    }
}

/// Why a subtask's snapshot was not uploaded (the ledger declines it with
/// this message).
#[derive(Debug, thiserror::Error)]
enum UploadError {
    /// A storage path or a state upload failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The timers could not be written as JSON.
    #[error(transparent)]
    Timers(serde_json::Error),
}

/// Uploads one subtask's synchronous snapshot: state, timers.
fn upload_snapshot(
    snapshot: &TakenSnapshot,
    storage: &dyn CheckpointStorage,
    job: &str,
    backend: weir_runtime::state::BackendKind,
    previous: &HashMap<usize, StateHandle>,
) -> Result<SubtaskCheckpoint, UploadError> {
    let (t, s, id) = (snapshot.task, snapshot.subtask, snapshot.checkpoint);
    let private = layout::subtask_dir(job, id, t, s)?;
    let shared = layout::shared_dir(job)?;
    let mut states = Vec::new();
    for (vertex, dir) in &snapshot.states {
        let handle = weir_runtime::checkpoint::snapshot::upload(
            dir,
            storage,
            &private.join(&vertex.to_string())?,
            &shared,
            previous.get(vertex),
            backend,
        )?;
        states.push((*vertex, handle));
    }
    let (timers, timers_sha256) = if snapshot.timers.is_empty() {
        (None, None)
    } else {
        let path = private.join("timers.json")?;
        let bytes = serde_json::to_vec(&snapshot.timers).map_err(UploadError::Timers)?;
        storage.put_bytes(&path, &bytes)?;
        (Some(path), Some(sha256_hex(&bytes)))
    };
    Ok(SubtaskCheckpoint {
        finished: false,
        states,
        timers,
        timers_sha256,
        source: snapshot.source.clone(),
        sink: snapshot.sink.clone(),
    })
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicU64;

    use tokio::sync::watch;
    use weir_runtime::checkpoint::DirStorage;
    use weir_runtime::connectors::AllowedRoots;
    use weir_runtime::local::LocalCluster;
    use weir_runtime::modules::ModuleStore;
    use weir_runtime::wasm::{Runtime, RuntimeConfig};

    use super::*;

    /// A subtask hands in its last snapshot (its sink's final part) before
    /// it reports finished, so when the shell runs late, `JobFinished` may
    /// wait beside it. The shell must take the snapshot first, or the part
    /// is never committed. Both are ready before the shell starts, twenty
    /// times: taken at random, half of them would lose the part.
    #[test]
    fn a_last_snapshot_waiting_beside_job_finished_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None }).unwrap());
        let (outbox, mut sent) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            id: "tm".into(),
            slots: 1,
            buffer_size: 64,
            data_address: SocketAddr::from(([0, 0, 0, 0], 0)),
            data: None,
            cluster: LocalCluster::new(runtime, rt.handle().clone())
                .with_allowed_roots(AllowedRoots::new([dir.path()]).unwrap()),
            store: ModuleStore::open(&dir.path().join("modules")).unwrap(),
            jobs: Default::default(),
            canceled: Default::default(),
            deploying: Default::default(),
            events: Default::default(),
            outbox: std::sync::Mutex::new(Some(outbox)),
            ended: watch::Sender::new(0),
            work_dir: dir.path().join("work"),
        });
        for round in 0..20 {
            let part = dir.path().join(format!("out.0-{round}"));
            std::fs::write(part.with_extension(format!("0-{round}.pending")), b"x").unwrap();
            let (taken_tx, taken_rx) = mpsc::unbounded_channel();
            let (events_tx, events_rx) = mpsc::unbounded_channel();
            taken_tx
                .send(TakenSnapshot {
                    checkpoint: FINISHED,
                    task: 0,
                    subtask: 0,
                    states: Vec::new(),
                    timers: Vec::new(),
                    source: None,
                    source_commit: None,
                    sink: Some(serde_json::json!({ "parts": [part], "next": round + 1 })),
                    alignment: Duration::ZERO,
                })
                .unwrap();
            events_tx.send(JobEvent::JobFinished).unwrap();
            let shell = JobCheckpoints {
                inner: inner.clone(),
                job: "job".into(),
                attempt: 0,
                storage: Arc::new(DirStorage::new(dir.path().join("checkpoints"))),
                backend: weir_runtime::state::BackendKind::Heap,
                triggers: HashMap::from([((0, 0), Arc::new(AtomicU64::new(0)))]),
                finished: HashMap::new(),
                previous: HashMap::new(),
            };
            rt.block_on(shell.run(taken_rx, events_rx));
            assert!(
                part.exists(),
                "round {round}: the last part was not committed"
            );
            match sent.try_recv() {
                Ok(ToJobManager::Committed { error: None, .. }) => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
    }
}
