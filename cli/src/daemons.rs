//! The daemon commands: `weir jobmanager`, `weir taskmanager`, `weir local`
//! and `weir cluster init|issue` (certificates: one per daemon, see
//! `weir_host::net::tls`).
//!
//! Each daemon prints one readiness line on stdout once it can be used
//! (scripts and tests wait for it instead of sleeping), logs to stderr, and
//! runs until SIGINT or SIGTERM.
//!
//! The REST API of `weir jobmanager` and `weir local` requires a token by
//! default, generated into the JobManager's data dir (see
//! `weir_host::jobmanager::rest::auth`); the readiness line names the file,
//! never the token.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use weir_host::connectors::{AllowedAddresses, AllowedRoots};
use weir_host::jobmanager::rest::auth::{RestAuth, TOKEN_FILE};
use weir_host::jobmanager::scheduler::Strategy;
use weir_host::jobmanager::{self, JobManagerConfig, RunningJobManager, StartError};
use weir_host::net::NetConfig;
use weir_host::net::tls::{
    ClusterCa, NodeIdentity, init_cluster_dir, issue_in_cluster_dir, rotate_cluster_dir,
};
use weir_host::taskmanager::daemon::{self, TaskManagerConfig};
use weir_host::wasm::{Runtime, RuntimeConfig};

use crate::{Failure, bad_input, failed, tokio_runtime};

#[derive(Debug, Args)]
pub struct CertArgs {
    /// Directory with the cluster CA and node certificates, made by
    /// `weir cluster init DIR`.
    #[arg(long, value_name = "DIR", env = "WEIR_CERTS")]
    certs: PathBuf,

    /// Which certificate in --certs this daemon presents (NAME.pem and
    /// NAME.key) [default: jobmanager, or taskmanager-ID for --id ID].
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
}

#[derive(Debug, Args)]
pub struct JobManagerArgs {
    /// Where TaskManagers connect (QUIC, UDP).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6123")]
    rpc: SocketAddr,

    /// Where the REST API listens (HTTP). Every request needs the token
    /// (see --rest-token), on loopback too.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    rest: SocketAddr,

    #[command(flatten)]
    rest_auth: RestAuthArgs,

    /// Serve the REST API over TLS (https) with the JobManager's
    /// certificate from --certs, which names localhost, 127.0.0.1, ::1 and
    /// any `weir cluster init --rest-name HOST`. Clients trust the
    /// cluster's ca.pem (`weir --ca FILE`, or WEIR_CA).
    #[arg(long)]
    rest_tls: bool,

    /// How long a REST client may take to send a request's header, or
    /// stall in its body, before the connection is closed (or the request
    /// answered 408), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    rest_read_timeout_ms: u64,

    /// How long one module upload may take to arrive in all, in
    /// milliseconds; a slower one is answered 408 and gives its turn (at
    /// most two uploads are read at once) to the next.
    #[arg(long, value_name = "MS", default_value_t = 600_000)]
    rest_upload_timeout_ms: u64,

    /// Module store, compiled-component cache, the REST token file
    /// `rest-token`, and the jobs a restart takes back (`jobs/`, with the
    /// checkpoint metadata key `checkpoint-key`): start the JobManager
    /// again with the same directory and its running jobs restart from
    /// their latest checkpoints [default: ~/.local/share/weir/jobmanager].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    #[command(flatten)]
    certs: CertArgs,

    /// How often TaskManagers send heartbeats, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    heartbeat_interval_ms: u64,

    /// A TaskManager silent for this long is lost and its jobs fail, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    heartbeat_timeout_ms: u64,

    /// How subtasks are spread over TaskManagers: `spread` (even out) or
    /// `pack` (fill one TaskManager first).
    #[arg(long, value_name = "STRATEGY", default_value = "spread")]
    scheduling: Strategy,

    /// Largest module upload, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    max_module_mb: usize,

    /// The most keyed state one job may hold, in MiB: checked at each
    /// checkpoint (the sum of its subtasks' state files) and, with or
    /// without checkpoints, against the state size its TaskManagers sample
    /// about once a second (RocksDB's memtables included: allow a few MiB
    /// per keyed subtask). A job over it fails and is not restarted
    /// [default: no limit].
    #[arg(long, value_name = "MIB")]
    max_job_state_mb: Option<u64>,

    /// Checkpoint storage: a directory every TaskManager can reach at the
    /// same path (local disk for one machine, else a shared filesystem)
    /// [default: DATA_DIR/checkpoints].
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,

    /// A directory whose files jobs' file sources may read and file sinks
    /// may write (symlinks resolved; regular files only). Repeatable. None
    /// by default: a job with a file source or sink is refused at submit.
    /// Give the same directories to the TaskManagers, which check again.
    #[arg(long = "allow-path", value_name = "DIR")]
    allow_paths: Vec<PathBuf>,

    /// A NATS server or Kafka broker jobs' network connectors may reach:
    /// HOST (any port), HOST:PORT ([V6]:PORT), or * (any address).
    /// Repeatable. None by default: a job with a NATS or Kafka source or
    /// sink is refused at submit, and is never contacted. Hosts are
    /// compared as written (a name is not resolved). Give the same to the
    /// TaskManagers, which check again.
    #[arg(long = "allow-address", value_name = "HOST[:PORT]")]
    allow_addresses: Vec<String>,
}

/// How the REST API authenticates requests (`weir jobmanager`, `weir local`).
#[derive(Debug, Args)]
pub struct RestAuthArgs {
    /// The token every REST request must send as `Authorization: Bearer
    /// TOKEN` [default: generated at first start into DATA_DIR/rest-token
    /// (mode 0600) and reused; the client commands read it from there].
    #[arg(
        long,
        value_name = "TOKEN",
        env = "WEIR_REST_TOKEN",
        hide_env_values = true
    )]
    rest_token: Option<String>,

    /// Serve REST without a token, as before tokens were required: anyone
    /// on this machine can then submit jobs. Only with a loopback --rest.
    #[arg(long)]
    rest_insecure_loopback: bool,
}

impl RestAuthArgs {
    /// The setting, checked against the REST address: an empty token, a
    /// token with the insecure flag, or the flag off loopback is bad input.
    fn auth(&self, rest: SocketAddr) -> Result<RestAuth, Failure> {
        let auth = match (&self.rest_token, self.rest_insecure_loopback) {
            (Some(_), true) => {
                return Err(bad_input(anyhow::anyhow!(
                    "--rest-insecure-loopback serves without a token, but a token is given \
                     (--rest-token or WEIR_REST_TOKEN): choose one"
                )));
            }
            (Some(t), false) => RestAuth::Token(t.clone()),
            (None, true) => RestAuth::InsecureLoopback,
            (None, false) => RestAuth::Generated,
        };
        auth.check(rest).map_err(bad_input)?;
        Ok(auth)
    }
}

/// The readiness line's words about the token: where it is, never what.
fn token_words(jm: &RunningJobManager, auth: &RestAuth) -> String {
    match (&jm.rest_token_file, auth) {
        (Some(file), _) => format!("token-file {}", file.display()),
        (None, RestAuth::InsecureLoopback) => "no token (--rest-insecure-loopback)".to_owned(),
        (None, _) => "token from --rest-token".to_owned(),
    }
}

/// Says once, on stderr, that a token was generated and where it is.
fn announce_token(jm: &RunningJobManager) {
    if let (true, Some(file)) = (jm.rest_token_created, &jm.rest_token_file) {
        eprintln!(
            "generated a REST token in {} (mode 0600): `weir` commands read it from there \
             (or WEIR_REST_TOKEN_FILE=FILE); keep it secret",
            file.display()
        );
    }
}

/// A failed start: REST authentication problems are bad input (exit 2).
fn start_failure(e: StartError) -> Failure {
    match e {
        StartError::RestAuth(_) => bad_input(e),
        e => failed(e),
    }
}

#[derive(Debug, Args)]
pub struct TaskManagerArgs {
    /// The JobManager's RPC address (its --rpc).
    #[arg(
        long,
        value_name = "ADDR",
        env = "WEIR_JOBMANAGER_RPC",
        default_value = "127.0.0.1:6123"
    )]
    jobmanager: SocketAddr,

    /// Task slots to offer.
    #[arg(long, value_name = "N", default_value_t = 2)]
    slots: u32,

    /// Module cache, compiled cache, job state and this TaskManager's id.
    /// Give each TaskManager on a machine its own [default:
    /// ~/.local/share/weir/taskmanager].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Where the data plane listens (QUIC, UDP); port 0 picks one. With a
    /// wildcard address (0.0.0.0:PORT) other TaskManagers are told the local
    /// address on the route to the JobManager.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    bind: SocketAddr,

    /// Its id: the one its certificate names (`weir cluster init|issue
    /// --taskmanager ID`), which the JobManager checks [default: the id in
    /// the certificate given by --node-name].
    #[arg(long)]
    id: Option<String>,

    /// A directory whose files jobs' file sources may read and file sinks
    /// may write (symlinks resolved; regular files only). Repeatable. None
    /// by default: a subtask with a file source or sink fails.
    #[arg(long = "allow-path", value_name = "DIR")]
    allow_paths: Vec<PathBuf>,

    /// A NATS server or Kafka broker jobs' network connectors may reach:
    /// HOST (any port), HOST:PORT ([V6]:PORT), or * (any address).
    /// Repeatable. None by default: a subtask with a NATS or Kafka source
    /// or sink fails without contacting it.
    #[arg(long = "allow-address", value_name = "HOST[:PORT]")]
    allow_addresses: Vec<String>,

    /// Serve Prometheus metrics at http://ADDR/metrics: per job, vertex and
    /// subtask records and bytes in/out, busy/idle/backpressured time and
    /// watermarks, and the operators' own counters and gauges. Off by
    /// default; no token (like Flink's Prometheus reporter), so bind it
    /// where only your Prometheus reaches (e.g. 127.0.0.1:9249). Port 0
    /// picks a free port; the address is printed at start.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,

    #[command(flatten)]
    certs: CertArgs,

    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Args)]
pub struct NetArgs {
    /// Size of a network buffer between TaskManagers, in KiB.
    #[arg(long, value_name = "KIB", default_value_t = 32)]
    network_buffer_kb: usize,

    /// Buffers a receiving channel grants its sender (credits).
    #[arg(long, value_name = "N", default_value_t = 4)]
    credits: u32,
}

impl NetArgs {
    fn config(&self) -> Result<NetConfig, Failure> {
        if self.network_buffer_kb == 0 || self.network_buffer_kb > 16 * 1024 {
            return Err(bad_input(anyhow::anyhow!(
                "--network-buffer-kb must be 1..=16384, found {}",
                self.network_buffer_kb
            )));
        }
        if self.credits == 0 {
            return Err(bad_input(anyhow::anyhow!("--credits must be at least 1")));
        }
        Ok(NetConfig {
            buffer_size: self.network_buffer_kb << 10,
            credits_per_channel: self.credits,
        })
    }
}

#[derive(Debug, Args)]
pub struct LocalArgs {
    /// TaskManagers to start.
    #[arg(long, value_name = "N", default_value_t = 2)]
    taskmanagers: u32,

    /// Slots per TaskManager.
    #[arg(long, value_name = "S", default_value_t = 2)]
    slots: u32,

    /// Where the REST API listens; `weir submit` and friends talk to it.
    /// Every request needs the token (see --rest-token), on loopback too.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    rest: SocketAddr,

    #[command(flatten)]
    rest_auth: RestAuthArgs,

    /// Data directories of the JobManager and TaskManagers [default: a
    /// fresh temporary directory, removed on exit].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// A directory whose files jobs' file sources may read and file sinks
    /// may write (symlinks resolved; regular files only). Repeatable
    /// [default: the current directory].
    #[arg(long = "allow-path", value_name = "DIR")]
    allow_paths: Vec<PathBuf>,

    /// A NATS server or Kafka broker jobs' network connectors may reach:
    /// HOST (any port), HOST:PORT ([V6]:PORT), or * (any address).
    /// Repeatable [default: any address].
    #[arg(long = "allow-address", value_name = "HOST[:PORT]")]
    allow_addresses: Vec<String>,

    /// Serve each TaskManager's Prometheus metrics (as `weir taskmanager
    /// --metrics`): TaskManager N at ADDR's port + N - 1, or each at a
    /// free port when the port is 0. No token; the addresses are printed
    /// at start.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,

    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create a cluster CA, the JobManager's certificate and one
    /// certificate per TaskManager, each naming its id.
    Init(ClusterInitArgs),
    /// Issue (or renew) certificates from the CA in DIR: add a
    /// TaskManager, or renew certificates before they expire.
    Issue(ClusterIssueArgs),
    /// Re-issue every node certificate in DIR (jobmanager, taskmanager-ID)
    /// with new keys from the same CA; restart the daemons afterwards.
    Rotate(ClusterRotateArgs),
    /// Revoke TaskManagers' current certificates (a stolen key): writes
    /// DIR/crl.pem, signed by the CA, listing every revocation so far.
    /// Copy crl.pem into every node's --certs folder and restart the
    /// daemons: both ends of every handshake then refuse the revoked
    /// certificates. `weir cluster issue DIR --taskmanager ID` gives a
    /// revoked TaskManager a new one.
    Revoke(ClusterRevokeArgs),
}

#[derive(Debug, Args)]
pub struct ClusterRevokeArgs {
    /// Directory made by `weir cluster init` (holding ca.pem and ca.key).
    dir: PathBuf,

    /// The TaskManager whose current certificate (DIR/taskmanager-ID.pem)
    /// is revoked. Repeatable.
    #[arg(long = "taskmanager", value_name = "ID", required = true)]
    taskmanagers: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ClusterRotateArgs {
    /// Directory made by `weir cluster init` (holding ca.pem and ca.key).
    dir: PathBuf,

    /// Days the new certificates are valid.
    #[arg(long, value_name = "DAYS", default_value_t = weir_host::net::tls::DEFAULT_VALID_DAYS)]
    valid_days: u32,

    /// A host name or IP address the JobManager's REST API is reached at
    /// over TLS (`weir jobmanager --rest-tls`), written into its
    /// certificate beside localhost, 127.0.0.1 and ::1. Repeatable.
    #[arg(long = "rest-name", value_name = "HOST")]
    rest_names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ClusterInitArgs {
    /// Directory to write ca.pem, ca.key, jobmanager.{pem,key} and
    /// taskmanager-ID.{pem,key} into. Keep ca.key secret.
    dir: PathBuf,

    /// Issue a certificate for the TaskManager with this id (lowercase
    /// letters, digits and `-`). Repeatable.
    #[arg(long = "taskmanager", value_name = "ID")]
    taskmanagers: Vec<String>,

    /// Days the JobManager's and TaskManagers' certificates are valid.
    #[arg(long, value_name = "DAYS", default_value_t = weir_host::net::tls::DEFAULT_VALID_DAYS)]
    valid_days: u32,

    /// A host name or IP address the JobManager's REST API is reached at
    /// over TLS (`weir jobmanager --rest-tls`), written into its
    /// certificate beside localhost, 127.0.0.1 and ::1. Repeatable.
    #[arg(long = "rest-name", value_name = "HOST")]
    rest_names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ClusterIssueArgs {
    /// Directory made by `weir cluster init` (holding ca.pem and ca.key).
    dir: PathBuf,

    /// Issue (replace) the certificate of the TaskManager with this id.
    /// Repeatable.
    #[arg(long = "taskmanager", value_name = "ID")]
    taskmanagers: Vec<String>,

    /// Issue (replace) the JobManager's certificate.
    #[arg(long)]
    jobmanager: bool,

    /// Days the new certificates are valid.
    #[arg(long, value_name = "DAYS", default_value_t = weir_host::net::tls::DEFAULT_VALID_DAYS)]
    valid_days: u32,

    /// A host name or IP address the JobManager's REST API is reached at
    /// over TLS (`weir jobmanager --rest-tls`), written into its
    /// certificate beside localhost, 127.0.0.1 and ::1. Repeatable.
    #[arg(long = "rest-name", value_name = "HOST")]
    rest_names: Vec<String>,
}

/// Where a daemon keeps its data when not told (`--data-dir`).
pub(crate) fn default_data_dir(role: &str) -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("weir").join(role)
}

/// The REST token file of a JobManager started without `--data-dir`: the
/// client commands' last resort.
pub(crate) fn default_rest_token_file() -> PathBuf {
    default_data_dir("jobmanager").join(TOKEN_FILE)
}

/// The identity in `certs` named `name` (overridden by --node-name).
fn identity(certs: &CertArgs, role: &str, name: &str) -> Result<NodeIdentity, Failure> {
    let name = certs.node_name.as_deref().unwrap_or(name);
    NodeIdentity::load(&certs.certs, name)
        .with_context(|| {
            format!(
                "cannot load the {role}'s certificate `{name}` from {0} (create the folder \
                 with `weir cluster init {0}`, add a certificate with `weir cluster issue {0}`)",
                certs.certs.display()
            )
        })
        .map_err(bad_input)
}

/// The addresses `--allow-address` flags name, or `default` without any;
/// `hint` ends refusals.
pub fn allowed_addresses(
    rules: &[String],
    default: AllowedAddresses,
    hint: &str,
) -> Result<AllowedAddresses, Failure> {
    let addresses = if rules.is_empty() {
        default
    } else {
        AllowedAddresses::parse(rules)
            .map_err(|e| bad_input(anyhow::anyhow!("--allow-address {e}")))?
    };
    Ok(addresses.with_hint(hint))
}

/// The roots a daemon's `--allow-path` flags name; `hint` ends refusals.
pub fn allowed_roots(dirs: &[PathBuf], hint: &str) -> Result<AllowedRoots, Failure> {
    AllowedRoots::new(dirs)
        .map(|roots| roots.with_hint(hint))
        .context("--allow-path")
        .map_err(bad_input)
}

fn wasm_runtime(data_dir: &Path) -> Result<Arc<Runtime>, Failure> {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(data_dir.join("cache")),
    })
    .map(Arc::new)
    .map_err(failed)
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn ready(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub fn jobmanager(args: JobManagerArgs) -> Result<(), Failure> {
    let auth = args.rest_auth.auth(args.rest)?;
    if args.rest_read_timeout_ms == 0 {
        return Err(bad_input(anyhow::anyhow!(
            "--rest-read-timeout-ms must be at least 1"
        )));
    }
    if args.rest_upload_timeout_ms == 0 {
        return Err(bad_input(anyhow::anyhow!(
            "--rest-upload-timeout-ms must be at least 1"
        )));
    }
    if args.heartbeat_interval_ms == 0 || args.heartbeat_timeout_ms <= args.heartbeat_interval_ms {
        return Err(bad_input(anyhow::anyhow!(
            "--heartbeat-timeout-ms ({}) must be larger than --heartbeat-interval-ms ({}), which must be > 0",
            args.heartbeat_timeout_ms,
            args.heartbeat_interval_ms
        )));
    }
    let roots = allowed_roots(
        &args.allow_paths,
        "the JobManager allows only the directories given with --allow-path",
    )?
    .with_addresses(allowed_addresses(
        &args.allow_addresses,
        AllowedAddresses::none(),
        "the JobManager allows only the addresses given with --allow-address",
    )?);
    let id = identity(&args.certs, "jobmanager", "jobmanager")?;
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| default_data_dir("jobmanager"));
    // Absolute: TaskManagers receive the checkpoint directory under it.
    let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
    let wasm = wasm_runtime(&data_dir)?;
    let rt = tokio_runtime()?;
    rt.block_on(async move {
        let mut config = JobManagerConfig::new(args.rpc, args.rest, data_dir, id);
        config.heartbeat_interval = Duration::from_millis(args.heartbeat_interval_ms);
        config.heartbeat_timeout = Duration::from_millis(args.heartbeat_timeout_ms);
        config.scheduling = args.scheduling;
        config.max_module_bytes = args.max_module_mb << 20;
        config.rest_auth = auth.clone();
        config.rest_read_timeout = Duration::from_millis(args.rest_read_timeout_ms);
        config.rest_upload_timeout = Duration::from_millis(args.rest_upload_timeout_ms);
        config.rest_tls = args.rest_tls;
        config.max_job_state_bytes = args.max_job_state_mb.map(|mb| mb << 20);
        config.checkpoint_dir = args
            .checkpoint_dir
            .map(|d| std::path::absolute(&d).unwrap_or(d));
        config.allowed_roots = roots;
        let jm = jobmanager::start(config, wasm)
            .await
            .map_err(start_failure)?;
        announce_token(&jm);
        announce_recovered(&jm.recovered);
        ready(format!(
            "jobmanager ready: rpc {} rest {}://{} {}",
            jm.rpc_address,
            if args.rest_tls { "https" } else { "http" },
            jm.rest_address,
            token_words(&jm, &auth)
        ));
        shutdown_signal().await;
        eprintln!("jobmanager stopping");
        jm.shutdown().await;
        Ok(())
    })
}

/// Says on stderr which jobs a restarted JobManager took back, and from
/// which checkpoint, or why not.
fn announce_recovered(jobs: &[jobmanager::RecoveredJob]) {
    for job in jobs {
        match (&job.failure, job.checkpoint) {
            (Some(why), _) => eprintln!("job {} ({}): {why}", job.id, job.name),
            (None, Some(n)) => eprintln!(
                "job {} ({}) taken back: it restarts from checkpoint {n} once TaskManagers register",
                job.id, job.name
            ),
            (None, None) => eprintln!(
                "job {} ({}) taken back: it restarts once TaskManagers register",
                job.id, job.name
            ),
        }
    }
}

pub fn taskmanager(args: TaskManagerArgs) -> Result<(), Failure> {
    if args.slots == 0 {
        return Err(bad_input(anyhow::anyhow!("--slots must be at least 1")));
    }
    let roots = allowed_roots(
        &args.allow_paths,
        "the TaskManager allows only the directories given with --allow-path",
    )?
    .with_addresses(allowed_addresses(
        &args.allow_addresses,
        AllowedAddresses::none(),
        "the TaskManager allows only the addresses given with --allow-address",
    )?);
    let name = match (&args.id, &args.certs.node_name) {
        (Some(id), _) => format!("taskmanager-{id}"),
        (None, Some(name)) => name.clone(),
        (None, None) => {
            return Err(bad_input(anyhow::anyhow!(
                "give --id ID (its certificate is taskmanager-ID.pem in --certs) or \
                 --node-name NAME"
            )));
        }
    };
    let id = identity(&args.certs, "taskmanager", &name)?;
    let net = args.net.config()?;
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| default_data_dir("taskmanager"));
    let wasm = wasm_runtime(&data_dir)?;
    let rt = tokio_runtime()?;
    rt.block_on(async move {
        let config = TaskManagerConfig {
            id: args.id,
            jobmanager: args.jobmanager,
            slots: args.slots,
            data_dir,
            identity: id,
            bind: args.bind,
            net,
            allowed_roots: roots,
            metrics: args.metrics,
        };
        let jobmanager = config.jobmanager;
        let slots = config.slots;
        let tm = daemon::start(config, wasm).await.map_err(failed)?;
        eprintln!(
            "taskmanager {} (data {}, {slots} slots): connecting to jobmanager {jobmanager}",
            tm.id, tm.data_address
        );
        if let Some(metrics) = tm.metrics_address {
            ready(format!(
                "taskmanager {} metrics http://{metrics}/metrics",
                tm.id
            ));
        }
        let mut registrations = tm.registrations();
        let (tm_id, data) = (tm.id.clone(), tm.data_address);
        let announce = tokio::spawn(async move {
            let mut seen = 0;
            while registrations.changed().await.is_ok() {
                let n = *registrations.borrow();
                if n > seen {
                    seen = n;
                    ready(format!(
                        "taskmanager {tm_id} registered with {jobmanager} (data {data}, {slots} slots)"
                    ));
                }
            }
        });
        shutdown_signal().await;
        eprintln!("taskmanager stopping");
        announce.abort();
        tm.shutdown().await;
        Ok(())
    })
}

pub fn local(args: LocalArgs) -> Result<(), Failure> {
    if args.taskmanagers == 0 || args.slots == 0 {
        return Err(bad_input(anyhow::anyhow!(
            "--taskmanagers and --slots must be at least 1"
        )));
    }
    let net = args.net.config()?;
    let auth = args.rest_auth.auth(args.rest)?;
    let roots = if args.allow_paths.is_empty() {
        allowed_roots(
            &[PathBuf::from(".")],
            "weir local allows its working directory, or the directories given with --allow-path",
        )?
    } else {
        allowed_roots(
            &args.allow_paths,
            "weir local allows only the directories given with --allow-path",
        )?
    }
    .with_addresses(allowed_addresses(
        &args.allow_addresses,
        AllowedAddresses::any(),
        "weir local allows only the addresses given with --allow-address",
    )?);
    let (data_dir, _temp) = match &args.data_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = private_temp_dir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    // One certificate per daemon, as on a cluster: each TaskManager's
    // names its id.
    let ca = ClusterCa::generate().map_err(failed)?;
    let jm_id = ca.issue_jobmanager().map_err(failed)?;
    let tm_ids = (1..=args.taskmanagers)
        .map(|i| ca.issue_taskmanager(&format!("tm-{i}")).map_err(failed))
        .collect::<Result<Vec<_>, _>>()?;
    let wasm = wasm_runtime(&data_dir)?;
    let rt = tokio_runtime()?;
    rt.block_on(async move {
        let rpc: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
        let mut config = JobManagerConfig::new(rpc, args.rest, data_dir.join("jobmanager"), jm_id);
        config.rest_auth = auth.clone();
        config.allowed_roots = roots.clone();
        let jm = jobmanager::start(config, wasm.clone())
            .await
            .map_err(start_failure)?;
        announce_token(&jm);
        announce_recovered(&jm.recovered);
        let mut tms = Vec::new();
        for (i, tm_id) in (0..args.taskmanagers).zip(tm_ids) {
            // Each TaskManager gets the endpoint this process binds for it
            // (any free port on loopback).
            let any: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
            let endpoint = weir_host::net::tls::endpoint(any, &tm_id).map_err(failed)?;
            let config = TaskManagerConfig {
                id: Some(format!("tm-{}", i + 1)),
                jobmanager: jm.rpc_address,
                slots: args.slots,
                data_dir: data_dir.join(format!("taskmanager-{}", i + 1)),
                identity: tm_id,
                bind: any,
                net,
                allowed_roots: roots.clone(),
                metrics: args.metrics.map(|mut a| {
                    if a.port() != 0 {
                        a.set_port(a.port().saturating_add(i as u16));
                    }
                    a
                }),
            };
            let mut tm = daemon::serve(endpoint, config, wasm.clone())
                .await
                .map_err(failed)?;
            if let Some(metrics) = tm.metrics_address {
                eprintln!("taskmanager {} metrics http://{metrics}/metrics", tm.id);
            }
            tm.registered(1).await;
            tms.push(tm);
        }
        let try_submit = match &jm.rest_token_file {
            Some(file) => format!(
                "WEIR_REST_TOKEN_FILE={} weir submit JOB.toml --jobmanager http://{}",
                file.display(),
                jm.rest_address
            ),
            None => format!(
                "weir submit JOB.toml --jobmanager http://{}",
                jm.rest_address
            ),
        };
        ready(format!(
            "local cluster ready: rest http://{} {} ({} taskmanagers x {} slots); \
             try `{try_submit}`; Ctrl-C stops it",
            jm.rest_address,
            token_words(&jm, &auth),
            args.taskmanagers,
            args.slots,
        ));
        shutdown_signal().await;
        eprintln!("local cluster stopping");
        for tm in tms {
            tm.shutdown().await;
        }
        jm.shutdown().await;
        Ok(())
    })
}

/// A fresh folder for `weir local`'s data, removed on exit: a random name
/// created exclusively with mode 0700, so another user can neither have
/// made it first nor read or change the keys, modules and compiled code in
/// it.
fn private_temp_dir() -> Result<tempfile::TempDir, Failure> {
    tempfile::Builder::new()
        .prefix("weir-local-")
        .tempdir()
        .context("cannot create a temporary data directory")
        .map_err(failed)
}

pub fn cluster(command: ClusterCommand) -> Result<(), Failure> {
    match command {
        ClusterCommand::Init(args) => {
            let files = init_cluster_dir(
                &args.dir,
                &args.taskmanagers,
                args.valid_days,
                &args.rest_names,
            )
            .map_err(bad_input)?;
            for f in &files {
                println!("wrote {}", f.display());
            }
            println!(
                "start the daemons with --certs {} (or WEIR_CERTS), each TaskManager with its \
                 --id; keep ca.key secret",
                args.dir.display()
            );
            Ok(())
        }
        ClusterCommand::Issue(args) => {
            if !args.jobmanager && args.taskmanagers.is_empty() {
                return Err(bad_input(anyhow::anyhow!(
                    "nothing to issue: give --taskmanager ID and/or --jobmanager"
                )));
            }
            let files = issue_in_cluster_dir(
                &args.dir,
                args.jobmanager,
                &args.taskmanagers,
                args.valid_days,
                &args.rest_names,
            )
            .map_err(bad_input)?;
            for f in &files {
                println!("wrote {}", f.display());
            }
            println!("restart the daemons whose certificates were replaced");
            Ok(())
        }
        ClusterCommand::Revoke(args) => {
            let files = weir_host::net::tls::revoke_in_cluster_dir(&args.dir, &args.taskmanagers)
                .map_err(bad_input)?;
            for f in &files {
                println!("wrote {}", f.display());
            }
            println!(
                "copy crl.pem into every node's certificate folder and restart the daemons; \
                 issue new certificates with `weir cluster issue {} --taskmanager ID`",
                args.dir.display()
            );
            Ok(())
        }
        ClusterCommand::Rotate(args) => {
            let files = rotate_cluster_dir(&args.dir, args.valid_days, &args.rest_names)
                .map_err(bad_input)?;
            for f in &files {
                println!("wrote {}", f.display());
            }
            println!("copy the new files to their nodes and restart the daemons");
            Ok(())
        }
    }
}
