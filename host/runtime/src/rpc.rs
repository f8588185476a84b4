//! The control protocol between a TaskManager and its JobManager.
//!
//! # Shape
//!
//! A TaskManager connects to the JobManager's RPC address over QUIC (mutual
//! TLS, [`crate::net::tls`]) and opens its **control stream**: the first
//! bidirectional stream of the connection. It sends [`ToJobManager::Register`]
//! and gets [`ToTaskManager::Registered`] (or `Rejected`); after that both
//! sides write on the stream whenever they have something to say: heartbeats
//! and task state changes one way, deployments and cancellations the other.
//!
//! Every further bidirectional stream the TaskManager opens is a **module
//! fetch**: it writes a [`FetchModule`], the JobManager answers with a
//! [`ModuleHeader`] and then exactly `size` raw bytes, and finishes the
//! stream.
//!
//! # Framing
//!
//! A frame is a 4-byte big-endian length and that many bytes of JSON (the
//! control messages are small and rare; JSON keeps them debuggable). Frames
//! over [`MAX_FRAME`] are refused before their body is read.
//!
//! This module owns only message types and framing: no sockets, no state.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::job::JobGraph;
use crate::net::NetStats;

/// The largest control frame: a job graph with its placement is a few KiB.
pub const MAX_FRAME: usize = 16 << 20;

/// What a TaskManager tells its JobManager.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToJobManager {
    /// First message of the control stream.
    Register {
        /// The TaskManager's id (stable across its restarts).
        id: String,
        /// Task slots it offers.
        slots: u32,
        /// Where other TaskManagers reach its data plane.
        data_address: SocketAddr,
        /// Weir's version, so mismatched daemons are refused.
        version: String,
    },
    /// Periodic liveness signal with current metrics.
    Heartbeat {
        /// The data plane's counters.
        net: NetStats,
        /// Metrics of every job with subtasks on this TaskManager.
        jobs: Vec<JobReport>,
        /// The TaskManager process's resident memory (Linux).
        #[serde(default)]
        memory: Option<crate::telemetry::memory::ProcessMemory>,
    },
    /// A subtask's part of a checkpoint is uploaded.
    Ack {
        /// Job id.
        job: String,
        /// The deployment attempt it belongs to.
        attempt: u32,
        /// Checkpoint id.
        checkpoint: u64,
        /// Task index.
        task: u32,
        /// Subtask index.
        subtask: u32,
        /// Where its state is, and what it restores.
        snapshot: SubtaskCheckpoint,
        /// Barrier alignment time, in milliseconds.
        alignment_ms: u64,
    },
    /// A subtask could not take its part of a checkpoint.
    Decline {
        /// Job id.
        job: String,
        /// The deployment attempt.
        attempt: u32,
        /// Checkpoint id.
        checkpoint: u64,
        /// Task index.
        task: u32,
        /// Subtask index.
        subtask: u32,
        /// Why.
        reason: String,
    },
    /// The TaskManager could not restore checkpoint `checkpoint` for
    /// attempt `attempt` (a file missing, truncated or changed in storage).
    /// Sent before the subtasks' `Failed` states, so that the restart
    /// restores from an older retained checkpoint instead.
    RestoreFailed {
        /// Job id.
        job: String,
        /// The deployment attempt that tried to restore.
        attempt: u32,
        /// The checkpoint that could not be restored.
        checkpoint: u64,
        /// Why.
        reason: String,
    },
    /// After [`ToTaskManager::JobFinished`]: the TaskManager committed the
    /// sinks' final output of its subtasks (`error`: a commit failed; the
    /// output is still pending). The job is finished only once every
    /// TaskManager said so.
    Committed {
        /// Job id.
        job: String,
        /// The deployment attempt.
        attempt: u32,
        /// Why a commit failed, if one did.
        error: Option<String>,
    },
    /// A subtask changed state.
    TaskState {
        /// Job id.
        job: String,
        /// The deployment attempt it belongs to.
        attempt: u32,
        /// Task index (after chaining).
        task: u32,
        /// Subtask index.
        subtask: u32,
        /// The new state.
        state: TaskState,
        /// Why, when `state` is `Failed` (or `Canceled` by an abort).
        error: Option<String>,
    },
}

/// What a JobManager tells a TaskManager.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToTaskManager {
    /// Registration accepted.
    Registered {
        /// How often to send heartbeats, in milliseconds.
        heartbeat_interval_ms: u64,
    },
    /// Registration refused (the connection is closed after this).
    Rejected {
        /// Why.
        reason: String,
    },
    /// Run the subtasks of a job that are placed on this TaskManager.
    Deploy(Box<Deployment>),
    /// Stop every subtask of a job at once.
    Cancel {
        /// Job id.
        job: String,
    },
    /// Inject the barrier of checkpoint `checkpoint` at the job's sources.
    TriggerCheckpoint {
        /// Job id.
        job: String,
        /// The deployment attempt.
        attempt: u32,
        /// Checkpoint id.
        checkpoint: u64,
    },
    /// Checkpoint `checkpoint` completed: commit what sinks pre-committed
    /// up to it.
    CheckpointComplete {
        /// Job id.
        job: String,
        /// The deployment attempt.
        attempt: u32,
        /// Checkpoint id.
        checkpoint: u64,
    },
    /// Checkpoint `checkpoint` was abandoned.
    CheckpointAborted {
        /// Job id.
        job: String,
        /// The deployment attempt.
        attempt: u32,
        /// Checkpoint id.
        checkpoint: u64,
    },
    /// Every subtask finished: commit everything still pending.
    JobFinished {
        /// Job id.
        job: String,
        /// The deployment attempt.
        attempt: u32,
    },
    /// Drain the job's sources (`weir stop --drain`): each sends the
    /// final watermark (firing every event-time timer downstream) and then
    /// reads nothing more, waiting for the savepoint's barrier; `false`
    /// lets them read again (the savepoint failed).
    Drain {
        /// Job id.
        job: String,
        /// The deployment attempt.
        attempt: u32,
        /// Drain, or read again.
        drain: bool,
    },
}

pub use crate::checkpoint::snapshot::SubtaskCheckpoint;

/// Checkpointing of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointDeploy {
    /// The checkpoint storage root (a directory every daemon can reach).
    pub storage: std::path::PathBuf,
}

/// The checkpoint a deployment restores from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestorePoint {
    /// Checkpoint id.
    pub checkpoint: u64,
    /// Every subtask's part, by (task, subtask).
    pub subtasks: Vec<((u32, u32), SubtaskCheckpoint)>,
}

/// A job as the TaskManagers receive it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deployment {
    /// Job id (unique in the cluster's lifetime).
    pub job: String,
    /// The validated graph; operator modules are `sha256:` references.
    pub graph: JobGraph,
    /// The graph's tasks, chained once by the JobManager
    /// ([`crate::job::chain`]); TaskManagers build these, checked with
    /// [`crate::job::check_tasks`], and never chain again.
    pub tasks: Vec<crate::job::TaskSpec>,
    /// Per task of `tasks`, per subtask: where it runs.
    pub placement: Vec<Vec<SlotRef>>,
    /// Data-plane address of every TaskManager in `placement`.
    pub peers: HashMap<String, SocketAddr>,
    /// Deployment attempt: 0 first, +1 per restart.
    pub attempt: u32,
    /// Set when the job takes checkpoints.
    pub checkpoints: Option<CheckpointDeploy>,
    /// Set when restarting from a checkpoint.
    pub restore: Option<RestorePoint>,
    /// Set when the job starts from a savepoint and `restore` is `None`
    /// (it was submitted with one and has no checkpoint of its own yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<SavepointDeploy>,
}

/// The savepoint a deployment starts from: TaskManagers read it from `dir`
/// (a path every daemon can reach), each subtask taking the state of its
/// key groups ([`crate::checkpoint::savepoint::directory::restore_subtask`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavepointDeploy {
    /// The savepoint directory.
    pub dir: std::path::PathBuf,
    /// Its `_savepoint`, as the JobManager read and checked it.
    pub metadata: crate::checkpoint::savepoint::directory::SavepointMetadata,
    /// Keyed operators (by uid) whose new module migrates the state the
    /// old one wrote (a job upgrade), with the old module's version: every
    /// value of their states that both declare goes through the new
    /// module's `migrate-state` on the way in.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub migrations: std::collections::BTreeMap<String, MigrationDeploy>,
}

/// How one operator's state is migrated on restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationDeploy {
    /// The version (`operator-info.version`) of the module that wrote it.
    pub from_version: String,
    /// The states migrated (declared by both modules with the same kind).
    pub states: Vec<String>,
}

/// One task slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlotRef {
    /// The TaskManager's id.
    pub taskmanager: String,
    /// The slot's index on it.
    pub slot: u32,
}

/// The lifecycle of a subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Sent to its TaskManager, not started yet.
    Deploying,
    /// Started.
    Running,
    /// Reached the end of its input and closed.
    Finished,
    /// Failed (an operator, connector or the host).
    Failed,
    /// Stopped by a cancellation or an abort.
    Canceled,
}

impl TaskState {
    /// Whether the subtask is done.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Finished | TaskState::Failed | TaskState::Canceled
        )
    }

    /// Lowercase name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Deploying => "deploying",
            TaskState::Running => "running",
            TaskState::Finished => "finished",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
        }
    }
}

/// One job's metrics on one TaskManager.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobReport {
    /// Job id.
    pub job: String,
    /// Indexed like the graph's vertices; counts of the local subtasks only.
    pub vertices: Vec<VertexReport>,
    /// Most batches seen queued in one of the job's local channels.
    #[serde(default)]
    pub max_queued_batches: u64,
    /// Operator log lines written since the previous report, per subtask
    /// (at most [`MAX_LOG_BYTES_PER_REPORT`] in all; the rest follow in
    /// the next reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<SubtaskLogs>,
    /// Bytes of keyed state of the job's subtasks here, as last sampled
    /// (for the cluster's state quota, `--max-job-state-mb`).
    #[serde(default)]
    pub state_bytes: u64,
}

/// Most bytes of log lines (each counted with
/// [`LINE_OVERHEAD`](crate::telemetry::logs::LINE_OVERHEAD)) one
/// [`JobReport`] carries: a heartbeat stays far below [`MAX_FRAME`]
/// whatever the operators log.
pub const MAX_LOG_BYTES_PER_REPORT: usize = 1 << 20;

/// New log lines of one subtask of one operator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubtaskLogs {
    /// The vertex, indexed like the graph's vertices.
    pub vertex: u32,
    /// The subtask index.
    pub subtask: u32,
    /// The lines, oldest first (`seq` counts per subtask and attempt).
    pub lines: Vec<crate::telemetry::logs::LogLine>,
    /// Lines dropped since the previous report (over the rate limit, or
    /// pushed out of the TaskManager's ring before they were sent).
    #[serde(default)]
    pub dropped: u64,
}

/// One vertex's counters on one TaskManager.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VertexReport {
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// Head vertices of a task: time spent processing, summed over subtasks.
    pub busy_ms: u64,
    /// Head vertices: time spent waiting for input.
    pub idle_ms: u64,
    /// Head vertices: time spent waiting for room downstream.
    pub backpressured_ms: u64,
    /// The lowest current watermark of its subtasks here (`i64::MIN`: none
    /// yet); `None` if none of its subtasks run here.
    #[serde(default)]
    pub watermark: Option<i64>,
    /// The latest latency-marker latencies (ms) of its subtasks here (at
    /// most [`LATENCY_HISTORY`](crate::taskmanager::LATENCY_HISTORY) per
    /// subtask); empty without latency tracking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_ms: Vec<u32>,
}

/// First frame of a module fetch stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FetchModule {
    /// `sha256:<hex>`.
    pub hash: String,
}

/// The JobManager's answer to a [`FetchModule`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModuleHeader {
    /// Bytes that follow, when the module exists.
    pub size: Option<u64>,
    /// Why not, otherwise.
    pub error: Option<String>,
}

/// A framing or decoding failure.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed.
    #[error("control stream: {0}")]
    Io(#[from] std::io::Error),
    /// A frame over [`MAX_FRAME`].
    #[error("control frame of {0} bytes is over the limit of {MAX_FRAME}")]
    TooLarge(usize),
    /// The frame is not the expected JSON.
    #[error("malformed control frame: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    out: &mut W,
    message: &T,
) -> Result<(), FrameError> {
    let body = serde_json::to_vec(message)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    out.write_all(&(body.len() as u32).to_be_bytes()).await?;
    out.write_all(&body).await?;
    Ok(())
}

/// Reads one frame; `None` at a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    input: &mut R,
) -> Result<Option<T>, FrameError> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    // The body grows with the bytes that arrive, not with the length the
    // peer announced: a prefix alone must not make us allocate MAX_FRAME.
    let mut body = Vec::new();
    input.take(len as u64).read_to_end(&mut body).await?;
    if body.len() < len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("frame ended after {} of {len} bytes", body.len()),
        )
        .into());
    }
    Ok(Some(serde_json::from_slice(&body)?))
}

/// An in-process TaskManager's connection to its JobManager
/// (`JobManager::attach`).
#[derive(Debug)]
pub struct InProcessLink {
    /// What the JobManager says.
    pub from_jobmanager: tokio::sync::mpsc::UnboundedReceiver<ToTaskManager>,
    /// Where the TaskManager answers.
    pub to_jobmanager: tokio::sync::mpsc::UnboundedSender<ToJobManager>,
    /// How often to send heartbeats.
    pub heartbeat_interval: std::time::Duration,
    /// Passes the TaskManager's messages on; aborted at a deliberate
    /// shutdown (the TaskManager is then not reported lost).
    pub forwarder: tokio::task::AbortHandle,
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 10, finding 8: the JobManager deleted whatever storage paths
    /// a TaskManager's ack named, another job's included.
    #[test]
    fn an_ack_may_name_only_its_own_jobs_paths() {
        use crate::checkpoint::snapshot::{FileHandle, StateHandle};
        use crate::checkpoint::storage::StoragePath;
        let file = |path: &str, shared: bool| FileHandle {
            local_name: "000001.sst".into(),
            path: StoragePath::new(path).unwrap(),
            size: 1,
            shared,
            sha256: None,
        };
        let ack = |files: Vec<FileHandle>, timers: Option<&str>| SubtaskCheckpoint {
            finished: false,
            states: vec![(
                1,
                StateHandle {
                    backend: crate::state::BackendKind::Heap,
                    files,
                    full_size: 0,
                    incremental_size: 0,
                },
            )],
            timers: timers.map(|t| StoragePath::new(t).unwrap()),
            timers_sha256: None,
            source: None,
            sink: None,
        };
        let own = ack(
            vec![
                file("a/shared/x-000001.sst", true),
                file("a/chk-3/0-0/1/MANIFEST", false),
            ],
            Some("a/chk-3/0-0/timers"),
        );
        assert_eq!(own.foreign_path("a", 3), None);
        for (bad, files, timers) in [
            ("b/shared/x.sst", vec![file("b/shared/x.sst", true)], None),
            ("ab/shared/x.sst", vec![file("ab/shared/x.sst", true)], None),
            ("a/chk-2/0-0/m", vec![file("a/chk-2/0-0/m", false)], None),
            ("a/chk-3/x.sst", vec![file("a/chk-3/x.sst", true)], None),
            ("a/shared", vec![file("a/shared", true)], None),
            ("b/chk-3/t", vec![], Some("b/chk-3/t")),
        ] {
            let a = ack(files, timers);
            assert_eq!(
                a.foreign_path("a", 3).map(StoragePath::as_str),
                Some(bad),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn frames_roundtrip_and_end_cleanly() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(
            &mut a,
            &FetchModule {
                hash: "sha256:ab".into(),
            },
        )
        .await
        .unwrap();
        drop(a);
        let got: FetchModule = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!(got.hash, "sha256:ab");
        assert!(
            read_frame::<_, FetchModule>(&mut b)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn oversized_and_malformed_frames_are_errors() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&(MAX_FRAME as u32 + 1).to_be_bytes())
            .await
            .unwrap();
        assert!(matches!(
            read_frame::<_, FetchModule>(&mut b).await,
            Err(FrameError::TooLarge(_))
        ));
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&3u32.to_be_bytes()).await.unwrap();
        a.write_all(b"{x}").await.unwrap();
        assert!(matches!(
            read_frame::<_, FetchModule>(&mut b).await,
            Err(FrameError::Malformed(_))
        ));
    }
}
