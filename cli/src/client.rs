//! The cluster client commands of `weir`: `upload`, `modules`, `submit`,
//! `list`, `status`, `cancel`, `taskmanagers`, `checkpoints`, `logs`,
//! `savepoint` and `stop`, all talking to a JobManager over its REST API
//! (`host/jobmanager/src/REST.md`), and `savepoint inspect`, which reads a
//! savepoint on this machine (`savepoint`).
//!
//! Layout: this file has the clap arguments ([`ClientCommand`]), the
//! commands, and [`rewrite_spec`] (uploading the modules a job spec names
//! by path and anchoring its relative paths); `rest` the thin blocking HTTP
//! client ([`Rest`]) that turns every failure into a [`Failure`] with its
//! exit code (the REST types are the JobManager's own, from
//! `weir_host::jobmanager`); `render` the table
//! printers and human formats. `tests` covers the pure parts without a
//! server.
//!
//! Exit codes: 0 success; 2 the request was refused (a 4xx: bad input, an
//! unknown job or module, a conflict) or the local input is bad (unreadable
//! file, malformed spec); 1 the server failed (5xx) or could not be reached.
//!
//! Nothing here calls into `weir-host`: it talks to the server over REST
//! only, and takes from `weir-host` the types of what the server answers
//! (so they cannot drift apart) and the default token file's place (from
//! `daemons`).
//!
//! The token is found without being on the command line ([`ConnectArgs`]):
//! `--rest-token` / `WEIR_REST_TOKEN`, else the file `--rest-token-file` /
//! `WEIR_REST_TOKEN_FILE`, else the token file of a JobManager started
//! without `--data-dir` on this machine
//! (`~/.local/share/weir/jobmanager/rest-token`), if there is one.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use serde_json::Value;

mod logs;
mod render;
mod rest;
mod savepoint;
#[cfg(test)]
mod tests;
mod upgrade;

pub use logs::LogsArgs;
pub(crate) use render::human_bytes;
use render::*;
pub use rest::*;
pub use savepoint::{SavepointArgs, StopArgs};
pub use upgrade::{RescaleArgs, UpgradeArgs};

/// Where the JobManager is when neither `--jobmanager` nor `WEIR_JOBMANAGER`
/// says: the default `--rest` address of `weir jobmanager`.
pub const DEFAULT_JOBMANAGER: &str = "http://127.0.0.1:8081";

/// The client commands. Flattened into the `weir` subcommands.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Upload an operator module (a Wasm component) to the JobManager.
    ///
    /// The JobManager checks that the file is a component implementing the
    /// operator contract and stores it as `name@version`; job specs then
    /// name it as `module = "name@version"`. Uploading the same bytes again
    /// is harmless (the existing version is returned).
    Upload(UploadArgs),
    /// List the modules stored on the JobManager.
    Modules(ConnectArgs),
    /// Submit a job spec (TOML) to the JobManager.
    ///
    /// Operators whose `module` is a path (it contains `/` or ends in
    /// `.wasm`) are uploaded first, named after the file (`tokenize.wasm`
    /// becomes `tokenize@<next version>`), and the spec is rewritten to
    /// name them. Relative `path`s of sources and sinks are made absolute
    /// against the spec's directory, so TaskManagers on this machine find
    /// them. The spec's comments are not sent.
    Submit(SubmitArgs),
    /// List the jobs the JobManager knows.
    List(ConnectArgs),
    /// Show a job: its state, per-vertex metrics and where its subtasks run.
    Status(JobArgs),
    /// Cancel a job: its tasks stop without draining.
    Cancel(JobArgs),
    /// List the TaskManagers registered with the JobManager.
    Taskmanagers(ConnectArgs),
    /// Show a job's checkpoints (id, status, duration, full and
    /// incremental size, alignment) and its restores.
    Checkpoints(JobArgs),
    /// Show what a job's operators logged, each line with its time, level,
    /// operator and subtask (`tokenize[0]`).
    ///
    /// Operators write these lines through the contract's `log` interface
    /// (in Rust `weir_sdk::log::info!`). Each subtask's TaskManager keeps
    /// them in a bounded ring (the newest 1000 lines and 256 KiB) and sends
    /// them to the JobManager with its heartbeats, which keeps as many per
    /// subtask for as long as it knows the job, across restarts. A subtask
    /// may log 200 lines a second (bursts of 1000): a chatty operator's
    /// lines beyond that are dropped and counted, and this command says how
    /// many. Use --json for one JSON object per line.
    Logs(LogsArgs),
    /// Take a savepoint of a running job, which keeps running
    /// (`weir savepoint JOB DIR`), or read one (`weir savepoint inspect DIR`).
    ///
    /// A savepoint holds everything the job needs to resume (keyed state
    /// in a form independent of the state backend, timers, source
    /// positions, sink commits) in a directory you own: copy it anywhere
    /// and resume from it with `weir submit JOB.toml --from-savepoint DIR`,
    /// on either state backend and with keyed operators at another
    /// parallelism. The job needs `[job.checkpoints]`; it takes no other
    /// checkpoint while the savepoint is written.
    Savepoint(SavepointArgs),
    /// Stop a job with a savepoint: its sinks commit exactly what the
    /// savepoint records, then it is canceled.
    Stop(StopArgs),
    /// Upgrade a running job in place: new modules (and --set changes),
    /// its state carried over and migrated by the new modules.
    ///
    /// Checked before anything stops: every new module must fit the
    /// contract and declare the job's states again with the same kind (a
    /// state it drops needs --allow-non-restored-state); an incompatible
    /// upgrade is refused and the job runs on. Then the job stops at a
    /// savepoint and resumes on the new version from it; a module that
    /// exports `migration` and reports another version rewrites every
    /// stored value on the way in. If the new version fails before its
    /// first checkpoint (restore, migration, `open`), the job goes back to
    /// its old modules from the same savepoint and this exits non-zero.
    /// Prints the downtime. The job needs `[job.checkpoints]`.
    Upgrade(UpgradeArgs),
    /// Change operators' parallelism (`weir rescale JOB count=4`, or
    /// `--parallelism N` for every operator): an upgrade with only
    /// `--set operator.OP.parallelism=N` (stop with a savepoint, resume
    /// rescaled, each keyed subtask taking its key groups' state). Sources
    /// and sinks keep theirs.
    Rescale(RescaleArgs),
}

/// How to reach the JobManager and how to print; every client command has
/// these.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The JobManager's REST URL (`weir jobmanager --rest`).
    #[arg(
        long,
        value_name = "URL",
        env = "WEIR_JOBMANAGER",
        default_value = DEFAULT_JOBMANAGER
    )]
    pub jobmanager: String,

    /// The token the JobManager requires, sent as `Authorization: Bearer
    /// TOKEN`. Prefer --rest-token-file: a command line is visible to other
    /// users of the machine [default: read from --rest-token-file].
    #[arg(
        long,
        value_name = "TOKEN",
        env = "WEIR_REST_TOKEN",
        hide_env_values = true
    )]
    pub rest_token: Option<String>,

    /// A file holding the token (the JobManager's DATA_DIR/rest-token)
    /// [default: ~/.local/share/weir/jobmanager/rest-token if it exists].
    #[arg(long, value_name = "FILE", env = "WEIR_REST_TOKEN_FILE")]
    pub rest_token_file: Option<PathBuf>,

    /// The cluster's CA certificate (`ca.pem` of `weir cluster init`),
    /// trusted for an https JobManager (`weir jobmanager --rest-tls`).
    #[arg(long, value_name = "FILE", env = "WEIR_CA")]
    pub ca: Option<PathBuf>,

    /// Print the server's JSON response (pretty) instead of text.
    #[arg(long)]
    pub json: bool,
}

impl ConnectArgs {
    fn rest(&self) -> Result<Rest, Failure> {
        let ca = match &self.ca {
            Some(file) => Some((
                file.as_path(),
                std::fs::read(file)
                    .with_context(|| format!("cannot read --ca {}", file.display()))
                    .map_err(Failure::refused)?,
            )),
            None => None,
        };
        Rest::new(&self.jobmanager)
            .with_token(self.token()?)
            .with_ca(ca.as_ref().map(|(f, pem)| (*f, pem.as_slice())))
    }

    /// The token to send, if any (see the module docs for the order).
    fn token(&self) -> Result<Option<String>, Failure> {
        if let Some(token) = &self.rest_token {
            if token.trim().is_empty() {
                return Err(Failure::refused(anyhow!(
                    "--rest-token (or WEIR_REST_TOKEN) is empty"
                )));
            }
            return Ok(Some(token.clone()));
        }
        if let Some(file) = &self.rest_token_file {
            return read_token(file).map(Some);
        }
        let default = crate::daemons::default_rest_token_file();
        if default.exists() {
            return read_token(&default).map(Some);
        }
        Ok(None)
    }
}

/// The token in a token file: its first line, trimmed, not empty.
fn read_token(file: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the REST token file {}", file.display()))
        .map_err(Failure::refused)?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(Failure::refused(anyhow!(
            "the REST token file {} is empty",
            file.display()
        )));
    }
    Ok(token.to_owned())
}

/// `weir upload`.
#[derive(Debug, Args)]
pub struct UploadArgs {
    /// The component to upload (.wasm).
    pub module: PathBuf,

    /// The module's name. Job specs name modules as `name@version` with
    /// `name` in `[a-z0-9][a-z0-9_-]*` (at most 64 bytes) [default: the file
    /// name without `.wasm`, lowercased].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// Its version: 1–64 of `A-Z a-z 0-9 . _ -` [default: the next integer
    /// version of the name, or the existing version if these bytes were
    /// already uploaded under it].
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// `weir submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job spec (TOML).
    pub job: PathBuf,

    /// Start from this savepoint (`weir savepoint`, `weir stop
    /// --savepoint`): sources continue from their positions, keyed
    /// operators from their state (at any parallelism), sinks commit what
    /// it recorded. Checked before the job starts: an incompatible one is
    /// refused and nothing runs.
    #[arg(long, value_name = "DIR")]
    pub from_savepoint: Option<PathBuf>,

    /// Start from this retained checkpoint (`<checkpoint dir>/<job>/chk-<n>`,
    /// as `weir checkpoints` and a failed `weir stop` name it), as from a
    /// savepoint: the JobManager writes it as one first.
    #[arg(long, value_name = "DIR", conflicts_with = "from_savepoint")]
    pub from_checkpoint: Option<PathBuf>,

    /// With --from-savepoint or --from-checkpoint: start even if it holds
    /// state that no vertex of this job takes (it is dropped).
    #[arg(long)]
    pub allow_non_restored_state: bool,

    /// Change the spec: `key=value`, as `weir run --set` takes it
    /// (`operator.count.parallelism=4`, `job.checkpoints.interval_ms=1000`).
    /// Applied by the JobManager and kept with the job (its upgrades apply
    /// them too); a module named here is not uploaded: give `name@version`.
    #[arg(long, value_name = "KEY=VALUE", value_parser = weir_host::job::parse_override)]
    pub set: Vec<(String, String)>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// `weir status` and `weir cancel`.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// The job's id (as `weir list` and `weir submit` print it).
    pub job: String,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Runs one client command.
pub fn run(command: ClientCommand) -> Result<(), Failure> {
    match command {
        ClientCommand::Upload(args) => upload(args),
        ClientCommand::Modules(args) => modules(args),
        ClientCommand::Submit(args) => submit(args),
        ClientCommand::List(args) => list(args),
        ClientCommand::Status(args) => status(args),
        ClientCommand::Cancel(args) => cancel(args),
        ClientCommand::Taskmanagers(args) => taskmanagers(args),
        ClientCommand::Checkpoints(args) => checkpoints(args),
        ClientCommand::Logs(args) => logs::logs(args),
        ClientCommand::Savepoint(args) => savepoint::savepoint(args),
        ClientCommand::Stop(args) => savepoint::stop(args),
        ClientCommand::Upgrade(args) => upgrade::upgrade(args),
        ClientCommand::Rescale(args) => upgrade::rescale(args),
    }
}

// ---------------------------------------------------------------------------
// HTTP

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("a Value serializes")
    );
}

fn upload(args: UploadArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let name = match args.name {
        Some(n) => n,
        None => module_name_for(&args.module),
    };
    let (status, v) = rest.upload(
        &args.module,
        &name,
        args.version.as_deref(),
        args.connect.json,
    )?;
    if args.connect.json {
        print_json(&v);
        return Ok(());
    }
    let m: ModuleInfo = decode(v, "module")?;
    if status == 200 {
        eprintln!(
            "(these bytes were already stored as {}@{})",
            m.name, m.version
        );
    }
    println!("{}", module_line(&m));
    Ok(())
}

fn modules(args: ConnectArgs) -> Result<(), Failure> {
    let v = args.rest()?.get("/v1/modules")?;
    if args.json {
        print_json(&v);
        return Ok(());
    }
    let modules: Vec<ModuleInfo> = decode(v, "module list")?;
    print!("{}", modules_table(&modules));
    Ok(())
}

fn submit(args: SubmitArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let text = std::fs::read_to_string(&args.job)
        .with_context(|| format!("cannot read the job spec {}", args.job.display()))
        .map_err(Failure::refused)?;
    let spec_path = std::path::absolute(&args.job).unwrap_or_else(|_| args.job.clone());
    let spec_dir = spec_path.parent().unwrap_or(Path::new("/"));
    let quiet = args.connect.json;
    let spec = rewrite_spec(&text, spec_dir, |module| {
        let name = module_name_for(module);
        let (_, v) = rest.upload(module, &name, None, quiet)?;
        let m: ModuleInfo = decode(v, "module")?;
        eprintln!(
            "uploaded {} as {}@{} ({})",
            module.display(),
            m.name,
            m.version,
            human_bytes(m.size)
        );
        Ok(format!("{}@{}", m.name, m.version))
    })
    .map_err(|f| f.context(format!("{}", args.job.display())))?;
    let set: Vec<String> = args.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut body = serde_json::json!({ "spec": spec, "set": set });
    for (field, from) in [
        ("from_savepoint", &args.from_savepoint),
        ("from_checkpoint", &args.from_checkpoint),
    ] {
        if let Some(from) = from {
            let path = std::path::absolute(from)
                .with_context(|| format!("{}", from.display()))
                .map_err(Failure::refused)?;
            body[field] = serde_json::json!({
                "path": path,
                "allow_non_restored_state": args.allow_non_restored_state,
            });
        }
    }
    let v = rest.post_json("/v1/jobs", &body)?;
    if args.connect.json {
        print_json(&v);
        return Ok(());
    }
    let job: JobCreated = decode(v, "answer")?;
    println!("submitted job {} ({})", job.id, job.name);
    Ok(())
}

/// Whether a spec's `module` value is a file path (to upload) rather than a
/// reference to a stored module (`name`, `name@version`, `sha256:<hex>`):
/// it contains a path separator or ends in `.wasm`.
pub fn is_module_path(module: &str) -> bool {
    !module.starts_with("sha256:")
        && (module.contains('/') || module.contains('\\') || module.ends_with(".wasm"))
}

/// The module name an uploaded file gets: its stem in the form a job spec
/// accepts in `name@version` (`[a-z0-9][a-z0-9_-]*`, at most 64 bytes):
/// lowercased, other characters replaced by `-` (`My Op.wasm` → `my-op`).
pub fn module_name_for(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = name.trim_start_matches(['-', '_']).to_owned();
    name.truncate(64);
    if name.is_empty() {
        name.push_str("module");
    }
    name
}

/// Prepares a job spec for the cluster: every `[[operator]]` whose `module`
/// is a path ([`is_module_path`]) is resolved against `spec_dir` and handed
/// to `upload`, which returns the `name@version` written in its place (a file
/// named by several operators is uploaded once); relative `path`s of
/// `[[source]]` and `[[sink]]` tables become absolute under `spec_dir`.
/// Returns the rewritten TOML (comments and layout are not kept).
pub fn rewrite_spec(
    text: &str,
    spec_dir: &Path,
    mut upload: impl FnMut(&Path) -> Result<String, Failure>,
) -> Result<String, Failure> {
    let mut doc: toml::Table = toml::from_str(text)
        .context("not a valid TOML document")
        .map_err(Failure::refused)?;
    let mut uploaded: HashMap<PathBuf, String> = HashMap::new();
    for (i, op) in tables_mut(&mut doc, "operator")?.into_iter().enumerate() {
        let id = vertex_name(op, "operator", i);
        let Some(module) = op.get("module") else {
            continue; // the server names what is missing
        };
        let module = module
            .as_str()
            .ok_or_else(|| Failure::refused(anyhow!("{id}: `module` must be a string")))?;
        if !is_module_path(module) {
            continue;
        }
        let path = spec_dir.join(module);
        let reference = match uploaded.get(&path) {
            Some(r) => r.clone(),
            None => {
                if !path.is_file() {
                    return Err(Failure::refused(anyhow!(
                        "{id}: module {} does not exist",
                        path.display()
                    )));
                }
                let r = upload(&path).map_err(|f| f.context(format!("{id}: {module}")))?;
                uploaded.insert(path, r.clone());
                r
            }
        };
        op.insert("module".into(), toml::Value::String(reference));
    }
    for kind in ["source", "sink"] {
        for (i, t) in tables_mut(&mut doc, kind)?.into_iter().enumerate() {
            let id = vertex_name(t, kind, i);
            let Some(p) = t.get("path") else { continue };
            let p = p
                .as_str()
                .ok_or_else(|| Failure::refused(anyhow!("{id}: `path` must be a string")))?;
            let absolute = spec_dir.join(p);
            let absolute = absolute.to_str().ok_or_else(|| {
                Failure::refused(anyhow!(
                    "{id}: path {} is not valid UTF-8",
                    absolute.display()
                ))
            })?;
            t.insert("path".into(), toml::Value::String(absolute.to_owned()));
        }
    }
    toml::to_string(&doc)
        .context("cannot write the rewritten spec")
        .map_err(Failure::failed)
}

/// The `[[kind]]` tables of the document (none if absent).
fn tables_mut<'a>(
    doc: &'a mut toml::Table,
    kind: &str,
) -> Result<Vec<&'a mut toml::Table>, Failure> {
    match doc.get_mut(kind) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items
            .iter_mut()
            .map(|v| {
                v.as_table_mut().ok_or_else(|| {
                    Failure::refused(anyhow!("`{kind}` must be an array of tables ([[{kind}]])"))
                })
            })
            .collect(),
        Some(_) => Err(Failure::refused(anyhow!(
            "`{kind}` must be an array of tables ([[{kind}]])"
        ))),
    }
}

/// "operator `count`", or "operator #2" when it has no id.
fn vertex_name(t: &toml::Table, kind: &str, index: usize) -> String {
    match t.get("id").and_then(toml::Value::as_str) {
        Some(id) => format!("{kind} `{id}`"),
        None => format!("{kind} #{}", index + 1),
    }
}

fn list(args: ConnectArgs) -> Result<(), Failure> {
    let v = args.rest()?.get("/v1/jobs")?;
    if args.json {
        print_json(&v);
        return Ok(());
    }
    let jobs: Vec<JobSummary> = decode(v, "job list")?;
    print!("{}", jobs_table(&jobs, now_ms()));
    Ok(())
}

fn status(args: JobArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let v = rest.get(&format!("/v1/jobs/{}", path_segment(&args.job)))?;
    if args.connect.json {
        print_json(&v);
        return Ok(());
    }
    let job: JobDetail = decode(v, "job")?;
    print!("{}", job_report(&job, now_ms()));
    Ok(())
}

fn cancel(args: JobArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let v = rest.post_empty(&format!("/v1/jobs/{}/cancel", path_segment(&args.job)))?;
    if args.connect.json {
        print_json(&v);
        return Ok(());
    }
    let job: JobSummary = decode(v, "job")?;
    println!("job {} ({}): {}", job.id, job.name, job.state.as_str());
    Ok(())
}

fn taskmanagers(args: ConnectArgs) -> Result<(), Failure> {
    let v = args.rest()?.get("/v1/taskmanagers")?;
    if args.json {
        print_json(&v);
        return Ok(());
    }
    let tms: Vec<TaskManagerInfo> = decode(v, "TaskManager list")?;
    print!("{}", taskmanagers_table(&tms));
    Ok(())
}

fn checkpoints(args: JobArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let v = rest.get(&format!("/v1/jobs/{}/checkpoints", path_segment(&args.job)))?;
    if args.connect.json {
        print_json(&v);
        return Ok(());
    }
    let view: CheckpointsView = decode(v, "checkpoint history")?;
    if !view.enabled {
        println!(
            "job {} takes no checkpoints (no [job.checkpoints] in its spec)",
            args.job
        );
        return Ok(());
    }
    let rows = view
        .history
        .iter()
        .map(|c| {
            vec![
                c.id.to_string(),
                c.status.as_str().to_owned(),
                utc_time(c.triggered_at_ms),
                c.duration_ms
                    .map(|d| format!("{d} ms"))
                    .unwrap_or_else(|| "-".into()),
                format!("{}/{}", c.acked, c.total),
                human_bytes(c.full_size),
                human_bytes(c.incremental_size),
                format!("{} ms", c.max_alignment_ms),
                c.failure.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "ID",
                "STATUS",
                "TRIGGERED (UTC)",
                "DURATION",
                "ACKED",
                "FULL",
                "INCREMENTAL",
                "ALIGNMENT",
                "FAILURE",
            ],
            &[
                Align::Right,
                Align::Left,
                Align::Left,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Left,
            ],
            rows,
        )
    );
    if view.restores.is_empty() {
        println!("\nno restores");
    } else {
        println!("\nRESTORES");
        for r in &view.restores {
            let mut from = r
                .checkpoint
                .map(|c| format!("checkpoint {c}"))
                .unwrap_or_else(|| "scratch (no checkpoint yet)".into());
            if !r.skipped.is_empty() {
                let skipped: Vec<String> = r.skipped.iter().map(u64::to_string).collect();
                from.push_str(&format!(
                    " (fell back: checkpoint {} could not be restored)",
                    skipped.join(", ")
                ));
            }
            println!(
                "  attempt {} at {} from {from}",
                r.attempt,
                utc_time(r.at_ms)
            );
        }
    }
    Ok(())
}
