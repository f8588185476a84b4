//! The TaskManager daemon: registers with the JobManager, heartbeats, runs
//! the subtasks the JobManager deploys to it, and reports their states.
//!
//! # Connection to the JobManager
//!
//! Its id is the one in its certificate ([`weir_runtime::net::tls::Role`]); it
//! connects only to a node presenting the JobManager's certificate.
//! One QUIC connection (mutual TLS) from this TaskManager's endpoint, which
//! is also its data plane's: one UDP socket per daemon. The control stream
//! carries [`weir_runtime::rpc`] messages; each module fetch is a stream of its own.
//! When the connection is lost the TaskManager cancels every job it runs
//! (there is nobody left to coordinate them) and connects again, with
//! backoff, until a JobManager accepts its registration — so a restarted
//! JobManager gets its TaskManagers back by itself.
//!
//! # Running a job
//!
//! A [`Deployment`] carries the whole graph and every subtask's placement.
//! The TaskManager fetches the modules it lacks (verifying each one's hash),
//! loads them through its compiled-component cache, and calls
//! [`LocalCluster::deploy`] with an exchange that keeps channels between its
//! own subtasks in memory and sends the others over the [`DataPlane`].
//! File sources and sinks are checked against this TaskManager's own
//! [`AllowedRoots`] (`--allow-path`) before anything starts and again when
//! each file is opened: a JobManager's check is not relied upon.
//!
//! # Restoring
//!
//! A [`Deployment`] restarting from a checkpoint carries every subtask's
//! part of it ([`RestorePoint`]). Before its subtasks start, the
//! TaskManager reads the checkpoint's `_metadata` from checkpoint storage
//! and checks that it records exactly the parts it was sent for its own
//! subtasks ([`verify_restore`]), then downloads their state files, each
//! checked by size and SHA-256 ([`weir_runtime::checkpoint::download`]), and reads
//! their timers files (checked by SHA-256 too). Metadata
//! missing, unreadable or not matching, or a file missing or changed, is
//! reported as [`ToJobManager::RestoreFailed`] (and the subtasks fail): the
//! JobManager then restarts from the retained checkpoint before it.
//!
//! This crate must not decide placement or job state: the JobManager does.
//!
//! # Layout
//!
//! - `lib.rs`: these docs, the settings ([`TaskManagerConfig`],
//!   [`InProcessConfig`]) and the public API, re-exported.
//! - `node`: the state one TaskManager's session, deployments and
//!   checkpoint shells share (`Inner`): what runs here, keyed by
//!   deployment, and the outbox to the JobManager.
//! - `session`: the daemon ([`start`], [`RunningTaskManager`]): connect,
//!   register, heartbeat, reconnect with backoff; carries out each message
//!   of the JobManager.
//! - `fetch`: makes every operator module of a graph a local file,
//!   fetching the missing ones from the JobManager.
//! - `deploy`: one deployment from its arrival to its end (`run_job`):
//!   fetch, restore, deploy the local subtasks, report their states.
//! - `restore`: downloads and checks what the local subtasks restore.
//! - `checkpoints`: the shell around the pure
//!   [`AckLedger`](weir_runtime::checkpoint::acks::AckLedger) of one
//!   deployment; uploads snapshots on the blocking pool.
//! - `in_process`: [`InProcessTaskManager`], the same TaskManager attached
//!   to an in-process JobManager (the embedded cluster).
//! - `metrics`: `GET /metrics` (`--metrics ADDR`), the Prometheus
//!   exposition of the subtasks running here and of their operators' own
//!   metrics.
//!
//! [`Deployment`]: weir_runtime::rpc::Deployment
//! [`RestorePoint`]: weir_runtime::rpc::RestorePoint
//! [`ToJobManager::RestoreFailed`]: weir_runtime::rpc::ToJobManager::RestoreFailed
//! [`LocalCluster::deploy`]: weir_runtime::local::LocalCluster::deploy
//! [`DataPlane`]: weir_runtime::net::DataPlane
//! [`verify_restore`]: weir_runtime::checkpoint::snapshot::verify_restore

use std::net::SocketAddr;
use std::path::PathBuf;

use weir_runtime::connectors::AllowedRoots;
use weir_runtime::net::NetConfig;
use weir_runtime::net::tls::NodeIdentity;

mod checkpoints;
mod deploy;
mod fetch;
mod in_process;
mod metrics;
mod node;
mod restore;
mod session;

pub use in_process::InProcessTaskManager;
pub use session::{RunningTaskManager, serve, start};

/// Settings of `weir taskmanager`.
#[derive(Debug, Clone)]
pub struct TaskManagerConfig {
    /// Its id; `None`: the one in its certificate. Either way it must be
    /// the certificate's.
    pub id: Option<String>,
    /// The JobManager's RPC address.
    pub jobmanager: SocketAddr,
    /// Task slots offered.
    pub slots: u32,
    /// Module cache, compiled cache and job state live here.
    pub data_dir: PathBuf,
    /// Its certificate, key and the cluster CA.
    pub identity: NodeIdentity,
    /// Where the data plane (and the client side of the control connection) binds.
    pub bind: SocketAddr,
    /// Network buffers and credits.
    pub net: NetConfig,
    /// Where file sources and sinks may read and write (`--allow-path`);
    /// none by default. Checked again when each file is opened, whatever
    /// the JobManager checked.
    pub allowed_roots: AllowedRoots,
    /// Where to serve `GET /metrics` (Prometheus text format); `None`: not
    /// served. Port 0 picks a free port
    /// ([`RunningTaskManager::metrics_address`] says which).
    pub metrics: Option<SocketAddr>,
}

/// Settings of an in-process TaskManager (the embedded cluster).
#[derive(Debug, Clone)]
pub struct InProcessConfig {
    /// Its id.
    pub id: String,
    /// Task slots offered.
    pub slots: u32,
    /// Job state lives here (`work/` under it).
    pub data_dir: PathBuf,
    /// The JobManager's module store folder: shared, so nothing is fetched.
    pub modules_dir: PathBuf,
    /// Where file sources and sinks may read and write.
    pub allowed_roots: AllowedRoots,
    /// Records per batch on channels (as [`NetConfig::buffer_size`]).
    pub buffer_size: usize,
}
