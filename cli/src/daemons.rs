//! The daemon commands: `weir jobmanager`, `weir taskmanager`, `weir local`
//! and `weir cluster init|issue` (certificates: one per daemon, see
//! `weir_host::net::tls`).
//!
//! Each daemon prints one readiness line on stdout once it can be used
//! (scripts and tests wait for it instead of sleeping), logs to stderr, and
//! runs until SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use weir_host::jobmanager::scheduler::Strategy;
use weir_host::jobmanager::{self, JobManagerConfig};
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

    /// Where the REST API listens (HTTP). A non-loopback address needs
    /// --rest-token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    rest: SocketAddr,

    /// Require `Authorization: Bearer TOKEN` on every REST request.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "WEIR_REST_TOKEN",
        hide_env_values = true
    )]
    rest_token: Option<String>,

    /// Module store and compiled-component cache [default: ~/.local/share/weir/jobmanager].
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

    /// Checkpoint storage: a directory every TaskManager can reach at the
    /// same path (local disk for one machine, else a shared filesystem)
    /// [default: DATA_DIR/checkpoints].
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
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
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    rest: SocketAddr,

    /// Data directories of the JobManager and TaskManagers [default: a
    /// fresh temporary directory, removed on exit].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

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
}

#[derive(Debug, Args)]
pub struct ClusterRotateArgs {
    /// Directory made by `weir cluster init` (holding ca.pem and ca.key).
    dir: PathBuf,

    /// Days the new certificates are valid.
    #[arg(long, value_name = "DAYS", default_value_t = weir_host::net::tls::DEFAULT_VALID_DAYS)]
    valid_days: u32,
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
}

fn default_data_dir(role: &str) -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("weir").join(role)
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
    if !args.rest.ip().is_loopback() && args.rest_token.is_none() {
        return Err(bad_input(anyhow::anyhow!(
            "--rest {} is not a loopback address: set --rest-token (or WEIR_REST_TOKEN) so that \
             only holders of the token can submit jobs",
            args.rest
        )));
    }
    if args.heartbeat_interval_ms == 0 || args.heartbeat_timeout_ms <= args.heartbeat_interval_ms {
        return Err(bad_input(anyhow::anyhow!(
            "--heartbeat-timeout-ms ({}) must be larger than --heartbeat-interval-ms ({}), which must be > 0",
            args.heartbeat_timeout_ms,
            args.heartbeat_interval_ms
        )));
    }
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
        config.rest_token = args.rest_token;
        config.checkpoint_dir = args
            .checkpoint_dir
            .map(|d| std::path::absolute(&d).unwrap_or(d));
        let jm = jobmanager::start(config, wasm).await.map_err(failed)?;
        ready(format!(
            "jobmanager ready: rpc {} rest http://{}",
            jm.rpc_address, jm.rest_address
        ));
        shutdown_signal().await;
        eprintln!("jobmanager stopping");
        jm.shutdown().await;
        Ok(())
    })
}

pub fn taskmanager(args: TaskManagerArgs) -> Result<(), Failure> {
    if args.slots == 0 {
        return Err(bad_input(anyhow::anyhow!("--slots must be at least 1")));
    }
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
        };
        let jobmanager = config.jobmanager;
        let slots = config.slots;
        let tm = daemon::start(config, wasm).await.map_err(failed)?;
        eprintln!(
            "taskmanager {} (data {}, {slots} slots): connecting to jobmanager {jobmanager}",
            tm.id, tm.data_address
        );
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
        let config = JobManagerConfig::new(rpc, args.rest, data_dir.join("jobmanager"), jm_id);
        let jm = jobmanager::start(config, wasm.clone())
            .await
            .map_err(failed)?;
        let mut tms = Vec::new();
        for (i, tm_id) in (0..args.taskmanagers).zip(tm_ids) {
            let config = TaskManagerConfig {
                id: Some(format!("tm-{}", i + 1)),
                jobmanager: jm.rpc_address,
                slots: args.slots,
                data_dir: data_dir.join(format!("taskmanager-{}", i + 1)),
                identity: tm_id,
                bind: "127.0.0.1:0".parse().expect("valid address"),
                net,
            };
            let mut tm = daemon::start(config, wasm.clone()).await.map_err(failed)?;
            tm.registered(1).await;
            tms.push(tm);
        }
        ready(format!(
            "local cluster ready: rest http://{} ({} taskmanagers x {} slots); \
             try `weir submit JOB.toml --jobmanager http://{}`; Ctrl-C stops it",
            jm.rest_address, args.taskmanagers, args.slots, jm.rest_address
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
            let files = init_cluster_dir(&args.dir, &args.taskmanagers, args.valid_days)
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
            )
            .map_err(bad_input)?;
            for f in &files {
                println!("wrote {}", f.display());
            }
            println!("restart the daemons whose certificates were replaced");
            Ok(())
        }
        ClusterCommand::Rotate(args) => {
            let files = rotate_cluster_dir(&args.dir, args.valid_days).map_err(bad_input)?;
            for f in &files {
                println!("wrote {}", f.display());
            }
            println!("copy the new files to their nodes and restart the daemons");
            Ok(())
        }
    }
}
