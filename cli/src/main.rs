//! `weir`: run, validate and inspect stream jobs whose operators are
//! WebAssembly components; run the cluster daemons; talk to a JobManager.
//!
//! The binary is thin: argument parsing and printing. Everything it does is a
//! call into `weir-host`.
//!
//! Exit codes: 0 success; 1 the job failed while running, or the JobManager
//! failed (5xx) or could not be reached; 2 bad input (the command line, the
//! job spec, a module that cannot be used, a request the JobManager refused
//! with a 4xx).

mod build;
mod client;
mod daemons;
mod scaffold;
mod toolchain;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use weir_host::checkpoint::coordinator::CheckpointStatus;
use weir_host::embedded::{EmbeddedCluster, EmbeddedConfig};
use weir_host::job::{JobGraph, SinkSpec, VertexKind, parse_override};
use weir_host::jobmanager::{ApiError, CheckpointsView, JobDetail, JobState};
use weir_host::local::{LocalCluster, RunError, default_work_dir};
use weir_host::net::NetConfig;
use weir_host::wasm::{OperatorInfo, Runtime, RuntimeConfig, StateKind};

/// Weir: a stream processor with WebAssembly operators.
///
/// Operators are Wasm components built against the contract in `wit/`
/// (package weir:operator@0.1.1; components built against any 0.1.x run). A job spec (TOML) wires sources,
/// operators and sinks into a graph; `weir run` executes it on an embedded
/// local cluster.
#[derive(Debug, Parser)]
#[command(name = "weir", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Log more (-v: debug, -vv: trace). `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a job on the embedded local cluster and print a summary.
    ///
    /// A bounded job ends when its sources end. An unbounded one runs until
    /// Ctrl-C, which stops the sources and lets the job drain and finish
    /// cleanly (a second Ctrl-C cancels at once).
    Run(RunArgs),
    /// Check a job spec and the modules it names, without running it.
    Validate(SpecArgs),
    /// Show a component's imports, exports, declared state, and whether it
    /// fits this host's contract.
    Inspect(InspectArgs),
    /// Cluster client commands (upload, modules, submit, list, status,
    /// cancel, taskmanagers): talk to a JobManager's REST API.
    #[command(flatten)]
    Client(client::ClientCommand),
    /// Run a JobManager: TaskManager registry, scheduler, module store and
    /// REST API. Prints `jobmanager ready: rpc ADDR rest URL` when serving.
    Jobmanager(daemons::JobManagerArgs),
    /// Run a TaskManager: registers with the JobManager, offers task slots,
    /// runs subtasks, exchanges records with other TaskManagers over QUIC.
    /// Prints `taskmanager ID registered with ADDR ...` at each registration.
    Taskmanager(daemons::TaskManagerArgs),
    /// Run a JobManager and N TaskManagers in this process (real QUIC
    /// between them, certificates made in memory), for development.
    Local(daemons::LocalArgs),
    /// Cluster administration.
    #[command(subcommand)]
    Cluster(daemons::ClusterCommand),
    /// Create an operator project: source, build file, a unit test, and a
    /// job.toml that runs it (`weir build`, then `weir run job.toml`).
    New(scaffold::NewArgs),
    /// Build an operator project (Rust, Python, JavaScript or C) into a
    /// component, then check it against the contract.
    Build(build::BuildArgs),
    /// Install or list the toolchains that build operators, per language.
    #[command(subcommand)]
    Toolchain(toolchain::ToolchainCommand),
}

#[derive(Debug, Args)]
struct SpecArgs {
    /// The job spec (TOML).
    job: PathBuf,

    /// Default parallelism of every vertex (same as --set job.parallelism=N).
    #[arg(short, long, value_name = "N")]
    parallelism: Option<u32>,

    /// Override a spec value: `job.state_backend=heap`,
    /// `operator.count.parallelism=4`, `source.lines.path=/data/in.txt`.
    /// Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override)]
    overrides: Vec<(String, String)>,

    #[command(flatten)]
    cache: CacheArgs,
}

#[derive(Debug, Args)]
struct CacheArgs {
    /// Where compiled components are cached [default: $WEIR_CACHE_DIR, else
    /// ~/.cache/weir/components].
    #[arg(long, value_name = "DIR", env = "WEIR_CACHE_DIR")]
    cache_dir: Option<PathBuf>,

    /// Compile every module afresh; read and write no cache.
    #[arg(long)]
    no_cache: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    spec: SpecArgs,

    /// Where keyed state (RocksDB) of running jobs lives, in a private
    /// folder removed at the end [default: $TMPDIR/weir].
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,

    /// Where the checkpoints of a job with [job.checkpoints] go; they are
    /// kept after the run [default: .weir/checkpoints in the job spec's
    /// folder].
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,

    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,

    /// Start from this savepoint (`--savepoint-on-exit`, `weir stop
    /// --savepoint`): sources continue from their positions, keyed
    /// operators from their state (at any parallelism, on either state
    /// backend), sinks commit what it recorded. Checked before the job
    /// starts.
    #[arg(long, value_name = "DIR")]
    from_savepoint: Option<PathBuf>,

    /// Start from this retained checkpoint (`.weir/checkpoints/<job>/chk-<n>`
    /// in the spec's folder, or under --checkpoint-dir), as from a
    /// savepoint: it is written as one first.
    #[arg(long, value_name = "DIR", conflicts_with = "from_savepoint")]
    from_checkpoint: Option<PathBuf>,

    /// With --from-savepoint or --from-checkpoint: start even if it holds
    /// state no vertex of this job takes (it is dropped).
    #[arg(long)]
    allow_non_restored_state: bool,

    /// On Ctrl-C, stop the job with a savepoint in this directory (empty
    /// or absent) instead of draining it; resume with --from-savepoint.
    /// Needs [job.checkpoints].
    #[arg(long, value_name = "DIR")]
    savepoint_on_exit: Option<PathBuf>,

    /// Another directory whose files the job's file sources may read and
    /// file sinks may write, besides the job spec's folder and the current
    /// directory (symlinks resolved; regular files only). Repeatable.
    #[arg(long = "allow-path", value_name = "DIR")]
    allow_paths: Vec<PathBuf>,

    /// A NATS server or Kafka broker the job's network connectors may
    /// reach: HOST (any port), HOST:PORT ([V6]:PORT), or * (any address).
    /// Repeatable [default: any address].
    #[arg(long = "allow-address", value_name = "HOST[:PORT]")]
    allow_addresses: Vec<String>,

    /// Serve the job's Prometheus metrics at http://ADDR/metrics while it
    /// runs (as `weir taskmanager --metrics`: per vertex and subtask
    /// records, bytes, busy/idle/backpressured time, watermarks, the
    /// operators' own counters and gauges). No token; port 0 picks a free
    /// port, printed at start.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
}

#[derive(Debug, Args)]
struct InspectArgs {
    /// The component (.wasm).
    module: PathBuf,

    /// Print as JSON.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    cache: CacheArgs,
}

/// An error with the exit code it deserves.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

fn bad_input(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: 2,
        error: error.into(),
    }
}

fn failed(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: 1,
        error: error.into(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Validate(args) => validate(args),
        Command::Inspect(args) => inspect(args),
        Command::Client(command) => client::run(command).map_err(|f| Failure {
            code: f.code,
            error: f.error,
        }),
        Command::Jobmanager(args) => daemons::jobmanager(args),
        Command::Taskmanager(args) => daemons::taskmanager(args),
        Command::Local(args) => daemons::local(args),
        Command::Cluster(command) => daemons::cluster(command),
        Command::New(args) => scaffold::new(args),
        Command::Build(args) => build::build(args),
        Command::Toolchain(command) => toolchain::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info,weir=debug",
        _ => "debug,weir=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn runtime(cache: &CacheArgs) -> Result<Arc<Runtime>, Failure> {
    let cache_dir = if cache.no_cache {
        None
    } else {
        cache
            .cache_dir
            .clone()
            .or_else(RuntimeConfig::default_cache_dir)
    };
    Runtime::new(RuntimeConfig { cache_dir })
        .map(Arc::new)
        .map_err(failed)
}

fn load_graph(args: &SpecArgs) -> Result<JobGraph, Failure> {
    let mut overrides = Vec::new();
    if let Some(p) = args.parallelism {
        overrides.push(("job.parallelism".to_string(), p.to_string()));
    }
    overrides.extend(args.overrides.iter().cloned());
    let graph = JobGraph::from_file(&args.job, &overrides).map_err(bad_input)?;
    for w in &graph.warnings {
        eprintln!("warning: {w}");
    }
    graph.check_modules_exist().map_err(bad_input)?;
    Ok(graph)
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir-io")
        .build()
        .context("cannot start the async runtime")
        .map_err(failed)
}

fn classify_run_error(e: RunError) -> Failure {
    match e {
        RunError::Io { .. } | RunError::Restore(_) => failed(e),
        RunError::Operator(_) | RunError::Plan(_) => bad_input(e),
    }
}

fn run(args: RunArgs) -> Result<(), Failure> {
    let graph = load_graph(&args.spec)?;
    let wasm = runtime(&args.spec.cache)?;
    let rt = tokio_runtime()?;
    let spec_dir = graph
        .origin
        .parent()
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    // The spec's folder and the current directory, and what --allow-path adds.
    let mut dirs = vec![spec_dir.clone(), PathBuf::from(".")];
    dirs.extend(args.allow_paths.iter().cloned());
    // And the savepoints named on the command line.
    if let Some(dir) = &args.savepoint_on_exit {
        if graph.settings.checkpoints.is_none() {
            return Err(bad_input(anyhow::anyhow!(
                "--savepoint-on-exit needs [job.checkpoints] in the job spec: a savepoint \
                 rides on a checkpoint"
            )));
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the savepoint directory {}", dir.display()))
            .map_err(bad_input)?;
        dirs.push(dir.clone());
    }
    if let Some(dir) = &args.from_savepoint {
        if !dir.is_dir() {
            return Err(bad_input(anyhow::anyhow!(
                "savepoint {}: not a directory",
                dir.display()
            )));
        }
        dirs.push(dir.clone());
    }
    if let Some(dir) = &args.from_checkpoint {
        if !dir.is_dir() {
            return Err(bad_input(anyhow::anyhow!(
                "checkpoint {}: not a directory",
                dir.display()
            )));
        }
        dirs.push(dir.clone());
    }
    let from = args
        .from_savepoint
        .as_ref()
        .map(|dir| {
            std::path::absolute(dir).map(|path| {
                weir_host::jobmanager::FromSavepoint::at(path, args.allow_non_restored_state)
            })
        })
        .transpose()
        .context("the savepoint's path")
        .map_err(bad_input)?;
    let from_checkpoint = args
        .from_checkpoint
        .as_ref()
        .map(std::path::absolute)
        .transpose()
        .context("the checkpoint's path")
        .map_err(bad_input)?;
    let savepoint_on_exit = args
        .savepoint_on_exit
        .as_ref()
        .map(std::path::absolute)
        .transpose()
        .context("the savepoint's path")
        .map_err(bad_input)?;
    let roots = daemons::allowed_roots(
        &dirs,
        "weir run allows the job spec's folder, the current directory and the directories given with --allow-path",
    )?
    .with_addresses(daemons::allowed_addresses(
        &args.allow_addresses,
        weir_host::connectors::AllowedAddresses::any(),
        "weir run allows only the addresses given with --allow-address",
    )?);
    let work_root = args.work_dir.clone().unwrap_or_else(default_work_dir);
    std::fs::create_dir_all(&work_root)
        .with_context(|| format!("cannot create the work directory {}", work_root.display()))
        .map_err(failed)?;
    // Private (0700) and removed at the end, whatever happens.
    let work_dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&work_root)
        .with_context(|| format!("cannot create a directory in {}", work_root.display()))
        .map_err(failed)?;
    let checkpoint_dir = args
        .checkpoint_dir
        .clone()
        .unwrap_or_else(|| spec_dir.join(".weir").join("checkpoints"));
    let checkpoints = graph.settings.checkpoints.is_some();
    let operators = graph
        .vertices
        .iter()
        .filter(|v| v.kind.module_spec().is_some())
        .count();
    if operators > 0 {
        eprintln!("loading {operators} operator(s) (compiling where not cached)...");
    }
    let job_uses_stdout = graph
        .vertices
        .iter()
        .any(|v| matches!(v.kind, VertexKind::Sink(SinkSpec::Stdout { .. })));
    let name = graph.name.clone();
    let backend = graph.settings.state_backend;
    let stats = wasm.cache_stats();
    let outcome = rt.block_on(async {
        let mut cluster = EmbeddedCluster::start(
            EmbeddedConfig {
                work_dir: work_dir.path().to_path_buf(),
                checkpoint_dir: checkpoint_dir.clone(),
                allowed_roots: roots,
                buffer_size: NetConfig::default().buffer_size,
                slots: None,
                metrics: args.metrics,
            },
            wasm.clone(),
        )
        .map_err(failed)?;
        if let Some(address) = cluster.metrics_address() {
            eprintln!("metrics http://{address}/metrics");
        }
        let from = match from_checkpoint {
            Some(path) => {
                eprintln!(
                    "writing checkpoint {} as a savepoint to start from...",
                    path.display()
                );
                let jm = cluster.jobmanager().clone();
                let allow = args.allow_non_restored_state;
                Some(
                    tokio::task::spawn_blocking(move || jm.savepoint_from_checkpoint(&path, allow))
                        .await
                        .map_err(|e| failed(anyhow::anyhow!("{e}")))?
                        .map_err(api_failure)?,
                )
            }
            None => from,
        };
        let job = cluster.submit(graph, from).await.map_err(api_failure)?;
        // Loaded by the JobManager's check; the TaskManager shares them.
        let (hits, misses) = (
            stats.hits.load(Ordering::Relaxed),
            stats.misses.load(Ordering::Relaxed),
        );
        eprintln!("running job `{name}` ({hits} cached, {misses} compiled); Ctrl-C stops it");
        if checkpoints {
            eprintln!("checkpoints go to {}", checkpoint_dir.display());
        }
        let ctrl_c = async {
            if tokio::signal::ctrl_c().await.is_ok() {
                if let Some(dir) = &savepoint_on_exit {
                    eprintln!("stopping with a savepoint in {}...", dir.display());
                    match cluster.stop_with_savepoint(&job, dir).await {
                        Ok(view)
                            if view.status == weir_host::jobmanager::SavepointStatus::Completed =>
                        {
                            return cluster.wait(&job).await;
                        }
                        Ok(view) => eprintln!(
                            "the savepoint failed ({}); draining instead",
                            view.failure.as_deref().unwrap_or("no reason given")
                        ),
                        Err(e) => {
                            eprintln!("the savepoint failed ({}); draining instead", e.message)
                        }
                    }
                }
                eprintln!("stopping: sources end, the job drains (Ctrl-C again to cancel)...");
                cluster.stop(&job);
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("cancelling");
                    std::process::exit(130);
                }
            }
            std::future::pending::<Result<JobDetail, ApiError>>().await
        };
        let detail = tokio::select! {
            r = cluster.wait(&job) => r.map_err(api_failure)?,
            r = ctrl_c => r.map_err(api_failure)?,
        };
        // Stopped with a savepoint: the job ends when its checkpoint
        // completes, the savepoint is written after.
        let stop = detail.savepoints.iter().find(|s| s.stop).map(|s| s.id);
        let stopped_at = match stop {
            Some(number) => Some(
                cluster
                    .jobmanager()
                    .wait_savepoint(&job.id, number)
                    .await
                    .map_err(api_failure)?,
            ),
            None => None,
        };
        let history = cluster.checkpoints(&job).map_err(api_failure)?;
        cluster.shutdown();
        Ok::<_, Failure>((detail, history, hits, misses, stopped_at))
    });
    let (detail, history, hits, misses, stopped_at) = outcome?;
    if let Some(savepoint) = stopped_at {
        if savepoint.status != weir_host::jobmanager::SavepointStatus::Completed {
            return Err(failed(anyhow::anyhow!(
                "job `{name}` was stopped, but its savepoint in {} failed: {}",
                savepoint.dir,
                savepoint.failure.as_deref().unwrap_or("no reason given")
            )));
        }
        eprintln!(
            "job `{name}` stopped with a savepoint in {} ({}); resume with \
             `weir run {} --from-savepoint {}`",
            savepoint.dir,
            client::human_bytes(savepoint.bytes),
            args.spec.job.display(),
            savepoint.dir
        );
        if args.json {
            println!(
                "{}",
                serde_json::json!({ "job": name, "state": "stopped", "savepoint": savepoint })
            );
        }
        return Ok(());
    }
    if detail.summary.state != JobState::Finished {
        let failure = detail
            .summary
            .failure
            .clone()
            .unwrap_or_else(|| format!("it ended {:?}", detail.summary.state));
        return Err(failed(anyhow::anyhow!("job `{name}` failed: {failure}")));
    }
    let summary = RunSummary::new(&detail);
    let text = if args.json {
        summary_json(&summary, &detail, &history, hits, misses, backend)
    } else {
        summary_table(&summary, &history, hits, misses)
    };
    // Keep stdout for the job when it writes there.
    if job_uses_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
    Ok(())
}

/// An API error of the embedded cluster: bad input (400) exits 2.
fn api_failure(e: ApiError) -> Failure {
    let error = anyhow::anyhow!("{}", e.message);
    if e.status == 400 {
        bad_input(error)
    } else {
        failed(error)
    }
}

/// What `weir run` reports of a finished job.
struct RunSummary<'a> {
    detail: &'a JobDetail,
    elapsed: std::time::Duration,
    source_records: u64,
}

impl<'a> RunSummary<'a> {
    fn new(detail: &'a JobDetail) -> Self {
        let s = &detail.summary;
        let elapsed_ms = s.ended_at_ms.unwrap_or(s.submitted_at_ms) - s.submitted_at_ms;
        RunSummary {
            detail,
            elapsed: std::time::Duration::from_millis(elapsed_ms),
            source_records: detail
                .vertices
                .iter()
                .filter(|v| v.role == "source")
                .map(|v| v.records_out)
                .sum(),
        }
    }

    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-3)
    }
}

fn summary_table(s: &RunSummary, history: &CheckpointsView, hits: u64, misses: u64) -> String {
    let secs = s.secs();
    let mut out = format!(
        "job `{}` finished in {:.3} s: {} source records ({:.0}/s), {} task(s); \
         modules: {hits} cached, {misses} compiled\n",
        s.detail.summary.name,
        s.elapsed.as_secs_f64(),
        s.source_records,
        s.source_records as f64 / secs,
        s.detail.tasks,
    );
    if history.enabled {
        let completed = history
            .history
            .iter()
            .filter(|c| c.status == CheckpointStatus::Completed)
            .count();
        out.push_str(&format!(
            "checkpoints: {completed} completed, latest {}; restarts: {}\n",
            history
                .latest
                .map_or_else(|| "none".to_owned(), |l| l.to_string()),
            history.restores.len()
        ));
    }
    // Rates per vertex: records out of a tokenizer are words, not lines.
    out.push_str(&format!(
        "{:<24} {:<9} {:>4} {:>14} {:>14} {:>14}\n",
        "VERTEX", "ROLE", "PAR", "RECORDS IN", "RECORDS OUT", "OUT/S"
    ));
    for v in &s.detail.vertices {
        out.push_str(&format!(
            "{:<24} {:<9} {:>4} {:>14} {:>14} {:>14.0}\n",
            v.id,
            v.role,
            v.parallelism,
            v.records_in,
            v.records_out,
            v.records_out as f64 / secs
        ));
    }
    out
}

fn summary_json(
    s: &RunSummary,
    detail: &JobDetail,
    history: &CheckpointsView,
    hits: u64,
    misses: u64,
    backend: weir_host::job::StateBackendKind,
) -> String {
    let secs = s.secs();
    let v = serde_json::json!({
        "job": detail.summary.name,
        "state_backend": backend,
        "elapsed_ms": s.elapsed.as_millis() as u64,
        "source_records": s.source_records,
        "records_per_second": s.source_records as f64 / secs,
        "tasks": detail.tasks,
        "attempt": detail.attempt,
        "max_queued_batches": detail.max_queued_batches,
        "modules": { "cached": hits, "compiled": misses },
        "checkpoints": history,
        "vertices": detail.vertices.iter().map(|v| serde_json::json!({
            "id": v.id,
            "role": v.role,
            "parallelism": v.parallelism,
            "records_in": v.records_in,
            "records_out": v.records_out,
            "records_out_per_second": v.records_out as f64 / secs,
        })).collect::<Vec<_>>(),
    });
    format!("{v}\n")
}

fn validate(args: SpecArgs) -> Result<(), Failure> {
    let graph = load_graph(&args)?;
    let wasm = runtime(&args.cache)?;
    let rt = tokio_runtime()?;
    let cluster = LocalCluster::new(wasm, rt.handle().clone());
    let infos = cluster.check(&graph).map_err(classify_run_error)?;
    let tasks = weir_host::job::chain(&graph);
    println!(
        "{}: job `{}` is valid: {} vertices, {} edges, {} task(s) after chaining",
        args.job.display(),
        graph.name,
        graph.vertices.len(),
        graph.edges.len(),
        tasks.len()
    );
    for (id, info) in infos {
        println!(
            "  operator `{id}`: {} {} {}",
            info.name,
            info.version,
            state_list(&info)
        );
    }
    Ok(())
}

fn state_list(info: &OperatorInfo) -> String {
    if info.states.is_empty() {
        return if info.keyed {
            "(keyed, no state)".into()
        } else {
            "(stateless)".into()
        };
    }
    let states: Vec<String> = info
        .states
        .iter()
        .map(|s| {
            let kind = state_kind(s.kind);
            match s.ttl_ms {
                Some(ttl) => format!("{}: {kind}, ttl {ttl} ms", s.name),
                None => format!("{}: {kind}", s.name),
            }
        })
        .collect();
    format!("(keyed; state: {})", states.join(", "))
}

fn state_kind(kind: StateKind) -> &'static str {
    match kind {
        StateKind::Value => "value",
        StateKind::List => "list",
        StateKind::Map => "map",
    }
}

fn inspect(args: InspectArgs) -> Result<(), Failure> {
    let wasm = runtime(&args.cache)?;
    let i = wasm.inspect(&args.module).map_err(bad_input)?;
    if args.json {
        let contract = match &i.contract {
            Ok(info) => serde_json::json!({
                "fits": true,
                "built_against": i.contract_version(),
                "name": info.name,
                "version": info.version,
                "keyed": info.keyed,
                "states": info.states.iter().map(|s| serde_json::json!({
                    "name": s.name,
                    "kind": state_kind(s.kind),
                    "ttl_ms": s.ttl_ms,
                })).collect::<Vec<_>>(),
            }),
            Err(why) => serde_json::json!({ "fits": false, "error": why }),
        };
        println!(
            "{}",
            serde_json::json!({
                "module": args.module.display().to_string(),
                "sha256": i.hash,
                "size": i.size,
                "imports": i.imports,
                "exports": i.exports,
                "contract": contract,
            })
        );
    } else {
        println!("module:  {}", args.module.display());
        println!("sha256:  {}", i.hash);
        println!("size:    {} bytes", i.size);
        println!("imports:");
        for name in &i.imports {
            println!("  {name}");
        }
        println!("exports:");
        for name in &i.exports {
            println!("  {name}");
        }
        match &i.contract {
            Ok(info) => {
                let has = |interface: &str| {
                    i.exports
                        .iter()
                        .any(|e| weir_host::wasm::is_contract_interface(e, interface))
                };
                let world = match (has("migration"), has("two-input")) {
                    (_, true) => "two-input-operator: it can migrate state and take two inputs",
                    (true, false) => {
                        "stream-operator-with-migration: it can migrate state on upgrade"
                    }
                    (false, false) => "stream-operator",
                };
                println!(
                    "contract: fits; built against weir:operator@{} (world {world}); \
                     this host implements {}",
                    i.contract_version().unwrap_or("?"),
                    weir_host::wasm::CONTRACT_VERSION
                );
                println!("operator: {} {}", info.name, info.version);
                println!("state:    {}", state_list(info));
            }
            Err(why) => println!(
                "contract: does NOT fit weir:operator@{}: {why}",
                weir_host::wasm::CONTRACT_VERSION
            ),
        }
    }
    match i.contract {
        Ok(_) => Ok(()),
        Err(_) => Err(bad_input(anyhow::anyhow!(
            "{} does not implement weir:operator@{} (or an earlier 0.1.x)",
            args.module.display(),
            weir_host::wasm::CONTRACT_VERSION
        ))),
    }
}
