//! The cluster client commands of `weir`: `upload`, `modules`, `submit`,
//! `list`, `status`, `cancel` and `taskmanagers`, all talking to a
//! JobManager over its REST API (`host/jobmanager/src/REST.md`).
//!
//! Layout: the clap arguments ([`ClientCommand`]), a thin blocking HTTP
//! client ([`Rest`]) that turns every failure into a [`Failure`] with its exit
//! code, serde mirrors of the REST types, and pure helpers that the tests
//! cover without a server: [`rewrite_spec`] (uploading the modules a job spec
//! names by path and anchoring its relative paths) and the table printers.
//!
//! Exit codes: 0 success; 2 the request was refused (a 4xx: bad input, an
//! unknown job or module, a conflict) or the local input is bad (unreadable
//! file, malformed spec); 1 the server failed (5xx) or could not be reached.
//!
//! Nothing here talks to `weir-host`: the REST contract is the only coupling
//! to the server (and the default token file's place, from `daemons`).
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
use serde::Deserialize;
use serde_json::Value;

/// Where the JobManager is when neither `--jobmanager` nor `WEIR_JOBMANAGER`
/// says: the default `--rest` address of `weir jobmanager`.
pub const DEFAULT_JOBMANAGER: &str = "http://127.0.0.1:8081";

/// How long to wait for a TCP connection: a JobManager on this machine or
/// the LAN answers in milliseconds; a wrong address should fail quickly.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to wait for the response after the request was sent. Generous:
/// the server validates (compiles) an uploaded component before answering.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(300);

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

    /// Print the server's JSON response (pretty) instead of text.
    #[arg(long)]
    pub json: bool,
}

impl ConnectArgs {
    fn rest(&self) -> Result<Rest, Failure> {
        Ok(Rest::new(&self.jobmanager).with_token(self.token()?))
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

/// A failed command: the error to print and the exit code it deserves.
#[derive(Debug)]
pub struct Failure {
    /// 2 refused / bad input, 1 server failure / unreachable.
    pub code: u8,
    /// What went wrong, said for the user.
    pub error: anyhow::Error,
}

impl Failure {
    /// The request or the local input is wrong (exit code 2).
    pub fn refused(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 2,
            error: error.into(),
        }
    }

    /// The server failed or could not be reached (exit code 1).
    pub fn failed(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 1,
            error: error.into(),
        }
    }

    fn context(self, what: impl std::fmt::Display + Send + Sync + 'static) -> Failure {
        Failure {
            code: self.code,
            error: self.error.context(what),
        }
    }
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
    }
}

// ---------------------------------------------------------------------------
// REST types (mirrors of REST.md; lenient so that a newer server's extra or
// missing fields do not break an older client)

/// `Module`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Module {
    /// Module name.
    pub name: String,
    /// Module version.
    pub version: String,
    /// `sha256:<hex>`.
    pub hash: String,
    /// Bytes.
    pub size: u64,
    /// Unix ms.
    pub uploaded_at_ms: u64,
}

/// `JobCreated`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobCreated {
    /// Job id.
    pub id: String,
    /// Job name.
    pub name: String,
}

/// `JobSummary` and `JobDetail` (a summary has no vertices).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Job {
    /// Job id.
    pub id: String,
    /// Job name.
    pub name: String,
    /// `running`, `failing`, `canceling`, `restarting`, `finishing`, `finished`,
    /// `failed`, `canceled`.
    pub state: String,
    /// Unix ms.
    pub submitted_at_ms: u64,
    /// Unix ms, once the job ended.
    pub ended_at_ms: Option<u64>,
    /// Why the job failed.
    pub failure: Option<String>,
    /// `JobDetail` only.
    pub vertices: Vec<Vertex>,
}

/// `Vertex` of a `JobDetail`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Vertex {
    /// The vertex uid.
    pub id: String,
    /// `source`, `operator` or `sink`.
    pub role: String,
    /// Number of subtasks.
    pub parallelism: u32,
    /// Vertex state.
    pub state: String,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// Time spent working, summed over subtasks.
    pub busy_ms: u64,
    /// Time spent blocked on a full output.
    pub backpressured_ms: u64,
    /// Time spent waiting for input.
    pub idle_ms: u64,
    /// Where each subtask runs.
    pub subtasks: Vec<Subtask>,
}

/// A subtask of a `Vertex`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Subtask {
    /// 0-based subtask index.
    pub index: u32,
    /// The TaskManager id it runs on.
    pub taskmanager: String,
    /// Subtask state.
    pub state: String,
}

/// `TaskManager`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TaskManager {
    /// TaskManager id.
    pub id: String,
    /// Its data-plane (QUIC) address.
    pub data_address: String,
    /// Slots it offers.
    pub slots_total: u32,
    /// Slots not in use.
    pub slots_free: u32,
    /// `active` or `lost`.
    pub state: String,
    /// Unix ms.
    pub registered_at_ms: u64,
    /// Age of its last heartbeat.
    pub last_heartbeat_ms_ago: u64,
}

// ---------------------------------------------------------------------------
// HTTP

/// A JobManager's REST API, blocking.
pub struct Rest {
    base: String,
    agent: ureq::Agent,
    /// `Authorization: Bearer <token>` on every request when set.
    token: Option<String>,
}

impl Rest {
    /// A client for the JobManager at `url` (`http://host:port`; a bare
    /// `host:port` means http).
    pub fn new(url: &str) -> Rest {
        let url = url.trim().trim_end_matches('/');
        let base = if url.contains("://") {
            url.to_owned()
        } else {
            format!("http://{url}")
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(RESPONSE_TIMEOUT))
            .build();
        Rest {
            base,
            agent: config.into(),
            token: None,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Rest {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    fn auth<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => request.header("authorization", format!("Bearer {t}")),
            None => request,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET `path`, expecting JSON.
    pub fn get(&self, path: &str) -> Result<Value, Failure> {
        let r = self.auth(self.agent.get(self.url(path))).call();
        self.answer(r).map(|(_, v)| v)
    }

    /// POST `body` as JSON to `path`, expecting JSON.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value, Failure> {
        let r = self.auth(self.agent.post(self.url(path))).send_json(body);
        self.answer(r).map(|(_, v)| v)
    }

    /// POST with an empty body.
    pub fn post_empty(&self, path: &str) -> Result<Value, Failure> {
        let r = self.auth(self.agent.post(self.url(path))).send_empty();
        self.answer(r).map(|(_, v)| v)
    }

    /// POST /v1/modules: streams `file` (its bytes, `len` of them) with a
    /// progress bar on stderr unless `quiet`. Returns the status (201
    /// created, 200 already there) and the `Module` JSON.
    pub fn upload(
        &self,
        file: &Path,
        name: &str,
        version: Option<&str>,
        quiet: bool,
    ) -> Result<(u16, Value), Failure> {
        let f = std::fs::File::open(file)
            .with_context(|| format!("cannot open {}", file.display()))
            .map_err(Failure::refused)?;
        let len = f
            .metadata()
            .with_context(|| format!("cannot read {}", file.display()))
            .map_err(Failure::refused)?
            .len();
        let bar = if quiet || !std::io::stderr().is_terminal() {
            indicatif::ProgressBar::hidden()
        } else {
            let style = indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}",
            )
            .expect("the template is valid")
            .progress_chars("=> ");
            indicatif::ProgressBar::new(len)
                .with_style(style)
                .with_message(format!("uploading {name}"))
        };
        let mut request = self
            .auth(self.agent.post(self.url("/v1/modules")))
            .query("name", name)
            .header("content-type", "application/wasm")
            .header("content-length", len.to_string());
        if let Some(v) = version {
            request = request.query("version", v);
        }
        let body = ureq::SendBody::from_owned_reader(bar.wrap_read(f));
        let r = request.send(body);
        bar.finish_and_clear();
        self.answer(r)
    }

    /// Turns a response (or the failure to get one) into the JSON body or a
    /// [`Failure`] carrying the server's message.
    fn answer(
        &self,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<(u16, Value), Failure> {
        let mut response = r.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| self.unreachable(e))?;
        if status >= 400 {
            let mut message = error_message(status, &text);
            if status == 401 {
                message.push_str(
                    "\nhint: the token is in the JobManager's DATA_DIR/rest-token (`weir local` \
                     prints the path): point --rest-token-file or WEIR_REST_TOKEN_FILE at it",
                );
            }
            return Err(if status < 500 {
                Failure::refused(anyhow!(message))
            } else {
                Failure::failed(anyhow!(message))
            });
        }
        if text.trim().is_empty() {
            return Ok((status, Value::Null));
        }
        let value = serde_json::from_str(&text)
            .with_context(|| format!("the JobManager at {} answered with invalid JSON", self.base))
            .map_err(Failure::failed)?;
        Ok((status, value))
    }

    fn unreachable(&self, e: ureq::Error) -> Failure {
        Failure::failed(anyhow!(
            "cannot reach the JobManager at {}: {e}\n\
             hint: start one with `weir jobmanager` (or `weir local`), or point \
             --jobmanager / WEIR_JOBMANAGER at it",
            self.base
        ))
    }
}

/// The message of an error response: its `{"error": …}`, else its text, else
/// the status.
pub fn error_message(status: u16, body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body)
        && let Some(m) = v.get("error").and_then(Value::as_str)
    {
        return m.to_owned();
    }
    let body = body.trim();
    if body.is_empty() {
        format!("the JobManager answered HTTP {status}")
    } else {
        format!("the JobManager answered HTTP {status}: {body}")
    }
}

/// Percent-encodes one URL path segment (a job id or a module reference).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~@:".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn decode<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, Failure> {
    serde_json::from_value(v)
        .with_context(|| format!("cannot read the JobManager's {what}"))
        .map_err(Failure::failed)
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("a Value serializes")
    );
}

// ---------------------------------------------------------------------------
// Commands

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
    let m: Module = decode(v, "module")?;
    if status == 200 {
        eprintln!(
            "(these bytes were already stored as {}@{})",
            m.name, m.version
        );
    }
    println!("{}", module_line(&m));
    Ok(())
}

/// `name@version  sha256:…  size`.
fn module_line(m: &Module) -> String {
    format!(
        "{}@{}  {}  {}",
        m.name,
        m.version,
        m.hash,
        human_bytes(m.size)
    )
}

fn modules(args: ConnectArgs) -> Result<(), Failure> {
    let v = args.rest()?.get("/v1/modules")?;
    if args.json {
        print_json(&v);
        return Ok(());
    }
    let modules: Vec<Module> = decode(v, "module list")?;
    print!("{}", modules_table(&modules));
    Ok(())
}

fn modules_table(modules: &[Module]) -> String {
    let rows = modules
        .iter()
        .map(|m| {
            let hex = m.hash.strip_prefix("sha256:").unwrap_or(&m.hash);
            vec![
                m.name.clone(),
                m.version.clone(),
                hex.chars().take(12).collect(),
                human_bytes(m.size),
                utc_time(m.uploaded_at_ms),
            ]
        })
        .collect();
    table(
        &["NAME", "VERSION", "HASH", "SIZE", "UPLOADED (UTC)"],
        &[
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Left,
        ],
        rows,
    )
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
        let m: Module = decode(v, "module")?;
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
    let v = rest.post_json("/v1/jobs", &serde_json::json!({ "spec": spec }))?;
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
    let jobs: Vec<Job> = decode(v, "job list")?;
    print!("{}", jobs_table(&jobs, now_ms()));
    Ok(())
}

fn jobs_table(jobs: &[Job], now_ms: u64) -> String {
    let rows = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.name.clone(),
                j.state.clone(),
                utc_time(j.submitted_at_ms),
                job_duration(j, now_ms),
            ]
        })
        .collect();
    table(
        &["ID", "NAME", "STATE", "SUBMITTED (UTC)", "DURATION"],
        &[
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Right,
        ],
        rows,
    )
}

fn job_duration(j: &Job, now_ms: u64) -> String {
    let end = j.ended_at_ms.unwrap_or(now_ms);
    human_duration(end.saturating_sub(j.submitted_at_ms))
}

fn status(args: JobArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let v = rest.get(&format!("/v1/jobs/{}", path_segment(&args.job)))?;
    if args.connect.json {
        print_json(&v);
        return Ok(());
    }
    let job: Job = decode(v, "job")?;
    print!("{}", job_report(&job, now_ms()));
    Ok(())
}

fn job_report(job: &Job, now_ms: u64) -> String {
    let mut out = format!(
        "job {} `{}`: {} (submitted {} UTC, {}{})\n",
        job.id,
        job.name,
        job.state,
        utc_time(job.submitted_at_ms),
        if job.ended_at_ms.is_some() {
            "ran "
        } else {
            "running for "
        },
        job_duration(job, now_ms),
    );
    if let Some(f) = &job.failure {
        let _ = writeln!(out, "failure: {f}");
    }
    if job.vertices.is_empty() {
        return out;
    }
    out.push('\n');
    let rows = job
        .vertices
        .iter()
        .map(|v| {
            let total = v.busy_ms + v.backpressured_ms + v.idle_ms;
            vec![
                v.id.clone(),
                v.role.clone(),
                v.parallelism.to_string(),
                v.state.clone(),
                v.records_in.to_string(),
                v.records_out.to_string(),
                percent(v.busy_ms, total),
                percent(v.backpressured_ms, total),
            ]
        })
        .collect();
    use Align::*;
    out.push_str(&table(
        &[
            "VERTEX",
            "ROLE",
            "PAR",
            "STATE",
            "IN",
            "OUT",
            "BUSY%",
            "BACKPRESSURED%",
        ],
        &[Left, Left, Right, Left, Right, Right, Right, Right],
        rows,
    ));
    let rows: Vec<Vec<String>> = job
        .vertices
        .iter()
        .flat_map(|v| {
            v.subtasks.iter().map(|s| {
                vec![
                    format!("{}[{}]", v.id, s.index),
                    s.taskmanager.clone(),
                    s.state.clone(),
                ]
            })
        })
        .collect();
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &["SUBTASK", "TASKMANAGER", "STATE"],
            &[Left, Left, Left],
            rows,
        ));
    }
    out
}

fn percent(part: u64, total: u64) -> String {
    if total == 0 {
        "-".into()
    } else {
        format!("{:.0}", part as f64 * 100.0 / total as f64)
    }
}

fn cancel(args: JobArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let v = rest.post_empty(&format!("/v1/jobs/{}/cancel", path_segment(&args.job)))?;
    if args.connect.json {
        print_json(&v);
        return Ok(());
    }
    let job: Job = decode(v, "job")?;
    println!("job {} ({}): {}", job.id, job.name, job.state);
    Ok(())
}

fn taskmanagers(args: ConnectArgs) -> Result<(), Failure> {
    let v = args.rest()?.get("/v1/taskmanagers")?;
    if args.json {
        print_json(&v);
        return Ok(());
    }
    let tms: Vec<TaskManager> = decode(v, "TaskManager list")?;
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
    if v["enabled"] != serde_json::Value::Bool(true) {
        println!(
            "job {} takes no checkpoints (no [job.checkpoints] in its spec)",
            args.job
        );
        return Ok(());
    }
    let n = |c: &serde_json::Value, k: &str| c[k].as_u64().unwrap_or(0);
    let rows = v["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .map(|c| {
                    vec![
                        n(c, "id").to_string(),
                        c["status"].as_str().unwrap_or("?").to_owned(),
                        utc_time(n(c, "triggered_at_ms")),
                        c["duration_ms"]
                            .as_u64()
                            .map(|d| format!("{d} ms"))
                            .unwrap_or_else(|| "-".into()),
                        format!("{}/{}", n(c, "acked"), n(c, "total")),
                        human_bytes(n(c, "full_size")),
                        human_bytes(n(c, "incremental_size")),
                        format!("{} ms", n(c, "max_alignment_ms")),
                        c["failure"].as_str().unwrap_or("").to_owned(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
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
    let restores = v["restores"].as_array().cloned().unwrap_or_default();
    if restores.is_empty() {
        println!("\nno restores");
    } else {
        println!("\nRESTORES");
        for r in restores {
            let mut from = r["checkpoint"]
                .as_u64()
                .map(|c| format!("checkpoint {c}"))
                .unwrap_or_else(|| "scratch (no checkpoint yet)".into());
            let skipped: Vec<String> = r["skipped"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_u64().map(|c| c.to_string()))
                .collect();
            if !skipped.is_empty() {
                from.push_str(&format!(
                    " (fell back: checkpoint {} could not be restored)",
                    skipped.join(", ")
                ));
            }
            println!(
                "  attempt {} at {} from {from}",
                n(&r, "attempt"),
                utc_time(n(&r, "at_ms"))
            );
        }
    }
    Ok(())
}

fn taskmanagers_table(tms: &[TaskManager]) -> String {
    let rows = tms
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.data_address.clone(),
                format!("{}/{}", t.slots_free, t.slots_total),
                t.state.clone(),
                format!("{} ago", human_duration(t.last_heartbeat_ms_ago)),
            ]
        })
        .collect();
    table(
        &["ID", "ADDRESS", "SLOTS", "STATE", "LAST-HEARTBEAT"],
        &[
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Left,
            Align::Right,
        ],
        rows,
    )
}

// ---------------------------------------------------------------------------
// Formatting

/// Column alignment in [`table`].
#[derive(Debug, Clone, Copy)]
enum Align {
    Left,
    Right,
}

/// A plain-text table: columns two spaces apart, each as wide as its widest
/// cell, no trailing spaces.
fn table(headers: &[&str], align: &[Align], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            match align.get(i).copied().unwrap_or(Align::Left) {
                Align::Left => {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `512 B`, `1.5 KiB`, `12.0 MiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` in UTC (`-` for 0, "unknown").
fn utc_time(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let secs = ms / 1000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_are_told_from_references() {
        for path in [
            "../target/wasm32-wasip2/release/tokenize.wasm",
            "tokenize.wasm",
            "./op",
            "/abs/op.component",
        ] {
            assert!(is_module_path(path), "{path}");
        }
        for reference in [
            "tokenize@1",
            "tokenize",
            "word_count@1.0.0",
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert!(!is_module_path(reference), "{reference}");
        }
    }

    #[test]
    fn module_names_come_from_the_file_stem() {
        assert_eq!(
            module_name_for(Path::new("a/b/word_count.wasm")),
            "word_count"
        );
        assert_eq!(module_name_for(Path::new("My Op.wasm")), "my-op");
        assert_eq!(module_name_for(Path::new("fraud.v2.wasm")), "fraud-v2");
        assert_eq!(module_name_for(Path::new(".hidden.wasm")), "hidden");
        assert_eq!(module_name_for(Path::new("x/ü.wasm")), "module");
    }

    const SPEC: &str = r#"
# comment
[job]
name = "word-count"

[[source]]
id = "lines"
type = "file"
path = "../data/kjv.txt"

[[source]]
id = "gen"
type = "generator"
kind = "words"

[[operator]]
id = "tokenize"
module = "../target/tokenize.wasm"
config = { lowercase = true }

[[operator]]
id = "tokenize2"
module = "../target/tokenize.wasm"

[[operator]]
id = "count"
module = "word_count@3"
key_by = "key"

[[sink]]
id = "out"
type = "file"
path = "out/counts.txt"

[[sink]]
id = "abs"
type = "file"
path = "/tmp/abs.txt"

[[edge]]
from = "lines"
to = "tokenize"
"#;

    fn fixture() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let jobs = root.path().join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        std::fs::create_dir_all(root.path().join("target")).unwrap();
        std::fs::write(root.path().join("target/tokenize.wasm"), b"\0asm").unwrap();
        (root, jobs)
    }

    #[test]
    fn rewrite_uploads_path_modules_once_and_anchors_relative_paths() {
        let (_root, jobs) = fixture();
        let mut uploads = Vec::new();
        let out = rewrite_spec(SPEC, &jobs, |p| {
            uploads.push(p.to_owned());
            Ok("tokenize@7".into())
        })
        .unwrap_or_else(|f| panic!("{:#}", f.error));
        assert_eq!(uploads, [jobs.join("../target/tokenize.wasm")]);
        let doc: toml::Table = toml::from_str(&out).unwrap();
        let get = |kind: &str, i: usize, field: &str| {
            doc[kind].as_array().unwrap()[i].as_table().unwrap()[field]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(get("operator", 0, "module"), "tokenize@7");
        assert_eq!(get("operator", 1, "module"), "tokenize@7");
        assert_eq!(get("operator", 2, "module"), "word_count@3");
        assert_eq!(
            get("source", 0, "path"),
            jobs.join("../data/kjv.txt").to_str().unwrap()
        );
        assert_eq!(
            get("sink", 0, "path"),
            jobs.join("out/counts.txt").to_str().unwrap()
        );
        assert_eq!(get("sink", 1, "path"), "/tmp/abs.txt");
    }

    #[test]
    fn rewrite_keeps_the_rest_of_the_spec() {
        let (_root, jobs) = fixture();
        let out = rewrite_spec(SPEC, &jobs, |_| Ok("tokenize@1".into()))
            .unwrap_or_else(|f| panic!("{:#}", f.error));
        let doc: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(doc["job"]["name"].as_str(), Some("word-count"));
        let ops = doc["operator"].as_array().unwrap();
        assert_eq!(ops[0]["config"]["lowercase"].as_bool(), Some(true));
        assert_eq!(ops[2]["key_by"].as_str(), Some("key"));
        assert_eq!(doc["source"][1]["kind"].as_str(), Some("words"));
        assert!(doc["source"][1].get("path").is_none());
        assert_eq!(doc["edge"][0]["to"].as_str(), Some("tokenize"));
    }

    #[test]
    fn rewrite_reports_a_missing_module_and_upload_failures() {
        let (_root, jobs) = fixture();
        let spec = "[[operator]]\nid = \"x\"\nmodule = \"nope.wasm\"\n";
        let f = rewrite_spec(spec, &jobs, |_| unreachable!()).unwrap_err();
        assert_eq!(f.code, 2);
        let msg = format!("{:#}", f.error);
        assert!(
            msg.contains("operator `x`") && msg.contains("nope.wasm"),
            "{msg}"
        );

        let f = rewrite_spec(SPEC, &jobs, |_| {
            Err(Failure::failed(anyhow!("server on fire")))
        })
        .unwrap_err();
        assert_eq!(f.code, 1);
        let msg = format!("{:#}", f.error);
        assert!(
            msg.contains("operator `tokenize`") && msg.contains("server on fire"),
            "{msg}"
        );

        let f = rewrite_spec("not [toml", &jobs, |_| unreachable!()).unwrap_err();
        assert_eq!(f.code, 2);
        let f = rewrite_spec("operator = 3", &jobs, |_| unreachable!()).unwrap_err();
        assert_eq!(f.code, 2);
    }

    #[test]
    fn error_messages_come_from_the_body() {
        assert_eq!(
            error_message(409, r#"{"error":"module op@1 already exists"}"#),
            "module op@1 already exists"
        );
        assert_eq!(
            error_message(502, "bad gateway"),
            "the JobManager answered HTTP 502: bad gateway"
        );
        assert_eq!(error_message(500, ""), "the JobManager answered HTTP 500");
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(path_segment("op@1"), "op@1");
        assert_eq!(path_segment("sha256:ab"), "sha256:ab");
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["NAME", "SIZE"],
            &[Align::Left, Align::Right],
            vec![
                vec!["a".into(), "1 B".into()],
                vec!["longer".into(), "12.0 MiB".into()],
            ],
        );
        assert_eq!(t, "NAME        SIZE\na            1 B\nlonger  12.0 MiB\n");
    }

    #[test]
    fn job_report_shows_vertices_and_placement() {
        let job = Job {
            id: "j1".into(),
            name: "wc".into(),
            state: "failed".into(),
            submitted_at_ms: 1_000,
            ended_at_ms: Some(66_000),
            failure: Some("operator `count` trapped".into()),
            vertices: vec![Vertex {
                id: "count".into(),
                role: "operator".into(),
                parallelism: 2,
                state: "failed".into(),
                records_in: 10,
                records_out: 3,
                busy_ms: 750,
                backpressured_ms: 250,
                idle_ms: 0,
                subtasks: vec![
                    Subtask {
                        index: 0,
                        taskmanager: "tm-a".into(),
                        state: "failed".into(),
                    },
                    Subtask {
                        index: 1,
                        taskmanager: "tm-b".into(),
                        state: "canceled".into(),
                    },
                ],
            }],
        };
        let r = job_report(&job, 0);
        assert!(
            r.starts_with("job j1 `wc`: failed (submitted 1970-01-01 00:00:01 UTC, ran 1m05s)\n"),
            "{r}"
        );
        assert!(r.contains("failure: operator `count` trapped\n"), "{r}");
        assert!(
            r.contains("count   operator    2  failed  10    3     75              25\n"),
            "{r}"
        );
        assert!(r.contains("count[1]  tm-b         canceled\n"), "{r}");
    }

    #[test]
    fn lenient_json_fills_missing_fields() {
        let j: Job = serde_json::from_value(serde_json::json!({
            "id": "x", "state": "running", "extra": 1, "ended_at_ms": null
        }))
        .unwrap();
        assert_eq!(j.id, "x");
        assert!(j.vertices.is_empty() && j.ended_at_ms.is_none());
    }

    /// The requests a fake server saw: (head, body) each.
    type Seen = Vec<(String, Vec<u8>)>;

    /// A one-connection-at-a-time HTTP server answering each request with
    /// the next canned `(status, body)`; returns its URL and, when done, the
    /// requests it saw (head, body).
    fn fake_server(answers: Vec<(u16, &'static str)>) -> (String, std::thread::JoinHandle<Seen>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for (status, body) in answers {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if line == "\r\n" || line.is_empty() {
                        break;
                    }
                    head.push_str(&line);
                }
                let len = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                let mut request_body = vec![0; len];
                reader.read_exact(&mut request_body).unwrap();
                let mut stream = reader.into_inner();
                write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                seen.push((head, request_body));
            }
            seen
        });
        (url, handle)
    }

    #[test]
    fn upload_streams_the_file_with_name_and_version() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("op.wasm");
        let bytes: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        std::fs::write(&file, &bytes).unwrap();
        let (url, server) = fake_server(vec![(
            201,
            r#"{"name":"op","version":"2","hash":"sha256:ab","size":200000,"uploaded_at_ms":1}"#,
        )]);
        let (status, v) = Rest::new(&url)
            .with_token(Some("s3cret".into()))
            .upload(&file, "op", Some("2"), true)
            .unwrap_or_else(|f| panic!("{:#}", f.error));
        assert_eq!(status, 201);
        assert_eq!(v["version"], "2");
        let seen = server.join().unwrap();
        let (head, body) = &seen[0];
        assert!(
            head.starts_with("POST /v1/modules?name=op&version=2 HTTP/1.1"),
            "{head}"
        );
        assert!(
            head.to_lowercase()
                .contains("content-type: application/wasm"),
            "{head}"
        );
        assert!(
            head.to_lowercase().contains("authorization: bearer s3cret"),
            "{head}"
        );
        assert!(body == &bytes, "the body is the file");
    }

    #[test]
    fn http_errors_carry_the_server_message_and_exit_code() {
        let (url, server) = fake_server(vec![
            (
                409,
                r#"{"error":"module op@1 already exists with other content"}"#,
            ),
            (404, r#"{"error":"job `nope` not found"}"#),
            (
                503,
                r#"{"error":"not enough free slots: 4 needed, 2 free"}"#,
            ),
        ]);
        let rest = Rest::new(&url);
        let f = rest.post_empty("/v1/jobs/x/cancel").unwrap_err();
        assert_eq!(f.code, 2);
        assert_eq!(
            f.error.to_string(),
            "module op@1 already exists with other content"
        );
        let f = rest
            .get(&format!("/v1/jobs/{}", path_segment("nope")))
            .unwrap_err();
        assert_eq!(f.code, 2);
        assert_eq!(f.error.to_string(), "job `nope` not found");
        let f = rest
            .post_json("/v1/jobs", &serde_json::json!({ "spec": "" }))
            .unwrap_err();
        assert_eq!(f.code, 1);
        assert!(f.error.to_string().contains("free slots"));
        let seen = server.join().unwrap();
        assert!(seen[2].0.starts_with("POST /v1/jobs HTTP/1.1"));
        let sent: Value = serde_json::from_slice(&seen[2].1).unwrap();
        assert_eq!(sent, serde_json::json!({ "spec": "" }));
    }

    #[test]
    fn an_unreachable_jobmanager_is_named_with_a_hint() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let f = Rest::new(&format!("127.0.0.1:{port}/"))
            .get("/v1/jobs")
            .unwrap_err();
        assert_eq!(f.code, 1);
        let msg = f.error.to_string();
        assert!(
            msg.contains(&format!(
                "cannot reach the JobManager at http://127.0.0.1:{port}:"
            )),
            "{msg}"
        );
        assert!(msg.contains("weir jobmanager"), "{msg}");
    }

    #[test]
    fn the_token_comes_from_the_option_else_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rest-token");
        std::fs::write(&file, "from-file\nignored\n").unwrap();
        let args = |token: Option<&str>, file: Option<&Path>| ConnectArgs {
            jobmanager: DEFAULT_JOBMANAGER.into(),
            rest_token: token.map(str::to_owned),
            rest_token_file: file.map(Path::to_path_buf),
            json: false,
        };
        assert_eq!(
            args(Some("given"), Some(&file)).token().unwrap().as_deref(),
            Some("given")
        );
        assert_eq!(
            args(None, Some(&file)).token().unwrap().as_deref(),
            Some("from-file")
        );
        let f = args(Some(" "), None).token().unwrap_err();
        assert_eq!(f.code, 2);
        assert!(f.error.to_string().contains("empty"), "{}", f.error);
        let missing = dir.path().join("missing");
        let f = args(None, Some(&missing)).token().unwrap_err();
        assert_eq!(f.code, 2);
        assert!(f.error.to_string().contains("missing"), "{}", f.error);
        std::fs::write(&file, "\n").unwrap();
        let f = args(None, Some(&file)).token().unwrap_err();
        assert!(f.error.to_string().contains("empty"), "{}", f.error);
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12 * 1024 * 1024), "12.0 MiB");
        assert_eq!(human_duration(850), "850ms");
        assert_eq!(human_duration(12_345), "12.3s");
        assert_eq!(human_duration(245_000), "4m05s");
        assert_eq!(human_duration(7_380_000), "2h03m");
        assert_eq!(utc_time(0), "-");
        assert_eq!(utc_time(1_700_000_000_000), "2023-11-14 22:13:20");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29 00:00:00");
    }
}
