//! The JobManager's configuration: the daemon's ([`JobManagerConfig`]),
//! the core's ([`CoreConfig`]: what `weir jobmanager` and the embedded
//! cluster share), how checkpoint storage I/O runs ([`StorageIo`]), the
//! clock ([`Clock`]) and the defaults.

use super::*;

/// Settings of `weir jobmanager`.
#[derive(Debug, Clone)]
pub struct JobManagerConfig {
    /// Where TaskManagers connect (QUIC).
    pub rpc: SocketAddr,
    /// Where the REST API listens (HTTP).
    pub rest: SocketAddr,
    /// Module store and compiled-component cache live here.
    pub data_dir: PathBuf,
    /// The JobManager's certificate, key and cluster CA.
    pub identity: NodeIdentity,
    /// How often TaskManagers send heartbeats.
    pub heartbeat_interval: Duration,
    /// How long without a heartbeat before a TaskManager is lost.
    pub heartbeat_timeout: Duration,
    /// How slots are chosen.
    pub scheduling: Strategy,
    /// Largest module upload, in bytes.
    pub max_module_bytes: usize,
    /// How REST requests are authenticated: by default with a token
    /// generated into `<data_dir>/rest-token` (see [`rest::auth`]).
    pub rest_auth: RestAuth,
    /// How long a REST client may stall while sending a request's header
    /// or body.
    pub rest_read_timeout: Duration,
    /// How long one module upload's body may take in all.
    pub rest_upload_timeout: Duration,
    /// Checkpoint storage root, a directory every daemon can reach
    /// (default: `<data_dir>/checkpoints`).
    pub checkpoint_dir: Option<PathBuf>,
    /// Where jobs' file sources and sinks may be (`--allow-path`); none by
    /// default. A job naming a file elsewhere is refused at submit (and its
    /// TaskManagers check again with their own roots).
    pub allowed_roots: AllowedRoots,
    /// Serve REST over TLS with the JobManager's certificate (its
    /// `identity`, which names localhost, the loopback addresses and any
    /// `weir cluster init --rest-name`); clients trust the cluster CA.
    pub rest_tls: bool,
    /// See [`CoreConfig::max_job_state_bytes`] (`--max-job-state-mb`).
    pub max_job_state_bytes: Option<u64>,
}

impl JobManagerConfig {
    /// Defaults for everything but addresses, data dir and identity.
    pub fn new(
        rpc: SocketAddr,
        rest: SocketAddr,
        data_dir: PathBuf,
        identity: NodeIdentity,
    ) -> Self {
        JobManagerConfig {
            rpc,
            rest,
            data_dir,
            identity,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            scheduling: Strategy::Spread,
            max_module_bytes: DEFAULT_MAX_MODULE_MB << 20,
            rest_auth: RestAuth::Generated,
            rest_read_timeout: rest::DEFAULT_READ_TIMEOUT,
            rest_upload_timeout: rest::DEFAULT_UPLOAD_TIMEOUT,
            checkpoint_dir: None,
            allowed_roots: AllowedRoots::none(),
            rest_tls: false,
            max_job_state_bytes: None,
        }
    }
}

impl JobManagerConfig {
    /// What the JobManager's core takes of these settings.
    pub fn core(&self) -> CoreConfig {
        CoreConfig {
            data_dir: self.data_dir.clone(),
            heartbeat_interval: self.heartbeat_interval,
            heartbeat_timeout: self.heartbeat_timeout,
            scheduling: self.scheduling,
            max_module_bytes: self.max_module_bytes,
            checkpoint_dir: self.checkpoint_dir.clone(),
            checkpoint_storage: None,
            allowed_roots: self.allowed_roots.clone(),
            clock: Clock::Real,
            storage_io: StorageIo::Background,
            max_job_state_bytes: self.max_job_state_bytes,
        }
    }
}

/// The settings of a JobManager's core ([`JobManager::new`]): everything
/// but its sockets and identity.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Its work directory (module checks) and default checkpoint root.
    pub data_dir: PathBuf,
    /// How often TaskManagers send heartbeats.
    pub heartbeat_interval: Duration,
    /// How long without a heartbeat before a TaskManager is lost.
    pub heartbeat_timeout: Duration,
    /// How slots are chosen.
    pub scheduling: Strategy,
    /// Largest module upload, in bytes.
    pub max_module_bytes: usize,
    /// Checkpoint storage root (default: `<data_dir>/checkpoints`).
    pub checkpoint_dir: Option<PathBuf>,
    /// What the JobManager reads and writes checkpoint files through
    /// (checkpoint metadata, deletes of discarded checkpoints); `None`: a
    /// [`DirStorage`] at the checkpoint root. TaskManagers keep using a
    /// [`DirStorage`] at the root, so this must show the same files: a
    /// wrapper of one (instrumented, slowed down, as in tests), not a
    /// different store.
    pub checkpoint_storage: Option<Arc<dyn CheckpointStorage>>,
    /// Where jobs' file sources and sinks may be.
    pub allowed_roots: AllowedRoots,
    /// Its clock.
    pub clock: Clock,
    /// Who runs its checkpoint storage commands.
    pub storage_io: StorageIo,
    /// The most keyed state one job may hold: checked at each completed
    /// checkpoint (the sum of its subtasks' state files) and against the
    /// state sizes its TaskManagers report with each heartbeat (sampled
    /// about once a second per subtask); a job over it fails, without
    /// restarting. `None`: no limit.
    pub max_job_state_bytes: Option<u64>,
}

#[cfg(test)]
impl CoreConfig {
    /// The defaults of a JobManager under test: real clock, storage work
    /// in the background, packed scheduling, 1 MiB modules, no state quota.
    pub(crate) fn for_tests(
        data_dir: PathBuf,
        checkpoint_dir: PathBuf,
        allowed_roots: AllowedRoots,
    ) -> CoreConfig {
        CoreConfig {
            data_dir,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            scheduling: Strategy::Pack,
            max_module_bytes: 1 << 20,
            checkpoint_dir: Some(checkpoint_dir),
            checkpoint_storage: None,
            clock: Clock::Real,
            storage_io: StorageIo::Background,
            max_job_state_bytes: None,
            allowed_roots,
        }
    }
}

/// Who runs the JobManager's checkpoint storage commands (see the module
/// docs: decided under the job's lock, run off it, in order per job).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StorageIo {
    /// A drain task per job, on the runtime's blocking pool.
    #[default]
    Background,
    /// The caller, with [`JobManager::run_storage`]: a simulation steps
    /// storage as it steps its [`Clock`], and can make it slow. Nothing
    /// else runs them ([`JobManager::wait_until_ended`] waits for them).
    Stepped,
}

/// The JobManager's clock: the real one, or one a test moves
/// ([`Clock::simulated`]) so that heartbeat timeouts, checkpoint intervals
/// and restart delays run on simulated time.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// `Instant::now()`.
    #[default]
    Real,
    /// Whatever the test last set.
    Simulated(Arc<Mutex<Instant>>),
}

impl Clock {
    /// A simulated clock starting now, and its hand.
    pub fn simulated() -> (Clock, Arc<Mutex<Instant>>) {
        let hand = Arc::new(Mutex::new(Instant::now()));
        (Clock::Simulated(hand.clone()), hand)
    }

    /// The time.
    pub fn now(&self) -> Instant {
        match self {
            Clock::Real => Instant::now(),
            Clock::Simulated(hand) => *hand.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// Default heartbeat interval.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Default heartbeat timeout: ten missed heartbeats (Flink uses 50 s for
/// slower, larger clusters; a lost machine here should fail its jobs fast).
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default upload limit, in MiB (a Python component is ~20 MiB).
pub const DEFAULT_MAX_MODULE_MB: usize = 256;
