//! `weir savepoint JOB DIR`, `weir stop JOB --savepoint DIR` and
//! `weir savepoint inspect DIR`: taking a savepoint through the JobManager
//! (waiting for it, with its progress on the terminal) and reading one on
//! this machine.

use super::*;
use weir_host::checkpoint::savepoint::directory::{SavepointMetadata, read_metadata, verify};
use weir_host::jobmanager::{SavepointStatus, SavepointView};

/// `weir savepoint`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SavepointArgs {
    /// Read a savepoint instead of taking one.
    #[command(subcommand)]
    pub action: Option<SavepointAction>,

    /// The job's id.
    #[arg(required = true)]
    pub job: Option<String>,

    /// Where to write the savepoint: a directory that is empty or absent,
    /// under the cluster's allowed directories (`weir jobmanager
    /// --allow-dir`). A relative path is taken from here.
    #[arg(required = true)]
    pub dir: Option<PathBuf>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// What `weir savepoint` does besides taking one.
#[derive(Debug, Subcommand)]
pub enum SavepointAction {
    /// Show what a savepoint holds (its job, the operators with their
    /// states, entries and bytes, the modules, source positions and sink
    /// commits) and check every file against its recorded size and
    /// checksum. Reads the directory on this machine.
    Inspect {
        /// The savepoint directory.
        path: PathBuf,
        /// Print the savepoint's metadata as JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print what a savepoint stores for one key of one state: a value, a
    /// list's elements, or a map's entries (`user key = value`). Reads the
    /// directory on this machine; exits 1 if the key has no entry.
    Query {
        /// The savepoint directory.
        path: PathBuf,
        /// The operator's uid.
        #[arg(long, value_name = "UID")]
        operator: String,
        /// The state's name.
        #[arg(long, value_name = "NAME")]
        state: String,
        /// The key, as UTF-8 (what the operator's `key_by` produced).
        #[arg(long, value_name = "KEY")]
        key: String,
        /// How to show the stored bytes.
        #[arg(long, value_enum, default_value_t = Codec::Raw)]
        codec: Codec,
    },
}

/// How `weir savepoint query` shows stored bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Codec {
    /// Bytes, printable ASCII as is and the rest escaped (`\x00`).
    Raw,
    /// UTF-8 text (invalid bytes replaced).
    Utf8,
    /// A little-endian unsigned 64-bit integer (8 bytes).
    U64,
    /// JSON, pretty-printed.
    Json,
}

impl Codec {
    /// `bytes` shown as this codec says, or why they are not of it.
    pub(super) fn show(self, bytes: &[u8]) -> String {
        match self {
            Codec::Raw => bytes
                .iter()
                .flat_map(|b| std::ascii::escape_default(*b))
                .map(char::from)
                .collect(),
            Codec::Utf8 => String::from_utf8_lossy(bytes).into_owned(),
            Codec::U64 => match <[u8; 8]>::try_from(bytes) {
                Ok(b) => u64::from_le_bytes(b).to_string(),
                Err(_) => format!(
                    "(not a u64: {} bytes) {}",
                    bytes.len(),
                    Codec::Raw.show(bytes)
                ),
            },
            Codec::Json => match serde_json::from_slice::<Value>(bytes) {
                Ok(v) => serde_json::to_string_pretty(&v).expect("a Value serializes"),
                Err(e) => format!("(not JSON: {e}) {}", Codec::Raw.show(bytes)),
            },
        }
    }
}

/// `weir stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// The job's id.
    pub job: String,

    /// Take a savepoint into this directory and stop the job at it: its
    /// sinks commit exactly what the savepoint records, and the job is
    /// canceled once the savepoint is written (if that fails, the job goes
    /// on). Resume with `weir submit JOB.toml --from-savepoint DIR`.
    #[arg(long, value_name = "DIR", required = true)]
    pub savepoint: PathBuf,

    /// Drain first, as Flink's `stop --drain`: the sources send the final
    /// watermark, so every event-time timer fires (windows and final
    /// results are emitted and committed with the savepoint), and read
    /// nothing more. For a job that ends for good; one resumed from the
    /// savepoint starts with every timer fired.
    #[arg(long)]
    pub drain: bool,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

pub(super) fn savepoint(args: SavepointArgs) -> Result<(), Failure> {
    match args.action {
        Some(SavepointAction::Inspect { path, json }) => return inspect(&path, json),
        Some(SavepointAction::Query {
            path,
            operator,
            state,
            key,
            codec,
        }) => return query(&path, &operator, &state, key.as_bytes(), codec),
        None => {}
    }
    let (Some(job), Some(dir)) = (args.job, args.dir) else {
        return Err(Failure::refused(anyhow!("give a job id and a directory")));
    };
    take(&args.connect, &job, &dir, false, false)
}

pub(super) fn stop(args: StopArgs) -> Result<(), Failure> {
    take(&args.connect, &args.job, &args.savepoint, true, args.drain)
}

/// Triggers a savepoint and waits for it.
fn take(
    connect: &ConnectArgs,
    job: &str,
    dir: &Path,
    stop: bool,
    drain: bool,
) -> Result<(), Failure> {
    let rest = connect.rest()?;
    let dir = std::path::absolute(dir)
        .with_context(|| format!("savepoint directory {}", dir.display()))
        .map_err(Failure::refused)?;
    let started = std::time::Instant::now();
    let v = rest.post_json(
        &format!("/v1/jobs/{}/savepoints", path_segment(job)),
        &serde_json::json!({ "dir": dir, "stop": stop, "drain": drain }),
    )?;
    let view: SavepointView = decode(v, "answer")?;
    let view = wait(&rest, job, view.id, !connect.json)?;
    if connect.json {
        print_json(&serde_json::to_value(&view).expect("a view serializes"));
    }
    match view.status {
        SavepointStatus::Completed => {
            if !connect.json {
                println!(
                    "savepoint of job {job} written to {} ({}, checkpoint {}) in {:.1} s{}",
                    view.dir,
                    human_bytes(view.bytes),
                    view.checkpoint.unwrap_or(0),
                    started.elapsed().as_secs_f64(),
                    match (stop, drain) {
                        (true, true) => "; the job was drained and stopped at it",
                        (true, false) => "; the job stopped at it",
                        _ => "",
                    }
                );
            }
            Ok(())
        }
        _ => Err(Failure::failed(anyhow!(
            "savepoint of job {job} failed: {}{}",
            view.failure.as_deref().unwrap_or("no reason given"),
            if stop {
                " (the job was not stopped)"
            } else {
                ""
            }
        ))),
    }
}

/// Polls job `job`'s savepoint `number` until it completes or fails,
/// showing the bytes written on a terminal.
fn wait(rest: &Rest, job: &str, number: u32, show: bool) -> Result<SavepointView, Failure> {
    let show = show && std::io::stderr().is_terminal();
    loop {
        let v = rest.get(&format!("/v1/jobs/{}/savepoints", path_segment(job)))?;
        let all: Vec<SavepointView> = decode(v, "savepoint list")?;
        let Some(view) = all.into_iter().find(|s| s.id == number) else {
            return Err(Failure::failed(anyhow!(
                "the JobManager no longer knows savepoint {number} of job {job}"
            )));
        };
        match view.status {
            SavepointStatus::Completed | SavepointStatus::Failed => {
                if show {
                    eprint!("\r\x1b[2K");
                }
                return Ok(view);
            }
            SavepointStatus::Pending if show => eprint!("\rsavepoint: checkpoint being taken"),
            SavepointStatus::Writing if show => {
                eprint!("\r\x1b[2Ksavepoint: {} written", human_bytes(view.bytes))
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn inspect(path: &Path, json: bool) -> Result<(), Failure> {
    let metadata = read_metadata(path).map_err(Failure::refused)?;
    verify(path, &metadata).map_err(Failure::refused)?;
    if json {
        print_json(&serde_json::to_value(&metadata).expect("metadata serializes"));
        return Ok(());
    }
    print!("{}", inspect_report(path, &metadata));
    Ok(())
}

/// What `weir savepoint inspect` prints for a checked savepoint.
pub(super) fn inspect_report(path: &Path, m: &SavepointMetadata) -> String {
    let mut out = format!(
        "savepoint {}: job `{}` ({}), checkpoint {}, taken {} UTC, format {}, {} key groups\n\n",
        path.display(),
        m.job_name,
        m.job_id,
        m.checkpoint,
        utc_time(m.created_at_ms),
        m.format,
        m.max_parallelism,
    );
    let mut rows = Vec::new();
    let files = m.files().count();
    let bytes: u64 = m.files().map(|f| f.size).sum();
    for v in &m.vertices {
        let positions = v
            .subtasks
            .iter()
            .filter(|s| s.source.is_some() || s.sink.is_some())
            .count();
        let what = match v.role.as_str() {
            "source" => format!("{positions} position(s)"),
            "sink" => format!("{positions} commit(s)"),
            _ => v.module.clone().unwrap_or_default(),
        };
        rows.push(vec![
            v.uid.clone(),
            v.role.clone(),
            v.parallelism.to_string(),
            String::new(),
            String::new(),
            String::new(),
            what,
        ]);
        for (i, state) in v.states.iter().enumerate() {
            let files = v.subtasks.iter().filter_map(|s| s.state.as_ref());
            let (entries, size) = files.fold((0u64, 0u64), |(n, b), f| {
                (
                    n + f.entries.get(i).copied().unwrap_or(0),
                    b + f.bytes.get(i).copied().unwrap_or(0),
                )
            });
            rows.push(vec![
                String::new(),
                String::new(),
                String::new(),
                format!("{} ({:?})", state.name, state.kind).to_lowercase(),
                entries.to_string(),
                human_bytes(size),
                String::new(),
            ]);
        }
    }
    use Align::*;
    out.push_str(&table(
        &[
            "VERTEX",
            "ROLE",
            "PAR",
            "STATE",
            "ENTRIES",
            "BYTES",
            "MODULE / POSITIONS",
        ],
        &[Left, Left, Right, Left, Right, Right, Left],
        rows,
    ));
    let _ = writeln!(
        out,
        "\nall {files} file(s) match their recorded size and checksum ({})",
        human_bytes(bytes)
    );
    out
}

/// `weir savepoint query`.
fn query(
    path: &Path,
    operator: &str,
    state: &str,
    key: &[u8],
    codec: Codec,
) -> Result<(), Failure> {
    use weir_host::checkpoint::savepoint::SavepointFile;
    use weir_host::state::layout::{decode_key, list_elements};
    use weir_host::state::{StateKind, key_group_of, ttl::EXPIRY_LEN};

    let metadata = read_metadata(path).map_err(Failure::refused)?;
    let vertex = metadata
        .vertices
        .iter()
        .find(|v| v.uid == operator)
        .ok_or_else(|| {
            let keyed: Vec<&str> = metadata
                .vertices
                .iter()
                .filter(|v| !v.states.is_empty())
                .map(|v| v.uid.as_str())
                .collect();
            Failure::refused(anyhow!(
                "the savepoint has no operator `{operator}`; operators with state: {}",
                keyed.join(", ")
            ))
        })?;
    let (index, saved) = vertex
        .states
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == state)
        .ok_or_else(|| {
            let names: Vec<&str> = vertex.states.iter().map(|s| s.name.as_str()).collect();
            Failure::refused(anyhow!(
                "operator `{operator}` has no state `{state}` in the savepoint; its states: {}",
                names.join(", ")
            ))
        })?;
    let kg = key_group_of(key, metadata.max_parallelism);
    let file = vertex
        .subtasks
        .iter()
        .filter_map(|s| s.state.as_ref())
        .find(|f| f.key_groups.0 <= kg.0 && kg.0 < f.key_groups.1);
    let skip = if saved.ttl_ms.is_some() {
        EXPIRY_LEN
    } else {
        0
    };
    let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if let Some(file) = file {
        let reader = SavepointFile::new(path.join(&file.file.path));
        reader
            .for_each_entry(|s, stored, value| {
                if s as usize == index
                    && let Some((_, k, namespace)) = decode_key(stored)
                    && k == key
                {
                    found.push((namespace.to_vec(), value.to_vec()));
                }
                Ok(())
            })
            .map_err(Failure::refused)?;
    }
    if found.is_empty() {
        return Err(Failure::failed(anyhow!(
            "no entry for key {:?} in state `{state}` of operator `{operator}`",
            Codec::Raw.show(key)
        )));
    }
    let strip = |v: &[u8]| v.get(skip..).unwrap_or_default().to_vec();
    match saved.kind {
        StateKind::Value => println!("{}", codec.show(&strip(&found[0].1))),
        StateKind::List => {
            for element in list_elements(&found[0].1) {
                let element = element.map_err(Failure::refused)?;
                println!("{}", codec.show(&strip(element)));
            }
        }
        StateKind::Map => {
            for (user_key, value) in &found {
                println!(
                    "{} = {}",
                    Codec::Raw.show(user_key),
                    codec.show(&strip(value))
                );
            }
        }
    }
    Ok(())
}
