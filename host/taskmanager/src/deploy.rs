//! One deployment (one attempt of a job) on this TaskManager, from its
//! arrival to its end: [`run_job`] fetches the modules, downloads what the
//! local subtasks restore, deploys them on the [`LocalCluster`] with a
//! [`NetExchange`] (channels to subtasks elsewhere go over the
//! [`DataPlane`]), starts the deployment's checkpoint shell, reports each
//! subtask's state as it changes, and cleans up when they all ended.
//!
//! A cancel may arrive while the deployment is still being set up: the
//! attempt is then in `Inner::canceled` and is aborted as soon as its
//! subtasks exist.
//!
//! This module must not decide placement or restarts: it reports, the
//! JobManager decides.
//!
//! [`LocalCluster`]: weir_runtime::local::LocalCluster

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use weir_runtime::checkpoint::storage::{CheckpointStorage, DirStorage};
use weir_runtime::job::{JobGraph, TaskSpec};
use weir_runtime::local::{CheckpointSetup, DeployOptions, Exchange};
use weir_runtime::net::{ChannelOptions, DataPlane, Input, InputKey, Peer};
use weir_runtime::rpc::{Deployment, SlotRef, TaskState, ToJobManager};
use weir_runtime::taskmanager::{Abort, Message, TaskError};

use crate::checkpoints::{JobCheckpoints, JobEvent};
use crate::fetch::fetch_modules;
use crate::node::{DeploymentKey, Inner, LocalJob};
use crate::restore::{download_restore, savepoint_restore};
use crate::session::Upstream;

/// The exchange of one job on this TaskManager.
struct NetExchange<'a> {
    me: &'a str,
    /// The deployment's name on the data plane (`job#attempt`).
    job: &'a str,
    placement: &'a [Vec<SlotRef>],
    peers: &'a HashMap<String, SocketAddr>,
    /// The TaskManagers of the placement: the only ones whose data streams
    /// this job's inputs accept.
    senders: Arc<BTreeSet<String>>,
    data: Option<&'a DataPlane>,
    options: ChannelOptions,
}

impl Exchange for NetExchange<'_> {
    fn is_local(&self, task: usize, subtask: u32) -> bool {
        self.placement[task][subtask as usize].taskmanager == self.me
    }

    fn remote_sender(&self, task: usize, subtask: u32, abort: &Abort) -> mpsc::Sender<Message> {
        let tm = &self.placement[task][subtask as usize].taskmanager;
        let key = InputKey {
            job: self.job.to_owned(),
            task: task as u32,
            subtask,
        };
        match (self.peers.get(tm), self.data) {
            (Some(addr), Some(data)) => {
                let peer = Peer {
                    id: tm.clone(),
                    addr: *addr,
                };
                data.open_channel(peer, key, self.options, abort.clone())
            }
            _ => {
                // The JobManager always sends every peer, and places an
                // embedded job on its one TaskManager: a bug.
                tracing::error!("no way to reach TaskManager {tm}");
                abort.trigger();
                mpsc::channel(1).0
            }
        }
    }

    fn register_input(&self, task: usize, subtask: u32, channels: u32, tx: mpsc::Sender<Message>) {
        let Some(data) = self.data else {
            return;
        };
        data.register_input(
            InputKey {
                job: self.job.to_owned(),
                task: task as u32,
                subtask,
            },
            Input {
                tx,
                channels,
                senders: self.senders.clone(),
                max_record_bytes: self.options.max_record_bytes,
            },
        );
    }
}

/// Whether `tasks` is a chaining of `graph` ([`weir_runtime::job::check_tasks`])
/// and `placement` names a slot for every subtask of every task, and no
/// more.
fn check_deployment(
    graph: &JobGraph,
    tasks: &[TaskSpec],
    placement: &[Vec<SlotRef>],
) -> Result<(), String> {
    weir_runtime::job::check_tasks(graph, tasks)?;
    if placement.len() != tasks.len() {
        return Err(format!(
            "{} tasks, placement for {}",
            tasks.len(),
            placement.len()
        ));
    }
    match tasks
        .iter()
        .zip(placement)
        .position(|(t, p)| p.len() != t.parallelism as usize)
    {
        Some(t) => Err(format!(
            "task {t} has {} subtasks, placement for {}",
            tasks[t].parallelism,
            placement[t].len()
        )),
        None => Ok(()),
    }
}

/// Runs `deployment` here until every local subtask ended and its
/// checkpoint shell is done; `events_rx` is its queue of checkpoint events,
/// registered in `Inner::events` when the deployment arrived.
pub(crate) async fn run_job(
    inner: Arc<Inner>,
    upstream: Upstream,
    deployment: Deployment,
    events_rx: mpsc::UnboundedReceiver<JobEvent>,
) {
    let Deployment {
        job,
        mut graph,
        tasks,
        placement,
        peers,
        attempt,
        checkpoints,
        restore,
        savepoint,
    } = deployment;
    let key = DeploymentKey::new(&job, attempt);
    let _events_guard = EventsGuard(inner.clone(), key.clone());
    let local: Vec<(usize, u32)> = placement
        .iter()
        .enumerate()
        .flat_map(|(t, slots)| {
            slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.taskmanager == inner.id)
                .map(move |(s, _)| (t, s as u32))
        })
        .collect();
    let fail_all = |error: String| {
        for (t, s) in &local {
            inner.report(
                &job,
                attempt,
                *t,
                *s,
                TaskState::Failed,
                Some(error.clone()),
            );
        }
    };
    // The task list and the placement must fit the graph before anything
    // indexes into them.
    if let Err(why) = check_deployment(&graph, &tasks, &placement) {
        fail_all(format!("the deployment does not fit its graph: {why}"));
        return;
    }
    if let Err(e) = fetch_modules(&inner, &upstream, &mut graph).await {
        fail_all(e.to_string());
        return;
    }
    let job_dir = inner.work_dir.join(key.to_string());
    let storage: Option<Arc<dyn CheckpointStorage>> = checkpoints
        .as_ref()
        .map(|c| Arc::new(DirStorage::new(c.storage.clone())) as Arc<dyn CheckpointStorage>);
    // Download what the local subtasks restore.
    let restored = match (&restore, &storage) {
        (Some(point), Some(storage)) => {
            let checkpoint = point.checkpoint;
            let storage = storage.clone();
            let point = point.clone();
            let local = local.clone();
            let dir = job_dir.join("restore");
            let job_id = job.clone();
            let downloaded = tokio::task::spawn_blocking(move || {
                download_restore(&job_id, &point, &local, storage.as_ref(), &dir)
            })
            .await;
            match downloaded {
                Ok(Ok(r)) => Some(r),
                Ok(Err(e)) => {
                    inner.send(ToJobManager::RestoreFailed {
                        job: job.clone(),
                        attempt,
                        checkpoint,
                        reason: e.to_string(),
                    });
                    fail_all(format!("cannot restore checkpoint: {e}"));
                    return;
                }
                Err(e) => {
                    fail_all(format!("restore panicked: {e}"));
                    return;
                }
            }
        }
        _ => None,
    };
    let (taken_tx, taken_rx) = mpsc::unbounded_channel();
    let deployed = {
        let inner = inner.clone();
        let net_key = key.to_string();
        let graph = graph.clone();
        let tasks = tasks.clone();
        let job_dir = job_dir.clone();
        let restored = restored.clone();
        let local = local.clone();
        let with_checkpoints = storage.is_some();
        tokio::task::spawn_blocking(move || {
            let modules = inner.cluster.load_modules(&graph)?;
            let options = ChannelOptions {
                buffer_size: inner.buffer_size,
                buffer_timeout: Duration::from_millis(graph.settings.buffer_timeout_ms),
                max_record_bytes: graph.max_record_bytes(),
            };
            let exchange = NetExchange {
                me: &inner.id,
                job: &net_key,
                placement: &placement,
                peers: &peers,
                senders: Arc::new(
                    placement
                        .iter()
                        .flatten()
                        .map(|slot| slot.taskmanager.clone())
                        .collect(),
                ),
                data: inner.data.as_ref(),
                options,
            };
            // Or what they take from the savepoint the job started from
            // (prepared with the modules just loaded: their states).
            let from_savepoint = match (&restored, savepoint) {
                (None, Some(savepoint)) => Some(
                    savepoint_restore(
                        inner.cluster.runtime(),
                        &savepoint,
                        &graph,
                        &tasks,
                        &local,
                        &modules,
                        &job_dir.join("savepoint"),
                    )
                    .map_err(|e| {
                        weir_runtime::local::RunError::Plan(format!(
                            "cannot restore the savepoint: {e}"
                        ))
                    })?,
                ),
                _ => None,
            };
            let restore_map = restored
                .as_ref()
                .or(from_savepoint.as_ref())
                .map(|r| &r.subtasks);
            let deploy_options = DeployOptions {
                checkpoints: with_checkpoints.then(|| CheckpointSetup {
                    local_dir: job_dir.join("snapshots"),
                    taken: taken_tx,
                }),
                restore: restore_map,
                attempt,
            };
            inner.cluster.deploy(
                &graph,
                &tasks,
                &modules,
                job_dir.join("state"),
                &exchange,
                &deploy_options,
            )
        })
        .await
    };
    let deployed = match deployed {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            inner.unregister_job(&key);
            // Files that passed their hashes but that RocksDB refused: as a
            // failed download, the checkpoint cannot be restored, and the
            // JobManager falls back to an older one.
            if let (weir_runtime::local::RunError::Restore(reason), Some(point)) = (&e, &restore) {
                inner.send(ToJobManager::RestoreFailed {
                    job: job.clone(),
                    attempt,
                    checkpoint: point.checkpoint,
                    reason: reason.clone(),
                });
            }
            fail_all(e.to_string());
            return;
        }
        Err(e) => {
            inner.unregister_job(&key);
            fail_all(format!("deployment panicked: {e}"));
            return;
        }
    };
    let canceled = Arc::new(AtomicBool::new(false));
    let mut heads: HashMap<usize, u32> = HashMap::new();
    for s in &deployed.subtasks {
        *heads.entry(tasks[s.task].head()).or_default() += 1;
    }
    let events_tx = inner
        .events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned()
        .unwrap_or_else(|| mpsc::unbounded_channel().0);
    inner.jobs.lock().unwrap_or_else(|p| p.into_inner()).insert(
        key.clone(),
        LocalJob {
            job: job.clone(),
            abort: deployed.abort.clone(),
            canceled: canceled.clone(),
            stop: deployed.stop.clone(),
            drain: deployed.drain.clone(),
            attempt,
            metrics: deployed.metrics.clone(),
            started: deployed.started,
            heads: heads.into_iter().collect(),
            vertices: graph.vertices.len(),
            name: graph.name.clone(),
            vertex_ids: graph.vertices.iter().map(|v| v.id.0.clone()).collect(),
            events: events_tx,
        },
    );
    if inner
        .canceled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&key)
    {
        canceled.store(true, Ordering::Relaxed);
        deployed.abort.trigger();
    }
    // Checkpoint bookkeeping of this attempt, on its own task.
    let checkpointer = storage.map(|storage| {
        let ctx = JobCheckpoints {
            inner: inner.clone(),
            job: job.clone(),
            attempt,
            storage,
            backend: match graph.settings.state_backend {
                weir_runtime::job::StateBackendKind::RocksDb => {
                    weir_runtime::state::BackendKind::RocksDb
                }
                weir_runtime::job::StateBackendKind::Heap => weir_runtime::state::BackendKind::Heap,
            },
            triggers: deployed.triggers.clone(),
            finished: restored
                .as_ref()
                .map(|r| r.finished.clone())
                .unwrap_or_default(),
            previous: restored
                .as_ref()
                .map(|r| r.previous.clone())
                .unwrap_or_default(),
        };
        tokio::spawn(ctx.run(taken_rx, events_rx))
    });
    for s in &deployed.subtasks {
        inner.report(&job, attempt, s.task, s.subtask, TaskState::Running, None);
    }
    let mut waits = Vec::new();
    for s in deployed.subtasks {
        let inner = inner.clone();
        let job = job.clone();
        let canceled = canceled.clone();
        let abort = deployed.abort.clone();
        waits.push(tokio::spawn(async move {
            let result = match s.join.await {
                Ok(r) => r,
                Err(e) => Err(TaskError::Panicked(e.to_string())),
            };
            let (state, error) = match result {
                Ok(()) => (TaskState::Finished, None),
                Err(TaskError::Aborted) => {
                    let why = if canceled.load(Ordering::Relaxed) {
                        "canceled by the JobManager".to_owned()
                    } else if let Some(reason) = abort.reason() {
                        format!("aborted: {reason}")
                    } else {
                        "aborted: a network channel or another subtask of the job failed".to_owned()
                    };
                    (TaskState::Canceled, Some(why))
                }
                Err(e) => (TaskState::Failed, Some(e.to_string())),
            };
            // Metrics first, on the same ordered stream: when the
            // JobManager sees the last subtask end, it has the final counts.
            if let Some(report) = inner.job_report(&job) {
                inner.send(ToJobManager::Heartbeat {
                    net: inner.net_stats(),
                    jobs: vec![report],
                    memory: weir_runtime::telemetry::memory::ProcessMemory::current(),
                });
            }
            inner.report(&job, attempt, s.task, s.subtask, state, error);
        }));
    }
    for w in waits {
        let _ = w.await;
    }
    // Keep the checkpoint task until the JobManager says the job finished
    // (final commits) or cancels it; an ended attempt has nothing to do.
    let events = inner
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .map(|j| j.events.clone());
    if let (Some(checkpointer), Some(events)) = (checkpointer, events) {
        if canceled.load(Ordering::Relaxed) || deployed.abort.is_set() {
            let _ = events.send(JobEvent::Stop);
        }
        let _ = checkpointer.await;
    }
    inner
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    inner
        .canceled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    inner.unregister_job(&key);
    let _ = std::fs::remove_dir_all(&job_dir);
}

/// Forgets a deployment's event queue when its `run_job` ends, however it ends.
struct EventsGuard(Arc<Inner>, DeploymentKey);

impl Drop for EventsGuard {
    fn drop(&mut self) {
        self.0
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
        self.0.ended.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[cfg(test)]
mod tests {
    use weir_runtime::job::{JobGraph, JobSpec, chain};
    use weir_runtime::rpc::SlotRef;

    use super::check_deployment;

    /// `src` (parallelism 2) → `out` (parallelism 1): two tasks.
    fn graph() -> JobGraph {
        let text = "[job]\nname = \"t\"\n\
            [[source]]\nid = \"src\"\ntype = \"generator\"\nkind = \"sequence\"\nparallelism = 2\n\
            [[sink]]\nid = \"out\"\ntype = \"blackhole\"\n\
            [[edge]]\nfrom = \"src\"\nto = \"out\"\n";
        JobGraph::from_spec(JobSpec::parse(text, "/specs/job.toml", &[]).unwrap()).unwrap()
    }

    fn slots(n: usize) -> Vec<SlotRef> {
        (0..n)
            .map(|slot| SlotRef {
                taskmanager: "tm".into(),
                slot: slot as u32,
            })
            .collect()
    }

    #[test]
    fn a_deployment_is_checked_against_its_graph_before_use() {
        let graph = graph();
        let tasks = chain(&graph);
        assert_eq!(tasks.len(), 2);
        assert_eq!(
            check_deployment(&graph, &tasks, &[slots(2), slots(1)]),
            Ok(())
        );
        // A placement for fewer tasks, or fewer subtasks, than the list has.
        let short = check_deployment(&graph, &tasks, &[slots(2)]).unwrap_err();
        assert_eq!(short, "2 tasks, placement for 1");
        let narrow = check_deployment(&graph, &tasks, &[slots(1), slots(1)]).unwrap_err();
        assert_eq!(narrow, "task 0 has 2 subtasks, placement for 1");
        // A task list that leaves a vertex out (an older JobManager sends
        // none at all).
        let none = check_deployment(&graph, &[], &[]).unwrap_err();
        assert!(none.contains("vertex `src` is in no task"), "{none}");
    }
}
