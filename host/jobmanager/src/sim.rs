//! A simulation of the JobManager core with fake TaskManagers, quinn's
//! `Pair` style: one [`JobManager`] on a simulated [`Clock`], N
//! TaskManagers that answer through in-memory queues with random delays,
//! and a seeded schedule of failures — TaskManagers killed (connection
//! closed, or silent until the heartbeat timeout) and restarted, subtasks
//! failing, checkpoint notifications lost, acks arriving late or after an
//! abort or from an attempt already canceled or twice for one subtask,
//! checkpoint storage slow (the
//! JobManager's storage commands run steps after they were decided). No
//! processes, no sleeps, no Wasm: the job is a generator and a blackhole,
//! the fake TaskManagers "upload" their snapshots as files into the real
//! checkpoint storage, and the JobManager's storage commands run when a
//! step says ([`StorageIo::Stepped`]).
//!
//! Every seed checks:
//! - every checkpoint whose metadata exists was acked by every subtask, and
//!   every file it names exists, including while a restart restores it;
//! - TaskManagers hear that a checkpoint completed only once its metadata
//!   is in storage;
//! - once the job ends, the job's shared files are exactly those the
//!   retained checkpoints name (nothing leaked, nothing lost);
//! - the job is not stuck: once the faults stop, it finishes.
//!
//! A failing seed is reproduced by running [`run`] with it alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{
    Clock, CoreConfig, JobManager, JobState, StorageIo, modules::ModuleStore, scheduler::Strategy,
};
use weir_runtime::checkpoint::snapshot::{FileHandle, StateHandle};
use weir_runtime::checkpoint::storage::StoragePath;
use weir_runtime::connectors::AllowedRoots;
use weir_runtime::job::JobGraph;
use weir_runtime::rpc::{SubtaskCheckpoint, TaskState, ToJobManager, ToTaskManager};
use weir_runtime::state::BackendKind;
use weir_runtime::wasm::{Runtime, RuntimeConfig};

/// One step of simulated time.
const STEP: Duration = Duration::from_millis(10);
/// Steps with faults, then steps to finish in.
const FAULTY_STEPS: u32 = 400;
const HEALING_STEPS: u32 = 3_000;
const TASKMANAGERS: usize = 3;

/// SplitMix64: small, seedable, good enough to pick schedules.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `per_mille`/1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What a fake TaskManager runs of one deployment.
struct Deployed {
    job: String,
    attempt: u32,
    /// Its local subtasks and whether each still runs.
    subtasks: BTreeMap<(u32, u32), bool>,
}

struct FakeTm {
    id: String,
    session: u64,
    rx: Option<mpsc::UnboundedReceiver<ToTaskManager>>,
    /// Steps until it comes back, while dead.
    down_for: Option<u32>,
    deployed: Option<Deployed>,
}

/// A message on its way to the JobManager; an ack's files are uploaded
/// just before it is sent (a slow upload is a late ack).
struct InFlight {
    at: Instant,
    tm: usize,
    session: u64,
    message: ToJobManager,
    uploads: Vec<StoragePath>,
}

struct Sim {
    rng: Rng,
    jm: Arc<JobManager>,
    hand: Arc<Mutex<Instant>>,
    tms: Vec<FakeTm>,
    queue: Vec<InFlight>,
    storage_root: std::path::PathBuf,
    faults: bool,
    finishing: bool,
    job: String,
    uploads: u64,
    /// Steps checkpoint storage stays stalled.
    storage_stalled: u32,
    /// TaskManagers refuse every restore from a checkpoint (as RocksDB
    /// refusing its files): `RestoreFailed`, then their subtasks fail.
    refuse_restores: bool,
    /// Deployments without a restore point while `refuse_restores`.
    from_scratch: u32,
}

impl Sim {
    fn now(&self) -> Instant {
        *self.hand.lock().unwrap()
    }

    fn send(&mut self, tm: usize, delay_steps: u64, message: ToJobManager) {
        self.upload_and_send(tm, delay_steps, Vec::new(), message);
    }

    fn upload_and_send(
        &mut self,
        tm: usize,
        delay_steps: u64,
        uploads: Vec<StoragePath>,
        message: ToJobManager,
    ) {
        let at = self.now() + STEP * delay_steps as u32;
        let session = self.tms[tm].session;
        self.queue.push(InFlight {
            at,
            tm,
            session,
            message,
            uploads,
        });
    }

    /// Writes a file into checkpoint storage.
    fn upload(&mut self, path: &StoragePath) {
        let file = self.storage_root.join(path.as_str());
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, b"state").unwrap();
        self.uploads += 1;
    }

    fn step(&mut self) {
        *self.hand.lock().unwrap() += STEP;
        self.jm.tick();
        for t in 0..self.tms.len() {
            self.drive_taskmanager(t);
        }
        self.deliver_due();
        if self.faults {
            self.inject_fault();
        }
        if self.finishing {
            self.finish_sources();
        }
        // While faults happen, checkpoint storage is slow: what the
        // JobManager decided waits a step now and then, or stalls for up
        // to 80 steps (longer than a restart delay and a checkpoint
        // interval: a restart must wait for its sweep).
        if self.storage_stalled > 0 {
            self.storage_stalled -= 1;
        } else if self.faults && self.rng.chance(10) {
            self.storage_stalled = self.rng.below(80) as u32;
        } else if !self.faults || !self.rng.chance(300) {
            self.jm.run_storage();
        }
    }

    fn drive_taskmanager(&mut self, t: usize) {
        if let Some(down) = self.tms[t].down_for.as_mut() {
            if *down > 0 {
                *down -= 1;
                return;
            }
            // Back: registers again under the same id.
            let id = self.tms[t].id.clone();
            let (session, rx) = self.jm.register_in_process(&id, 2);
            let tm = &mut self.tms[t];
            tm.session = session;
            tm.rx = Some(rx);
            tm.down_for = None;
            tm.deployed = None;
        }
        // A heartbeat now and then (the timeout is 10 s of simulated time).
        if self.rng.chance(100) {
            self.send(
                t,
                0,
                ToJobManager::Heartbeat {
                    net: Default::default(),
                    jobs: Vec::new(),
                    memory: None,
                },
            );
        }
        let mut received = Vec::new();
        if let Some(rx) = self.tms[t].rx.as_mut() {
            while let Ok(m) = rx.try_recv() {
                received.push(m);
            }
        }
        for message in received {
            self.on_message(t, message);
        }
    }

    fn on_message(&mut self, t: usize, message: ToTaskManager) {
        match message {
            ToTaskManager::Deploy(d) => {
                if let Some(point) = &d.restore {
                    check_restorable(&self.storage_root, &d.job, point.checkpoint);
                } else if self.refuse_restores {
                    self.from_scratch += 1;
                }
                let me = self.tms[t].id.clone();
                let subtasks: BTreeMap<(u32, u32), bool> = d
                    .placement
                    .iter()
                    .enumerate()
                    .flat_map(|(task, slots)| {
                        slots
                            .iter()
                            .enumerate()
                            .filter(|(_, s)| s.taskmanager == me)
                            .map(move |(s, _)| ((task as u32, s as u32), true))
                    })
                    .collect();
                if let Some(point) = d.restore.as_ref().filter(|_| self.refuse_restores) {
                    // What the TaskManager's deployment does when RocksDB
                    // refuses the downloaded files.
                    self.send(
                        t,
                        0,
                        ToJobManager::RestoreFailed {
                            job: d.job.clone(),
                            attempt: d.attempt,
                            checkpoint: point.checkpoint,
                            reason: "RocksDB refused 000009.sst".into(),
                        },
                    );
                    for &(task, subtask) in subtasks.keys() {
                        self.send(
                            t,
                            0,
                            ToJobManager::TaskState {
                                job: d.job.clone(),
                                attempt: d.attempt,
                                task,
                                subtask,
                                state: TaskState::Failed,
                                error: Some("cannot restore its state".into()),
                            },
                        );
                    }
                    return;
                }
                for &(task, subtask) in subtasks.keys() {
                    let delay = self.rng.below(5);
                    self.send(
                        t,
                        delay,
                        ToJobManager::TaskState {
                            job: d.job.clone(),
                            attempt: d.attempt,
                            task,
                            subtask,
                            state: TaskState::Running,
                            error: None,
                        },
                    );
                }
                self.tms[t].deployed = Some(Deployed {
                    job: d.job,
                    attempt: d.attempt,
                    subtasks,
                });
            }
            ToTaskManager::TriggerCheckpoint {
                job,
                attempt,
                checkpoint,
            } => {
                let Some(d) = self.tms[t]
                    .deployed
                    .as_ref()
                    .filter(|d| d.attempt == attempt)
                else {
                    return;
                };
                let running: Vec<(u32, u32)> = d
                    .subtasks
                    .iter()
                    .filter(|(_, running)| **running)
                    .map(|(k, _)| *k)
                    .collect();
                for (task, subtask) in running {
                    if self.faults && self.rng.chance(20) {
                        let delay = self.rng.below(10);
                        self.send(
                            t,
                            delay,
                            ToJobManager::Decline {
                                job: job.clone(),
                                attempt,
                                checkpoint,
                                task,
                                subtask,
                                reason: "simulated".into(),
                            },
                        );
                        continue;
                    }
                    // Sometimes a second ack of the same subtask, with
                    // other files uploaded (a retry, or a TaskManager gone
                    // wrong): counted once, its files nobody's.
                    let copies = if self.faults && self.rng.chance(30) {
                        2
                    } else {
                        1
                    };
                    for _ in 0..copies {
                        self.uploads += 1;
                        let token = format!("{:016x}{:08x}", self.rng.next(), self.uploads);
                        let shared = StoragePath::new(format!("{job}/shared/{token}.sst")).unwrap();
                        let private =
                            StoragePath::new(format!("{job}/chk-{checkpoint}/{token}-MANIFEST"))
                                .unwrap();
                        let uploads = vec![shared.clone(), private.clone()];
                        let handle = StateHandle {
                            backend: BackendKind::RocksDb,
                            files: vec![
                                FileHandle {
                                    local_name: format!("{token}.sst"),
                                    path: shared,
                                    size: 5,
                                    shared: true,
                                    sha256: None,
                                },
                                FileHandle {
                                    local_name: "MANIFEST".into(),
                                    path: private,
                                    size: 5,
                                    shared: false,
                                    sha256: None,
                                },
                            ],
                            full_size: 10,
                            incremental_size: 10,
                        };
                        // Sometimes slower than the checkpoint timeout (2 s).
                        let delay = if self.faults && self.rng.chance(50) {
                            150 + self.rng.below(200)
                        } else {
                            self.rng.below(20)
                        };
                        self.upload_and_send(
                            t,
                            delay,
                            uploads,
                            ToJobManager::Ack {
                                job: job.clone(),
                                attempt,
                                checkpoint,
                                task,
                                subtask,
                                snapshot: SubtaskCheckpoint {
                                    states: vec![(1, handle)],
                                    ..SubtaskCheckpoint::default()
                                },
                                alignment_ms: 0,
                            },
                        );
                    }
                }
            }
            ToTaskManager::Cancel { job } => {
                let Some(d) = self.tms[t].deployed.as_mut().filter(|d| d.job == job) else {
                    return;
                };
                let attempt = d.attempt;
                let stopped: Vec<(u32, u32)> = d
                    .subtasks
                    .iter_mut()
                    .filter(|(_, running)| **running)
                    .map(|(k, running)| {
                        *running = false;
                        *k
                    })
                    .collect();
                for (task, subtask) in stopped {
                    let delay = self.rng.below(10);
                    self.send(
                        t,
                        delay,
                        ToJobManager::TaskState {
                            job: job.clone(),
                            attempt,
                            task,
                            subtask,
                            state: TaskState::Canceled,
                            error: Some("canceled".into()),
                        },
                    );
                }
            }
            ToTaskManager::JobFinished { job, attempt } => {
                // The final commits take a while.
                let delay = self.rng.below(20);
                self.send(
                    t,
                    delay,
                    ToJobManager::Committed {
                        job,
                        attempt,
                        error: None,
                    },
                );
            }
            // A lost notification changes nothing here: commits are the
            // TaskManagers' business, and the next completion subsumes it.
            // Savepoints are not simulated: nothing drains.
            ToTaskManager::CheckpointComplete {
                job, checkpoint, ..
            } => {
                // Announced only once its metadata is stored: sinks commit
                // on it, and a JobManager killed before the metadata is
                // written restores the checkpoint before.
                let metadata = self
                    .storage_root
                    .join(&job)
                    .join(format!("chk-{checkpoint}/_metadata"));
                assert!(
                    metadata.is_file(),
                    "checkpoint {checkpoint} announced before its metadata was stored"
                );
            }
            ToTaskManager::CheckpointAborted { .. }
            | ToTaskManager::Drain { .. }
            | ToTaskManager::Registered { .. }
            | ToTaskManager::Rejected { .. } => {}
        }
    }

    /// Hands the JobManager every message due by now, oldest first.
    fn deliver_due(&mut self) {
        let now = self.now();
        let mut due: Vec<InFlight> = Vec::new();
        let mut later = Vec::new();
        for m in self.queue.drain(..) {
            if m.at <= now {
                due.push(m);
            } else {
                later.push(m);
            }
        }
        self.queue = later;
        due.sort_by_key(|m| m.at);
        for m in due {
            for path in &m.uploads {
                self.upload(path);
            }
            let id = self.tms[m.tm].id.clone();
            self.jm.deliver(&id, m.session, m.message);
        }
    }

    /// TaskManager `t` dies: its connection closes with `reason` (`None`:
    /// it falls silent, for the heartbeat timeout to find). What it had not
    /// sent dies with it, uploads too; it comes back after `down_for` steps.
    fn kill(&mut self, t: usize, reason: Option<&str>, down_for: u32) {
        if let Some(reason) = reason {
            let id = self.tms[t].id.clone();
            self.jm.disconnect(&id, self.tms[t].session, reason);
        }
        self.queue.retain(|m| m.tm != t);
        let tm = &mut self.tms[t];
        tm.rx = None;
        tm.deployed = None;
        tm.down_for = Some(down_for);
    }

    fn inject_fault(&mut self) {
        let t = self.rng.below(self.tms.len() as u64) as usize;
        if self.tms[t].down_for.is_some() {
            return;
        }
        if self.rng.chance(8) {
            // Killed: its connection closes or, sometimes, it falls
            // silent and the heartbeat timeout finds it.
            if self.rng.chance(300) {
                self.kill(t, None, 1_100);
            } else {
                let down_for = 5 + self.rng.below(50) as u32;
                self.kill(t, Some("simulated kill"), down_for);
            }
        } else if self.rng.chance(8) {
            // A subtask fails.
            let Some(d) = self.tms[t].deployed.as_mut() else {
                return;
            };
            let Some((&k, running)) = d.subtasks.iter_mut().find(|(_, r)| **r) else {
                return;
            };
            *running = false;
            let (job, attempt) = (d.job.clone(), d.attempt);
            self.send(
                t,
                0,
                ToJobManager::TaskState {
                    job,
                    attempt,
                    task: k.0,
                    subtask: k.1,
                    state: TaskState::Failed,
                    error: Some("simulated failure".into()),
                },
            );
        }
    }

    /// After the faults: sources end, so every running subtask finishes.
    fn finish_sources(&mut self) {
        for t in 0..self.tms.len() {
            let Some(d) = self.tms[t].deployed.as_mut() else {
                continue;
            };
            let done: Vec<(u32, u32)> = d
                .subtasks
                .iter_mut()
                .filter(|(_, r)| **r)
                .map(|(k, r)| {
                    *r = false;
                    *k
                })
                .collect();
            let (job, attempt) = (d.job.clone(), d.attempt);
            for (task, subtask) in done {
                let delay = self.rng.below(30);
                self.send(
                    t,
                    delay,
                    ToJobManager::TaskState {
                        job: job.clone(),
                        attempt,
                        task,
                        subtask,
                        state: TaskState::Finished,
                        error: None,
                    },
                );
            }
        }
    }
}

/// The job: a generator and a blackhole, two subtasks each, in two tasks.
fn graph(dir: &Path) -> JobGraph {
    let spec = dir.join("sim.toml");
    std::fs::write(
        &spec,
        r#"
[job]
name = "sim"
parallelism = 2

[job.checkpoints]
interval_ms = 100
timeout_ms = 2000
retain = 2

[job.restart]
strategy = "fixed-delay"
attempts = 1000
delay_ms = 50

[[source]]
id = "gen"
type = "generator"
kind = "sequence"

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "gen"
to = "out"
partition = "rebalance"
"#,
    )
    .unwrap();
    JobGraph::from_file(&spec, &[]).unwrap()
}

/// The checkpoint's metadata exists, names every subtask, and every file
/// it names is in storage.
fn check_restorable(root: &Path, job: &str, checkpoint: u64) -> BTreeSet<String> {
    let metadata = root.join(job).join(format!("chk-{checkpoint}/_metadata"));
    let text = std::fs::read_to_string(&metadata)
        .unwrap_or_else(|e| panic!("checkpoint {checkpoint}: no metadata ({e})"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let subtasks = v["subtasks"].as_array().unwrap();
    assert_eq!(
        subtasks.len(),
        4,
        "checkpoint {checkpoint} completed without every subtask: {text}"
    );
    let mut shared = BTreeSet::new();
    for entry in subtasks {
        for state in entry[1]["states"].as_array().unwrap() {
            for file in state[1]["files"].as_array().unwrap() {
                let path = file["path"].as_str().unwrap();
                assert!(
                    root.join(path).is_file(),
                    "checkpoint {checkpoint} names {path}, which is not in storage"
                );
                if file["shared"].as_bool().unwrap() {
                    shared.insert(path.to_owned());
                }
            }
        }
    }
    shared
}

/// A JobManager on simulated time with [`TASKMANAGERS`] fake TaskManagers
/// and the job submitted; `dir` holds storage and data.
fn start(seed: u64, runtime: &Arc<Runtime>, dir: &Path, rt: &tokio::runtime::Runtime) -> Sim {
    let (clock, hand) = Clock::simulated();
    let storage_root = dir.join("checkpoints");
    let jm = JobManager::new(
        CoreConfig {
            data_dir: dir.join("jm"),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(10),
            scheduling: Strategy::Spread,
            max_module_bytes: 1 << 20,
            checkpoint_dir: Some(storage_root.clone()),
            checkpoint_storage: None,
            allowed_roots: AllowedRoots::none(),
            clock,
            storage_io: StorageIo::Stepped,
            max_job_state_bytes: None,
        },
        runtime.clone(),
        ModuleStore::open(&dir.join("modules")).unwrap(),
    );
    let tms = (0..TASKMANAGERS)
        .map(|i| {
            let id = format!("tm-{i}");
            let (session, rx) = jm.register_in_process(&id, 2);
            FakeTm {
                id,
                session,
                rx: Some(rx),
                down_for: None,
                deployed: None,
            }
        })
        .collect();
    let (created, _modules) = rt.block_on(jm.submit_graph(graph(dir), None)).unwrap();
    Sim {
        rng: Rng(seed),
        jm,
        hand,
        tms,
        queue: Vec::new(),
        storage_root,
        faults: true,
        finishing: false,
        job: created.id,
        uploads: 0,
        storage_stalled: 0,
        refuse_restores: false,
        from_scratch: 0,
    }
}

/// Runs one seeded schedule; panics with the seed on a broken invariant.
pub(super) fn run(seed: u64, runtime: &Arc<Runtime>) {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut sim = start(seed, runtime, dir.path(), &rt);
    let jm = sim.jm.clone();
    let storage_root = sim.storage_root.clone();
    for _ in 0..FAULTY_STEPS {
        sim.step();
    }
    // Heal: no more faults; let a checkpoint or two complete, then end the input.
    sim.faults = false;
    let mut steps = 0;
    let state = loop {
        let detail = jm.job(&sim.job).unwrap();
        if detail.summary.state.is_terminal() {
            break detail.summary.state;
        }
        sim.finishing = steps > 300;
        assert!(
            steps < HEALING_STEPS,
            "seed {seed}: the job is stuck in {:?} after the faults stopped ({:?})",
            detail.summary.state,
            jm.checkpoints(&sim.job).unwrap().restores
        );
        sim.step();
        steps += 1;
    };
    assert_eq!(state, JobState::Finished, "seed {seed}");
    // What the TaskManagers still had on the way arrives (late acks of
    // checkpoints aborted when the job ended clean up their uploads).
    for _ in 0..1_000 {
        if sim
            .queue
            .iter()
            .all(|m| matches!(m.message, ToJobManager::Heartbeat { .. }))
        {
            break;
        }
        sim.step();
    }

    // Every retained checkpoint is whole; the job's shared files are exactly
    // what the retained checkpoints name.
    jm.run_storage();
    let view = jm.checkpoints(&sim.job).unwrap();
    // (No folder at all: nothing was ever uploaded.)
    let retained: Vec<u64> = std::fs::read_dir(storage_root.join(&sim.job))
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("chk-")?.parse().ok()
        })
        .collect();
    let mut named = BTreeSet::new();
    for id in &retained {
        named.extend(check_restorable(&storage_root, &sim.job, *id));
    }
    assert!(
        retained.len() <= 2,
        "seed {seed}: more checkpoint folders than retained: {retained:?}"
    );
    if let Some(latest) = view.latest {
        assert!(
            retained.contains(&latest),
            "seed {seed}: latest {latest} deleted"
        );
    }
    let shared_dir = storage_root.join(&sim.job).join("shared");
    let stored: BTreeSet<String> = std::fs::read_dir(&shared_dir)
        .map(|d| {
            d.map(|e| {
                format!(
                    "{}/shared/{}",
                    sim.job,
                    e.unwrap().file_name().to_string_lossy()
                )
            })
            .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        stored, named,
        "seed {seed}: shared files in storage (left) differ from those retained checkpoints name (right)"
    );
}

/// What a targeted scenario runs in: a Wasm runtime (no module is ever
/// loaded), a folder, and a tokio runtime for the submit.
struct Env {
    runtime: Arc<Runtime>,
    dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
}

impl Env {
    fn new() -> Env {
        Env {
            runtime: Arc::new(Runtime::new(RuntimeConfig { cache_dir: None }).unwrap()),
            dir: tempfile::tempdir().unwrap(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }
}

/// The job running without faults, with a completed checkpoint.
fn checkpointed(env: &Env, seed: u64) -> Sim {
    let mut sim = start(seed, &env.runtime, env.dir.path(), &env.rt);
    sim.faults = false;
    for _ in 0..300 {
        sim.step();
    }
    assert!(sim.jm.checkpoints(&sim.job).unwrap().latest.is_some());
    sim
}

/// A TaskManager lost after every subtask finished but before it confirmed
/// its final commits: the job is `finishing` until then, never `finished`,
/// and restarts from its latest checkpoint instead of ending with output
/// missing.
#[test]
fn a_taskmanager_lost_before_its_final_commit_restarts_the_job() {
    let env = Env::new();
    let _guard = env.rt.enter();
    let mut sim = checkpointed(&env, 7);
    let state = |sim: &Sim| sim.jm.job(&sim.job).unwrap().summary.state;
    // Running with a completed checkpoint; then the input ends.
    sim.finishing = true;
    let mut steps = 0;
    while state(&sim) != JobState::Finishing {
        assert_ne!(
            state(&sim),
            JobState::Finished,
            "finished before any commit"
        );
        sim.step();
        steps += 1;
        assert!(steps < 1_000, "never finishing: {:?}", state(&sim));
    }
    // tm-0 dies with its confirmation unsent.
    sim.kill(0, Some("killed while committing"), 5);
    sim.finishing = false;
    assert_eq!(
        state(&sim),
        JobState::Restarting,
        "a lost commit restarts the job"
    );
    while state(&sim) != JobState::Running {
        sim.step();
    }
    sim.finishing = true;
    let mut steps = 0;
    while state(&sim) != JobState::Finished {
        sim.step();
        steps += 1;
        assert!(steps < 3_000, "stuck in {:?}", state(&sim));
    }
    let restores = sim.jm.checkpoints(&sim.job).unwrap().restores;
    assert_eq!(restores.len(), 1, "{restores:?}");
    assert!(restores[0].checkpoint.is_some(), "{restores:?}");
}

/// A TaskManager whose subtasks have all finished, lost while others still
/// run: its sinks' final output was waiting for the job's end to be
/// committed, so the job restarts rather than finish without it.
#[test]
fn a_taskmanager_lost_after_its_subtasks_finished_restarts_the_job() {
    let env = Env::new();
    let _guard = env.rt.enter();
    let mut sim = checkpointed(&env, 11);
    let state = |sim: &Sim| sim.jm.job(&sim.job).unwrap().summary.state;
    // Only the subtasks of one TaskManager finish, and it says so.
    let t = (0..sim.tms.len())
        .find(|t| sim.tms[*t].deployed.is_some())
        .expect("a TaskManager runs subtasks");
    let d = sim.tms[t].deployed.as_mut().unwrap();
    let (job, attempt) = (d.job.clone(), d.attempt);
    let mine: Vec<(u32, u32)> = d.subtasks.keys().copied().collect();
    d.subtasks.values_mut().for_each(|r| *r = false);
    let id = sim.tms[t].id.clone();
    for (task, subtask) in mine {
        sim.jm.deliver(
            &id,
            sim.tms[t].session,
            ToJobManager::TaskState {
                job: job.clone(),
                attempt,
                task,
                subtask,
                state: TaskState::Finished,
                error: None,
            },
        );
    }
    assert_eq!(state(&sim), JobState::Running, "others still run");
    // Then it is lost.
    sim.kill(t, Some("killed after finishing"), 5);
    assert!(
        matches!(state(&sim), JobState::Failing | JobState::Restarting),
        "{:?}",
        state(&sim)
    );
    let mut steps = 0;
    while state(&sim) != JobState::Running {
        sim.step();
        steps += 1;
        assert!(steps < 1_000, "no restart: {:?}", state(&sim));
    }
    sim.finishing = true;
    while state(&sim) != JobState::Finished {
        sim.step();
        steps += 1;
        assert!(steps < 4_000, "stuck in {:?}", state(&sim));
    }
    assert_eq!(sim.jm.checkpoints(&sim.job).unwrap().restores.len(), 1);
}

/// Every retained checkpoint refused by the TaskManagers (as RocksDB
/// refusing files that passed their hashes): each restart falls back to an
/// older one, and with none left the job fails, saying why, instead of
/// starting over and committing its output a second time.
#[test]
fn with_no_retained_checkpoint_restorable_the_job_fails_rather_than_start_over() {
    let env = Env::new();
    let _guard = env.rt.enter();
    let mut sim = checkpointed(&env, 13);
    let state = |sim: &Sim| sim.jm.job(&sim.job).unwrap().summary.state;
    sim.refuse_restores = true;
    sim.kill(0, Some("killed to restart the job"), 5);
    let mut steps = 0;
    while state(&sim) != JobState::Failed {
        assert_ne!(state(&sim), JobState::Running, "running again");
        sim.step();
        steps += 1;
        assert!(steps < 3_000, "stuck in {:?}", state(&sim));
    }
    assert_eq!(sim.from_scratch, 0, "a deployment without a restore point");
    let history = sim.jm.checkpoints(&sim.job).unwrap();
    let tried: Vec<Option<u64>> = history.restores.iter().map(|r| r.checkpoint).collect();
    assert!(
        tried.len() >= 2,
        "one restart per retained checkpoint: {tried:?}"
    );
    assert!(
        tried.windows(2).all(|w| w[1].is_some() && w[0] > w[1]),
        "each from an older one: {tried:?}"
    );
    let failure = sim
        .jm
        .job(&sim.job)
        .unwrap()
        .summary
        .failure
        .unwrap_or_default();
    assert!(
        failure.contains("no retained checkpoint can be restored"),
        "{failure}"
    );
    assert!(failure.contains("RocksDB refused 000009.sst"), "{failure}");
}

/// The simulated cluster under 1,000 random failure schedules.
#[test]
fn a_thousand_random_failover_schedules_keep_checkpoints_consistent() {
    let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None }).unwrap());
    let first: u64 = std::env::var("WEIR_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let seeds: u64 = std::env::var("WEIR_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000);
    for seed in first..first + seeds {
        run(seed, &runtime);
    }
}
