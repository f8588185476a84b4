//! The JobManager core with an in-process TaskManager and a checkpoint
//! storage double: what the API and other jobs must not wait for (a
//! storage write, a busy job).
//!
//! The jobs here have a generator source and a blackhole sink, no Wasm
//! operator, so no artifacts are needed.

use std::path::Path;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::modules::ModuleStore;
use super::scheduler::Strategy;
use super::{CoreConfig, JobManager, JobState};
use weir_runtime::checkpoint::coordinator::CheckpointStatus;
use weir_runtime::checkpoint::{CheckpointError, CheckpointStorage, DirStorage, StoragePath};
use weir_runtime::connectors::AllowedRoots;
use weir_runtime::job::{JobGraph, JobSpec};
use weir_runtime::rpc::TaskState;
use weir_runtime::wasm::{Runtime, RuntimeConfig};
use weir_taskmanager::{InProcessConfig, InProcessTaskManager};

/// Bound on every wait: a failure bound, never a speed assertion (a loaded
/// 2-core machine builds and tests at once).
const PATIENCE: Duration = Duration::from_secs(120);

/// A [`DirStorage`] whose writes block while its gate is closed, each
/// announcing itself first; everything else goes straight through.
#[derive(Debug)]
struct GatedStorage {
    inner: DirStorage,
    open: Mutex<bool>,
    opened: Condvar,
    /// Receives the path of every write that found the gate closed.
    blocked: Mutex<std_mpsc::Sender<StoragePath>>,
}

impl GatedStorage {
    fn closed(root: &Path) -> (Arc<Self>, std_mpsc::Receiver<StoragePath>) {
        let (tx, rx) = std_mpsc::channel();
        let storage = GatedStorage {
            inner: DirStorage::new(root.to_path_buf()),
            open: Mutex::new(false),
            opened: Condvar::new(),
            blocked: Mutex::new(tx),
        };
        (Arc::new(storage), rx)
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.opened.notify_all();
    }

    fn wait_open(&self, path: &StoragePath) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if !*open {
            let _ = self
                .blocked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .send(path.clone());
        }
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl CheckpointStorage for GatedStorage {
    fn put_file(&self, path: &StoragePath, local: &Path) -> Result<u64, CheckpointError> {
        self.wait_open(path);
        self.inner.put_file(path, local)
    }
    fn put_reader(
        &self,
        path: &StoragePath,
        src: &mut dyn std::io::Read,
    ) -> Result<u64, CheckpointError> {
        self.wait_open(path);
        self.inner.put_reader(path, src)
    }
    fn put_bytes(&self, path: &StoragePath, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.wait_open(path);
        self.inner.put_bytes(path, bytes)
    }
    fn get_to_file(&self, path: &StoragePath, local: &Path) -> Result<(), CheckpointError> {
        self.inner.get_to_file(path, local)
    }
    fn get_bytes(&self, path: &StoragePath) -> Result<Vec<u8>, CheckpointError> {
        self.inner.get_bytes(path)
    }
    fn delete(&self, path: &StoragePath) -> Result<(), CheckpointError> {
        self.inner.delete(path)
    }
    fn delete_prefix(&self, prefix: &StoragePath) -> Result<(), CheckpointError> {
        self.inner.delete_prefix(prefix)
    }
    fn list(&self, prefix: &StoragePath) -> Result<Vec<StoragePath>, CheckpointError> {
        self.inner.list(prefix)
    }
}

/// A JobManager core and an in-process TaskManager with 4 slots on a
/// runtime of their own, checkpointing through a closed [`GatedStorage`].
/// Dropped, it opens the gate and stops everything (a failing test does
/// not hang on what it stalled).
struct Cluster {
    rt: Option<tokio::runtime::Runtime>,
    jm: Arc<JobManager>,
    tm: Option<InProcessTaskManager>,
    clock: tokio::task::JoinHandle<()>,
    storage: Arc<GatedStorage>,
    /// Where the writes that found the gate closed are announced.
    blocked: std_mpsc::Receiver<StoragePath>,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let entered = rt.enter();
        let (storage, blocked) = GatedStorage::closed(&dir.join("checkpoints"));
        let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None }).unwrap());
        let data_dir = dir.join("jobmanager");
        let store = ModuleStore::open(&data_dir.join("modules")).unwrap();
        let jm = JobManager::new(
            CoreConfig {
                data_dir: data_dir.clone(),
                heartbeat_interval: super::DEFAULT_HEARTBEAT_INTERVAL,
                heartbeat_timeout: super::DEFAULT_HEARTBEAT_TIMEOUT,
                scheduling: Strategy::Pack,
                max_module_bytes: usize::MAX,
                checkpoint_dir: Some(dir.join("checkpoints")),
                checkpoint_storage: Some(storage.clone()),
                clock: super::Clock::Real,
                storage_io: super::StorageIo::Background,
                max_job_state_bytes: None,
                allowed_roots: AllowedRoots::new([dir]).unwrap(),
            },
            runtime.clone(),
            store,
        );
        let clock = jm.clone().spawn_clock();
        let tm = InProcessTaskManager::start(
            InProcessConfig {
                id: "tm".into(),
                slots: 4,
                data_dir: dir.join("taskmanager"),
                modules_dir: data_dir.join("modules"),
                allowed_roots: AllowedRoots::none(),
                buffer_size: 64,
            },
            runtime,
            jm.attach("tm", 4),
        )
        .unwrap();
        drop(entered);
        Cluster {
            rt: Some(rt),
            jm,
            tm: Some(tm),
            clock,
            storage,
            blocked,
        }
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("running")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.storage.open();
        let Some(rt) = self.rt.take() else { return };
        if let Some(tm) = self.tm.take() {
            let _entered = rt.enter();
            tm.shutdown();
        }
        self.clock.abort();
        rt.shutdown_timeout(PATIENCE);
    }
}

fn graph(text: &str) -> JobGraph {
    JobGraph::from_spec(JobSpec::parse(text, "/specs/job.toml", &[]).unwrap()).unwrap()
}

/// Checkpoints every 50 ms until its sources are stopped.
const CHECKPOINTED: &str = r#"
[job]
name = "checkpointed"

[job.checkpoints]
interval_ms = 50

[[source]]
id = "seq"
type = "generator"
kind = "sequence"
rate = 2000

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "seq"
to = "out"
"#;

/// No checkpoints: touches no checkpoint storage.
const PLAIN: &str = r#"
[job]
name = "plain"

[[source]]
id = "seq"
type = "generator"
kind = "sequence"
count = 1000

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "seq"
to = "out"
"#;

/// Runs `f` on a thread of its own and returns its result, or fails the
/// test if it has not returned within [`PATIENCE`] (a thread stuck on the
/// job's lock stays stuck until the gate opens or the job is let go: the test
/// must not hang with it).
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(PATIENCE).unwrap_or_else(|_| {
        panic!(
            "{what} did not return within {PATIENCE:?}: it waits for the blocked storage \
             write or the busy job"
        )
    })
}

#[test]
fn a_blocked_checkpoint_write_stalls_neither_the_api_nor_other_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path());
    let root = dir.path().join("checkpoints");
    let jm = cluster.jm.clone();

    let (checkpointed, _modules) = cluster
        .rt()
        .block_on(jm.submit_graph(graph(CHECKPOINTED), None))
        .unwrap();
    let id = checkpointed.id;
    let path = cluster
        .blocked
        .recv_timeout(PATIENCE)
        .expect("the JobManager writes a checkpoint's metadata");
    assert_eq!(path.file_name(), "_metadata", "{path}");

    // The write is blocked in storage now. The REST API's calls return ...
    let (jobs, detail, view) = returns("JobManager::jobs, job and checkpoints", {
        let (jm, id) = (jm.clone(), id.clone());
        move || (jm.jobs(), jm.job(&id), jm.checkpoints(&id))
    });
    assert!(jobs.iter().any(|j| j.id == id), "{jobs:?}");
    assert_eq!(detail.unwrap().summary.state, JobState::Running);
    // ... and show the checkpoint done by its subtasks, but not as the
    // latest one: its metadata is not in storage yet.
    let view = view.unwrap();
    assert!(
        view.history
            .iter()
            .any(|c| c.status == CheckpointStatus::Completed),
        "{view:?}"
    );
    assert_eq!(view.latest, None, "{view:?}");

    // ... and a job without checkpoints is deployed and runs to the end.
    let plain = returns("a job without checkpoints", {
        let jm = jm.clone();
        let handle = cluster.rt().handle().clone();
        move || {
            handle.block_on(async {
                let (created, _modules) = jm.submit_graph(graph(PLAIN), None).await?;
                jm.wait_until_ended(&created.id).await
            })
        }
    })
    .unwrap();
    assert_eq!(plain.summary.state, JobState::Finished, "{plain:?}");
    let still = returns("JobManager::job", {
        let (jm, id) = (jm.clone(), id.clone());
        move || jm.job(&id)
    });
    assert_eq!(still.unwrap().summary.state, JobState::Running);

    // Released: the metadata lands, and a checkpoint is the latest.
    cluster.storage.open();
    cluster.tm.as_ref().unwrap().stop_sources(&id);
    let ended = cluster
        .rt()
        .block_on(async { tokio::time::timeout(PATIENCE, jm.wait_until_ended(&id)).await })
        .expect("the checkpointed job ends once its sources stop")
        .unwrap();
    assert_eq!(ended.summary.state, JobState::Finished, "{ended:?}");
    let view = jm.checkpoints(&id).unwrap();
    let latest = view
        .latest
        .expect("a latest checkpoint once its metadata is stored");
    let metadata = std::fs::read(root.join(&id).join(format!("chk-{latest}/_metadata")))
        .expect("the latest checkpoint's metadata");
    let metadata: serde_json::Value = serde_json::from_slice(&metadata).unwrap();
    assert_eq!(metadata["checkpoint"], latest, "{metadata}");
    // Retention 2: the older checkpoints' directories were deleted after
    // the writes that subsumed them.
    let chk_dirs = std::fs::read_dir(root.join(&id))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("chk-"))
        .count();
    assert!(
        (1..=2).contains(&chk_dirs),
        "{chk_dirs} checkpoint directories"
    );
}

#[test]
fn a_busy_job_stalls_neither_the_api_nor_other_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path());
    cluster.storage.open();
    let jm = cluster.jm.clone();
    let (busy, _modules) = cluster
        .rt()
        .block_on(jm.submit_graph(graph(CHECKPOINTED), None))
        .unwrap();
    let cell = jm.job_cell(&busy.id).unwrap();
    // Its sources stop only once they run.
    wait_running(&cluster, &busy.id);

    // Job `busy` is held, as a long step of its own would hold it, and its
    // sources stop: whatever its TaskManager says about it from now on
    // waits in its queue.
    let held = jm.lock_job(&cell);
    cluster.tm.as_ref().unwrap().stop_sources(&busy.id);

    // Meanwhile another job on the same TaskManager (whose messages about
    // both jobs share one link) is deployed and runs to the end, and the
    // API answers about the cluster.
    let (plain, taskmanagers) = returns("a job beside a busy one", {
        let jm = jm.clone();
        let handle = cluster.rt().handle().clone();
        move || {
            handle.block_on(async {
                let (created, _modules) = jm.submit_graph(graph(PLAIN), None).await?;
                let detail = jm.wait_until_ended(&created.id).await?;
                Ok::<_, super::ApiError>((detail, jm.taskmanagers()))
            })
        }
    })
    .unwrap();
    assert_eq!(plain.summary.state, JobState::Finished, "{plain:?}");
    assert_eq!(taskmanagers.len(), 1, "{taskmanagers:?}");
    assert_eq!(held.state, JobState::Running);

    // Let go, the busy job takes what queued up, in order, and finishes:
    // nothing its TaskManager said was lost.
    drop(held);
    let ended = cluster
        .rt()
        .block_on(async { tokio::time::timeout(PATIENCE, jm.wait_until_ended(&busy.id)).await })
        .expect("the busy job ends once let go")
        .unwrap();
    assert_eq!(ended.summary.state, JobState::Finished, "{ended:?}");
    assert!(
        ended
            .vertices
            .iter()
            .all(|v| v.state == TaskState::Finished),
        "{ended:?}"
    );
}

/// Waits until job `id`'s every vertex runs.
fn wait_running(cluster: &Cluster, id: &str) {
    let jm = &cluster.jm;
    cluster.rt().block_on(async {
        let mut changes = jm.changes.subscribe();
        let running = async {
            while !jm
                .job(id)
                .unwrap()
                .vertices
                .iter()
                .all(|v| v.state == TaskState::Running)
            {
                changes.changed().await.unwrap();
            }
        };
        tokio::time::timeout(PATIENCE, running)
            .await
            .expect("the job's subtasks run")
    });
}

#[test]
fn a_stop_whose_savepoint_cannot_be_written_leaves_the_job_running() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path());
    cluster.storage.open();
    let jm = cluster.jm.clone();
    let (job, _modules) = cluster
        .rt()
        .block_on(jm.submit_graph(graph(CHECKPOINTED), None))
        .unwrap();
    wait_running(&cluster, &job.id);

    // Allowed and absent when asked for, but never a directory: its parent
    // is a file. The checkpoint completes; writing the savepoint fails.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"").unwrap();
    let view = jm
        .trigger_savepoint(&job.id, &blocker.join("savepoint"), true)
        .unwrap();
    let checkpoint = view.checkpoint.unwrap();
    let failed = cluster
        .rt()
        .block_on(async {
            tokio::time::timeout(PATIENCE, jm.wait_savepoint(&job.id, view.id)).await
        })
        .expect("the savepoint ends")
        .unwrap();
    assert_eq!(failed.status, super::SavepointStatus::Failed, "{failed:?}");
    assert!(
        failed
            .failure
            .as_deref()
            .unwrap()
            .contains("the job goes on"),
        "{failed:?}"
    );

    // The job was not stopped: it runs, takes checkpoints again, and ends
    // normally once its sources stop.
    assert_eq!(jm.job(&job.id).unwrap().summary.state, JobState::Running);
    cluster.rt().block_on(async {
        let mut changes = jm.changes.subscribe();
        let newer = async {
            while !jm
                .checkpoints(&job.id)
                .unwrap()
                .history
                .iter()
                .any(|c| c.id > checkpoint && c.status == CheckpointStatus::Completed)
            {
                changes.changed().await.unwrap();
            }
        };
        tokio::time::timeout(PATIENCE, newer)
            .await
            .expect("a checkpoint after the failed savepoint's")
    });
    cluster.tm.as_ref().unwrap().stop_sources(&job.id);
    let ended = cluster
        .rt()
        .block_on(async { tokio::time::timeout(PATIENCE, jm.wait_until_ended(&job.id)).await })
        .expect("the job ends once its sources stop")
        .unwrap();
    assert_eq!(ended.summary.state, JobState::Finished, "{ended:?}");
}

/// Jobs are checked (their modules loaded and instantiated) in turns, at
/// most `MAX_CONCURRENT_CHECKS` at once: with every turn taken, a
/// submission waits, and goes through once one is free.
#[test]
fn submissions_are_checked_in_turns() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path());
    cluster.storage.open();
    let jm = cluster.jm.clone();
    let taken = cluster
        .rt()
        .block_on(jm.checks.acquire_many(super::MAX_CONCURRENT_CHECKS as u32))
        .unwrap();
    let mut submit = cluster.rt().spawn({
        let jm = jm.clone();
        async move { jm.submit_graph(graph(PLAIN), None).await.map(|(c, _)| c) }
    });
    // Nothing can make it go through while every turn is taken: it is
    // still waiting however long this looks (a bound, not a timing).
    let waited = cluster
        .rt()
        .block_on(async { tokio::time::timeout(Duration::from_millis(300), &mut submit).await });
    assert!(waited.is_err(), "checked without a turn");
    assert!(jm.jobs().is_empty());
    drop(taken);
    let created = cluster.rt().block_on(submit).unwrap().unwrap();
    cluster
        .rt()
        .block_on(jm.wait_until_ended(&created.id))
        .unwrap();
}
