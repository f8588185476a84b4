//! `nexmark`: the Nexmark queries of `udfs/jobs/nexmark/` in Weir beside the
//! same queries as plain Rust loops, over one generated file, each pinned to
//! the same cores, in one run.
//!
//! ```text
//! cargo build --release --workspace
//! cargo build --release --target wasm32-wasip2 --manifest-path udfs/Cargo.toml --target-dir udfs/target
//! target/release/nexmark [--events 2000000] [--queries q0,q1,q2,q3,q4,q5,q6,q7,q8,q11,q12] [--parallelism 1,2] [--backend rocksdb]
//!     [--flink LAUNCHER [--flink-check]] [--csv results.csv]
//! ```
//!
//! `benches/nexmark/run.sh` installs Flink, builds the launcher and runs
//! this with `--flink`.
//!
//! The harness writes `--events` Nexmark events once (Weir's `nexmark`
//! generator, as `udfs/jobs/nexmark/generate.toml` does) to a JSON-lines
//! file. For each query it runs:
//!
//! * **Weir**: `weir run --json` of the committed `qN.toml` with its source
//!   replaced by a file source over that file and its sink by a blackhole.
//!   The source gives the operators the same records the generator makes:
//!   for the queries that use event time, `json-lines` with
//!   `timestamp_field = "date_time"` (the host parses each line to read the
//!   field, and checks it is JSON); for the stateless q0–q2, where no
//!   operator reads a timestamp, `lines`, as the generator's records reach
//!   the operator in the committed jobs: unparsed by the host, each bid
//!   parsed by the operator alone (which drops the lines that are no bid).
//!   `--source json-lines` uses the parsing source for every query. At each
//!   `--parallelism`, pinned with
//!   `taskset` to that many cores. Wall time is the job's as `weir run`
//!   reports it (`elapsed_ms`, submission to end; compiling the modules
//!   comes before and is cached after the first run); CPU time is the
//!   child process's user + system time, start-up included (so events per
//!   CPU-second slightly understates Weir).
//! * **native**: this binary, in a child pinned to one core, reading the
//!   same file line by line, parsing the bids with serde_json as the Wasm
//!   operators do, and computing the query with `HashMap`s: the floor.
//!
//! * **Flink** (with `--flink LAUNCHER`): `LAUNCHER QUERY FILE --backend B`,
//!   i.e. `benches/nexmark/flink/NexmarkSql.java`: the Nexmark suite's Flink
//!   SQL over the same file (filesystem connector, json format, event time
//!   from `date_time`), blackhole sink, a local MiniCluster at p=1, pinned
//!   to one core. Wall time is the job's net runtime as Flink reports it;
//!   CPU time is the JVM's user + system time, start-up included.
//!
//! Start-up (a JVM, Flink's planner and code generation; Weir's embedded
//! cluster and module instantiation) is a fixed cost that would swamp a
//! few seconds of work, so each Weir and Flink run is repeated over an
//! empty file and the table shows events per CPU-second both with the
//! start-up and without it (the empty run's CPU time subtracted), the same
//! way for both systems. Native Rust's start-up is negligible.
//!
//! Weir and native must produce the same number of results (the harness
//! checks; not for q12, whose processing-time windows depend on the run's
//! speed); `--flink-check` runs each Flink query once more, untimed,
//! collecting its results, and checks their count (for q5 and q7: the
//! windows, as Flink's rows are per hot auction or bid; not for q4 and q6,
//! whose final rows are one per category or seller where Weir's changelog
//! has one per winning bid, nor q12). Flink cannot run q6: the suite marks
//! its SQL as unsupported (an `OVER` window over an updating aggregate), so
//! q6 has no Flink row. `--csv` writes every measurement for
//! `nexmark-chart`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use serde::Deserialize;
use weir_host::connectors::{GeneratorConfig, GeneratorKind, GeneratorSource, Source};

#[derive(Parser)]
#[command(about = "Nexmark queries in Weir beside native Rust loops")]
struct Cli {
    /// Events to generate.
    #[arg(long, default_value_t = 2_000_000)]
    events: u64,
    /// Events per second of event time (the jobs' 1000 makes many windows).
    #[arg(long, default_value_t = 1000)]
    event_rate: u64,
    /// Queries to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "q0,q1,q2,q3,q4,q5,q6,q7,q8,q11,q12"
    )]
    queries: Vec<String>,
    /// Weir parallelisms to run, comma-separated (each pinned to as many cores).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
    /// Weir's state backend (Flink gets the same: `heap` is its `hashmap`).
    #[arg(long, default_value = "rocksdb")]
    backend: String,
    /// Also run each query in Flink with this launcher (`run.sh` writes it).
    #[arg(long)]
    flink: Option<PathBuf>,
    /// Check the number of Flink's results (one more, untimed, run each).
    #[arg(long)]
    flink_check: bool,
    /// The file source's format for Weir: `auto` reads q0–q2, which use no
    /// event time, as `lines` (the operator parses each event, as from the
    /// generator) and every other query as `json-lines` with its event time
    /// from `date_time`; `json-lines` uses that for every query.
    #[arg(long, default_value = "auto", value_parser = ["auto", "json-lines"])]
    source: String,
    /// Write every measurement to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Internal: run one query natively over FILE and print a RESULT line.
    #[arg(long, num_args = 2, value_names = ["QUERY", "FILE"], hide = true)]
    native: Option<Vec<String>>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(args) = &cli.native {
        let started = Instant::now();
        let results = native(&args[0], Path::new(&args[1]))?;
        println!("RESULT {} {}", results, started.elapsed().as_secs_f64());
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let events = dir.path().join("events.jsonl");
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, b"")?;
    eprintln!(
        "nexmark: writing {} events to {}",
        cli.events,
        events.display()
    );
    generate(&events, cli.events, cli.event_rate)?;
    let exe = std::env::current_exe()?;
    let weir = exe.with_file_name("weir");
    if !weir.is_file() {
        bail!(
            "{} is missing: cargo build --release --workspace",
            weir.display()
        );
    }
    let mut csv = match &cli.csv {
        Some(path) => {
            let mut f = std::fs::File::create(path)?;
            writeln!(f, "{CSV_HEADER}")?;
            Some(f)
        }
        None => None,
    };
    println!(
        "{:<5} {:<11} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8} {:>5}",
        "query", "run", "results", "events/s", "ev/CPU-s", "−start-up", "÷native", "÷Flink", "load"
    );
    for query in &cli.queries {
        let native = run_native(&exe, query, &events)?;
        let mut rows = vec![Row::new(query, "native", 1, cli.events, native, None)];
        let expected = rows[0].m.results;
        let mut weirs = Vec::new();
        for &p in &cli.parallelism {
            let format = source_format(query, &cli.source);
            if p == cli.parallelism[0] {
                eprintln!("{query}: Weir's file source reads the events as `{format}`");
            }
            let spec = bench_spec(query, &events, dir.path(), p, &cli.backend, format, "")?;
            let empty_spec =
                bench_spec(query, &empty, dir.path(), p, &cli.backend, format, "-empty")?;
            // Compiles the query's modules into the cache first, so that
            // neither measured run includes compiling them.
            run_weir(&weir, &empty_spec, dir.path(), p)?;
            let m = run_weir(&weir, &spec, dir.path(), p)?;
            // q12's windows follow the wall clock: its number of results
            // depends on the speed of the run.
            if m.results != expected && query != "q12" {
                bail!(
                    "{query} p={p}: Weir emitted {:?} results, native {expected:?}",
                    m.results
                );
            }
            let start = run_weir(&weir, &empty_spec, dir.path(), p)?;
            weirs.push(Row::new(query, "weir", p, cli.events, m, Some(start)));
            // Flink (p=1) right after Weir p=1.
            if p == 1
                && let Some(flink) = &cli.flink
            {
                match run_flink(flink, query, &events, &cli.backend, false) {
                    Ok(m) => {
                        let start = run_flink(flink, query, &empty, &cli.backend, false)?;
                        weirs.push(Row::new(query, "flink", 1, cli.events, m, Some(start)));
                    }
                    // The suite's q6 is not supported by Flink: say why.
                    Err(e) if query == "q6" => {
                        let why = e.to_string();
                        let why = why
                            .lines()
                            .find(|l| l.contains("Exception"))
                            .unwrap_or(&why);
                        eprintln!("q6: Flink cannot run it: {why}");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        rows.extend(weirs);
        if cli.flink_check
            && query != "q6"
            && let Some(flink) = &cli.flink
        {
            let check = run_flink(flink, query, &events, &cli.backend, true)?;
            let got = if matches!(query.as_str(), "q5" | "q7") {
                check.windows
            } else {
                check.results
            };
            // q4's and q6's final rows are one per category or seller (Weir's
            // and native's, one per winning bid); q12's depend on the clock.
            if matches!(query.as_str(), "q4" | "q6" | "q12") {
                eprintln!("{query}: Flink's final rows {got:?} (not comparable, not checked)");
            } else if got != expected {
                bail!("{query}: Flink's results {got:?}, native {expected:?}");
            }
            eprintln!("{query}: Flink's results check: {got:?} = native's");
        }
        let flink_cpu = rows
            .iter()
            .find(|r| r.system == "flink")
            .map(Row::cpu_rate_net);
        let native_cpu = rows[0].cpu_rate_net();
        for r in &rows {
            r.print(native_cpu, flink_cpu);
            if let Some(f) = csv.as_mut() {
                r.csv(f)?;
            }
        }
    }
    Ok(())
}

const CSV_HEADER: &str =
    "query,system,parallelism,events,results,job_s,wall_s,cpu_s,startup_wall_s,startup_cpu_s,load1";

/// One run's measurements.
#[derive(Clone, Copy, Debug)]
struct Measured {
    /// Results the system reported (None where it cannot count them).
    results: Option<u64>,
    /// Windows among the results (Flink's `--count` only).
    windows: Option<u64>,
    /// The job's own time: Weir's `elapsed_ms`, Flink's net runtime, the
    /// native loop's.
    job_secs: f64,
    /// The process's wall time.
    wall: f64,
    /// The process's user + system CPU seconds.
    cpu: f64,
    /// The 1-minute load average when the run ended.
    load: f64,
}

impl Measured {
    /// A run that counted `results` in `job_secs` of its own time (the
    /// load average read now).
    fn counted(results: u64, job_secs: f64, wall: f64, cpu: f64) -> Measured {
        Measured {
            results: Some(results),
            windows: None,
            job_secs,
            wall,
            cpu,
            load: load1(),
        }
    }
}

/// A table row: one system's run of one query, with its empty-file run.
struct Row {
    query: String,
    system: &'static str,
    parallelism: u32,
    events: u64,
    m: Measured,
    startup: Option<Measured>,
}

impl Row {
    fn new(
        query: &str,
        system: &'static str,
        parallelism: u32,
        events: u64,
        m: Measured,
        startup: Option<Measured>,
    ) -> Row {
        Row {
            query: query.to_string(),
            system,
            parallelism,
            events,
            m,
            startup,
        }
    }

    /// Events per CPU-second without the empty run's CPU time.
    fn cpu_rate_net(&self) -> f64 {
        let start = self.startup.map_or(0.0, |s| s.cpu);
        self.events as f64 / (self.m.cpu - start).max(0.01)
    }

    fn print(&self, native_cpu: f64, flink_cpu: Option<f64>) {
        let net = self.cpu_rate_net();
        let vs_native = if self.system == "native" {
            "—".to_string()
        } else {
            format!("{:.2}", net / native_cpu)
        };
        let vs_flink = match flink_cpu {
            Some(f) if self.system == "weir" => format!("{:.2}", net / f),
            _ => "—".into(),
        };
        let results = self.m.results.map_or("?".into(), |n| n.to_string());
        println!(
            "{:<5} {:<11} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8} {:>5.1}",
            self.query,
            format!("{} p={}", self.system, self.parallelism),
            results,
            millions(self.events as f64 / self.m.job_secs),
            millions(self.events as f64 / self.m.cpu),
            millions(net),
            vs_native,
            vs_flink,
            self.m.load
        );
    }

    fn csv(&self, f: &mut std::fs::File) -> std::io::Result<()> {
        let (sw, sc) = self.startup.map_or((0.0, 0.0), |s| (s.wall, s.cpu));
        writeln!(
            f,
            "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2}",
            self.query,
            self.system,
            self.parallelism,
            self.events,
            self.m.results.map_or(String::new(), |n| n.to_string()),
            self.m.job_secs,
            self.m.wall,
            self.m.cpu,
            sw,
            sc,
            self.m.load
        )
    }
}

fn millions(rate: f64) -> String {
    format!("{:.3} M", rate / 1e6)
}

/// The 1-minute load average.
fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The cores `taskset` pins a run of parallelism `p` to.
fn cores(p: u32) -> String {
    if p <= 1 {
        "0".to_string()
    } else {
        format!("0-{}", p - 1)
    }
}

/// Runs `query` natively over `events` in a child pinned to core 0.
fn run_native(exe: &Path, query: &str, events: &Path) -> anyhow::Result<Measured> {
    let ((results, secs), wall, cpu) = child_cpu(|| {
        let out = Command::new("taskset")
            .args(["-c", "0"])
            .arg(exe)
            .args(["--native", query])
            .arg(events)
            .output()?;
        if !out.status.success() {
            bail!("native {query}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let text = String::from_utf8(out.stdout)?;
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .context("no RESULT line")?;
        let (n, s) = line.split_once(' ').context("RESULT n secs")?;
        Ok((n.parse::<u64>()?, s.parse::<f64>()?))
    })?;
    Ok(Measured::counted(results, secs, wall, cpu))
}

/// `weir run --json SPEC`, pinned to `p` cores.
fn run_weir(weir: &Path, spec: &Path, dir: &Path, p: u32) -> anyhow::Result<Measured> {
    let ((results, secs), wall, cpu) = child_cpu(|| {
        let out = Command::new("taskset")
            .args(["-c", &cores(p)])
            .arg(weir)
            .args(["run", "--json", "--allow-path"])
            .arg(dir)
            .arg(spec)
            .env("WEIR_CACHE_DIR", dir.join("cache"))
            .output()?;
        if !out.status.success() {
            bail!(
                "weir {}: {}",
                spec.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let secs = summary["elapsed_ms"]
            .as_f64()
            .map(|ms| ms / 1000.0)
            .or_else(|| summary["elapsed_s"].as_f64())
            .with_context(|| format!("no elapsed time in {summary}"))?;
        let sink = summary["vertices"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["id"] == "out"))
            .with_context(|| format!("no sink in {summary}"))?;
        Ok((sink["records_in"].as_u64().context("records_in")?, secs))
    })?;
    Ok(Measured::counted(results, secs, wall, cpu))
}

/// The Flink launcher over `events`, pinned to core 0 (p=1). With `count`,
/// Flink collects and counts the results instead of discarding them.
fn run_flink(
    launcher: &Path,
    query: &str,
    events: &Path,
    backend: &str,
    count: bool,
) -> anyhow::Result<Measured> {
    let backend = if backend == "heap" {
        "hashmap"
    } else {
        backend
    };
    let (fields, wall, cpu) = child_cpu(|| {
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", "0"])
            .arg(launcher)
            .arg(query)
            .arg(events)
            .args(["--backend", backend]);
        if count {
            cmd.arg("--count");
        }
        let out = cmd.output()?;
        if !out.status.success() {
            bail!("flink {query}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let text = String::from_utf8(out.stdout)?;
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("FLINK "))
            .with_context(|| format!("no FLINK line in {text}"))?;
        let fields: HashMap<String, i64> = line
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect();
        Ok(fields)
    })?;
    let count_of = |k: &str| fields.get(k).and_then(|&n| u64::try_from(n).ok());
    let net_ms = fields.get("net_ms").copied().unwrap_or(-1);
    let job_ms = if net_ms >= 0 {
        net_ms
    } else {
        fields.get("job_ms").copied().unwrap_or(0)
    };
    Ok(Measured {
        results: count_of("rows"),
        windows: count_of("windows"),
        job_secs: (job_ms as f64 / 1000.0).max(0.001),
        wall,
        cpu,
        load: load1(),
    })
}

/// Runs `f` (which waits for one child) and returns its result with the
/// wall time and the child's user + system CPU seconds.
fn child_cpu<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, f64, f64)> {
    let before = children_cpu();
    let started = Instant::now();
    let out = f()?;
    let secs = started.elapsed().as_secs_f64();
    Ok((out, secs, children_cpu() - before))
}

/// CPU seconds (user + system) of every child this process waited for, so
/// far: `cutime` and `cstime` of `/proc/self/stat`, in USER_HZ (100 per
/// second on Linux).
fn children_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses; cutime and
    // cstime are fields 16 and 17 of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(13) + ticks(14)) / 100.0
}

/// The events, as `generate.toml` writes them.
fn generate(path: &Path, events: u64, event_rate: u64) -> anyhow::Result<()> {
    let mut source = GeneratorSource::new(
        GeneratorConfig {
            kind: GeneratorKind::Nexmark { event_rate },
            count: Some(events),
            seed: 0,
            rate: None,
            interval_ms: 10,
        },
        0,
        1,
    );
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    while let Some(batch) = source.next_batch(4096)? {
        for r in batch.iter() {
            out.write_all(r.value)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The file source's format for `query` (see `Cli::source`).
fn source_format(query: &str, source: &str) -> &'static str {
    match (source, query) {
        ("auto", "q0" | "q1" | "q2") => "lines",
        _ => "json-lines",
    }
}

/// The committed `qN.toml` with a file source over `events` (in `format`)
/// and a blackhole sink, written into `dir`.
fn bench_spec(
    query: &str,
    events: &Path,
    dir: &Path,
    parallelism: u32,
    backend: &str,
    format: &str,
    suffix: &str,
) -> anyhow::Result<PathBuf> {
    let jobs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../udfs/jobs/nexmark");
    let committed = jobs.join(format!("{query}.toml"));
    let text =
        std::fs::read_to_string(&committed).with_context(|| format!("{}", committed.display()))?;
    let mut spec: toml::Table = text.parse()?;
    let job = spec["job"].as_table_mut().context("[job]")?;
    job.insert("parallelism".into(), i64::from(parallelism).into());
    job.insert("state_backend".into(), backend.into());
    let mut source = toml::Table::new();
    source.insert("id".into(), "events".into());
    source.insert("type".into(), "file".into());
    source.insert("path".into(), events.to_str().context("utf-8 path")?.into());
    source.insert("format".into(), format.into());
    if format == "json-lines" {
        source.insert("timestamp_field".into(), "date_time".into());
    }
    spec.insert("source".into(), toml::Value::Array(vec![source.into()]));
    let mut sink = toml::Table::new();
    sink.insert("id".into(), "out".into());
    sink.insert("type".into(), "blackhole".into());
    spec.insert("sink".into(), toml::Value::Array(vec![sink.into()]));
    // Module paths are relative to the committed spec's folder.
    for op in spec
        .get_mut("operator")
        .and_then(toml::Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(module) = op.get_mut("module") {
            let absolute = jobs.join(module.as_str().context("module")?);
            *module = absolute.to_str().context("utf-8 path")?.into();
        }
    }
    let path = dir.join(format!("{query}-p{parallelism}{suffix}.toml"));
    std::fs::write(&path, toml::to_string(&spec)?)?;
    Ok(path)
}

/// The fields of a bid the queries read (as the Wasm operators parse them).
#[derive(Deserialize)]
struct Bid {
    auction: u64,
    bidder: u64,
    price: u64,
    date_time: i64,
    extra: String,
}

const BID_PREFIX: &[u8] = br#"{"type":"bid","#;

/// The fields of a person q3 reads.
#[derive(Deserialize)]
struct Person {
    id: u64,
    name: String,
    city: String,
    state: String,
}

/// The fields of an auction q3, q4, q6 and q8 read.
#[derive(Deserialize, Clone, Copy)]
struct Auction {
    id: u64,
    seller: u64,
    category: u64,
    date_time: i64,
    expires: i64,
}

/// The fields of a person q8 reads.
#[derive(Deserialize)]
struct NewPerson {
    id: u64,
    name: String,
    date_time: i64,
}

/// q4's and q6's inner part natively: each auction's highest bid with
/// `A.date_time <= B.date_time <= A.expires` (bids that come before their
/// auction wait), then, at the end of input, the auctions in closing order
/// (`expires`, then id) with their winning price; one result per auction
/// with a winning bid, as Weir's changelog has one row per winning bid.
#[derive(Default)]
struct WinningBids {
    auctions: HashMap<u64, (Auction, Option<u64>)>,
    waiting: HashMap<u64, Vec<(u64, i64)>>,
}

impl WinningBids {
    fn event(&mut self, line: &[u8]) -> anyhow::Result<()> {
        if line.starts_with(BID_PREFIX) {
            let bid: Bid = serde_json::from_slice(line)?;
            match self.auctions.get_mut(&bid.auction) {
                Some((a, highest)) => {
                    if a.date_time <= bid.date_time && bid.date_time <= a.expires {
                        *highest = (*highest).max(Some(bid.price));
                    }
                }
                None => self
                    .waiting
                    .entry(bid.auction)
                    .or_default()
                    .push((bid.price, bid.date_time)),
            }
        } else if line.starts_with(br#"{"type":"auction","#) {
            let a: Auction = serde_json::from_slice(line)?;
            let highest = self
                .waiting
                .remove(&a.id)
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, t)| a.date_time <= *t && *t <= a.expires)
                .map(|(price, _)| price)
                .max();
            self.auctions.insert(a.id, (a, highest));
        }
        Ok(())
    }

    /// The winning bids in closing order.
    fn closed(self) -> Vec<(Auction, u64)> {
        let mut won: Vec<(Auction, u64)> = self
            .auctions
            .into_values()
            .filter_map(|(a, highest)| Some((a, highest?)))
            .collect();
        won.sort_unstable_by_key(|(a, _)| (a.expires, a.id));
        won
    }

    /// q4: per category, the running count, sum and truncated average of
    /// the winning prices, one row per winning bid.
    fn q4(self, out: &mut Vec<u8>) -> anyhow::Result<u64> {
        let mut categories: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut results = 0;
        for (a, price) in self.closed() {
            let (n, sum) = categories.entry(a.category).or_default();
            *n += 1;
            *sum += price;
            out.clear();
            write!(
                out,
                r#"{{"category":{},"auctions":{n},"sum":{sum},"avg":{}}}"#,
                a.category,
                *sum / *n
            )?;
            std::hint::black_box(&out);
            results += 1;
        }
        Ok(results)
    }

    /// q6: per seller, the truncated average of its last 11 winning prices
    /// in closing order, one row per closed auction.
    fn q6(self, out: &mut Vec<u8>) -> anyhow::Result<u64> {
        let mut sellers: HashMap<u64, std::collections::VecDeque<u64>> = HashMap::new();
        let mut results = 0;
        for (a, price) in self.closed() {
            let last = sellers.entry(a.seller).or_default();
            if last.len() == 11 {
                last.pop_front();
            }
            last.push_back(price);
            let sum: u64 = last.iter().sum();
            out.clear();
            write!(
                out,
                r#"{{"seller":{},"auction":{},"expires":{},"auctions":{},"sum":{sum},"avg":{}}}"#,
                a.seller,
                a.id,
                a.expires,
                last.len(),
                sum / last.len() as u64
            )?;
            std::hint::black_box(&out);
            results += 1;
        }
        Ok(results)
    }
}

/// q8 natively: the 10 s tumbling window each person registered in, the
/// windows in which each seller opened an auction; one result per person
/// whose registration window is one of them.
#[derive(Default)]
struct NewUsers {
    persons: HashMap<u64, (i64, String)>,
    sellers: std::collections::HashSet<(u64, i64)>,
}

impl NewUsers {
    fn event(&mut self, line: &[u8]) -> anyhow::Result<()> {
        let window = |t: i64| t - t.rem_euclid(10_000);
        if line.starts_with(br#"{"type":"person","#) {
            let p: NewPerson = serde_json::from_slice(line)?;
            self.persons.insert(p.id, (window(p.date_time), p.name));
        } else if line.starts_with(br#"{"type":"auction","#) {
            let a: Auction = serde_json::from_slice(line)?;
            self.sellers.insert((a.seller, window(a.date_time)));
        }
        Ok(())
    }

    fn results(self, out: &mut Vec<u8>) -> anyhow::Result<u64> {
        let mut results = 0;
        for (id, (start, name)) in &self.persons {
            if self.sellers.contains(&(*id, *start)) {
                out.clear();
                write!(out, r#"{{"id":{id},"name":{name:?},"start":{start}}}"#)?;
                std::hint::black_box(&out);
                results += 1;
            }
        }
        Ok(results)
    }
}

/// q3 natively: persons of OR, ID, CA by id; auctions waiting for their
/// seller by seller; one result per match.
#[derive(Default)]
struct Q3 {
    persons: HashMap<u64, Vec<u8>>,
    waiting: HashMap<u64, Vec<u64>>,
    results: u64,
}

impl Q3 {
    fn event(&mut self, line: &[u8], out: &mut Vec<u8>) -> anyhow::Result<()> {
        if line.starts_with(br#"{"type":"person","#) {
            let p: Person = serde_json::from_slice(line)?;
            if !matches!(p.state.as_str(), "or" | "id" | "ca") {
                return Ok(());
            }
            let mut json = Vec::new();
            write!(
                json,
                r#"{{"name":{:?},"city":{:?},"state":{:?}"#,
                p.name, p.city, p.state
            )?;
            for auction in self.waiting.remove(&p.id).unwrap_or_default() {
                self.emit(&json, auction, out)?;
            }
            self.persons.insert(p.id, json);
        } else if line.starts_with(br#"{"type":"auction","#) {
            let a: Auction = serde_json::from_slice(line)?;
            if a.category != 10 {
                return Ok(());
            }
            match self.persons.get(&a.seller) {
                Some(json) => {
                    let json = json.clone();
                    self.emit(&json, a.id, out)?;
                }
                None => self.waiting.entry(a.seller).or_default().push(a.id),
            }
        }
        Ok(())
    }

    fn emit(&mut self, person: &[u8], auction: u64, out: &mut Vec<u8>) -> anyhow::Result<()> {
        out.clear();
        out.extend_from_slice(person);
        write!(out, r#","id":{auction}}}"#)?;
        std::hint::black_box(&out);
        self.results += 1;
        Ok(())
    }
}

/// q7's window: the highest price and its bids (auction, bidder, date_time).
type Highest = (u64, Vec<(u64, u64, i64)>);

/// Runs `query` over the file natively; returns the number of results.
fn native(query: &str, path: &Path) -> anyhow::Result<u64> {
    let mut input = BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut line = Vec::new();
    let mut out = Vec::with_capacity(256);
    let mut results = 0u64;
    // q5: (window start) → auction → bids; q7: start → (price, bids);
    // q11: bidder → (start, last, count).
    let mut q5: HashMap<i64, HashMap<u64, u64>> = HashMap::new();
    let mut q7: HashMap<i64, Highest> = HashMap::new();
    let mut q11: HashMap<u64, (i64, i64, u64)> = HashMap::new();
    let mut q3 = Q3::default();
    let mut winning = WinningBids::default();
    let mut q8 = NewUsers::default();
    // q12: bidder → (processing-time window start, bids).
    let mut q12: HashMap<u64, (i64, u64)> = HashMap::new();
    let started = Instant::now();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        match query {
            "q3" => q3.event(&line, &mut out)?,
            "q4" | "q6" => winning.event(&line)?,
            "q8" => q8.event(&line)?,
            _ => {}
        }
        if matches!(query, "q3" | "q4" | "q6" | "q8") {
            continue;
        }
        if !line.starts_with(BID_PREFIX) {
            continue;
        }
        let bid: Bid = serde_json::from_slice(&line)?;
        out.clear();
        match query {
            "q0" | "q1" => {
                write!(
                    out,
                    r#"{{"auction":{},"bidder":{},"price":"#,
                    bid.auction, bid.bidder
                )?;
                if query == "q0" {
                    write!(out, "{}", bid.price)?;
                } else {
                    let m = u128::from(bid.price) * 908;
                    write!(out, "{}.{:03}", m / 1000, m % 1000)?;
                }
                write!(out, r#","date_time":{},"extra":"#, bid.date_time)?;
                serde_json::to_writer(&mut out, &bid.extra)?;
                out.push(b'}');
                std::hint::black_box(&out);
                results += 1;
            }
            "q2" => {
                if bid.auction.is_multiple_of(123) {
                    write!(
                        out,
                        r#"{{"auction":{},"price":{}}}"#,
                        bid.auction, bid.price
                    )?;
                    std::hint::black_box(&out);
                    results += 1;
                }
            }
            "q5" => {
                let last = bid.date_time - bid.date_time.rem_euclid(2000);
                let mut start = last;
                while start > bid.date_time - 10_000 {
                    *q5.entry(start).or_default().entry(bid.auction).or_default() += 1;
                    start -= 2000;
                }
            }
            "q7" => {
                let start = bid.date_time - bid.date_time.rem_euclid(10_000);
                let w = q7.entry(start).or_insert((0, Vec::new()));
                if bid.price > w.0 || w.1.is_empty() {
                    *w = (bid.price, Vec::new());
                }
                if bid.price == w.0 {
                    w.1.push((bid.auction, bid.bidder, bid.date_time));
                }
            }
            "q12" => {
                let now = started.elapsed().as_millis() as i64;
                let start = now - now % 10_000;
                let w = q12.entry(bid.bidder).or_insert((start, 0));
                if w.0 != start {
                    results += 1;
                    *w = (start, 0);
                }
                w.1 += 1;
            }
            "q11" => {
                let s = q11
                    .entry(bid.bidder)
                    .or_insert((bid.date_time, bid.date_time, 0));
                if bid.date_time - s.1 > 10_000 {
                    results += 1;
                    *s = (bid.date_time, bid.date_time, 0);
                }
                s.1 = bid.date_time;
                s.2 += 1;
            }
            other => bail!("unknown query {other}"),
        }
    }
    match query {
        "q5" => {
            for counts in q5.values() {
                let max = counts.values().max().copied().unwrap_or(0);
                std::hint::black_box(counts.iter().filter(|(_, n)| **n == max).count());
                results += 1;
            }
        }
        "q7" => results += q7.len() as u64,
        "q11" => results += q11.len() as u64,
        "q3" => results = q3.results,
        "q4" => results = winning.q4(&mut out)?,
        "q6" => results = winning.q6(&mut out)?,
        "q8" => results = q8.results(&mut out)?,
        "q12" => results += q12.len() as u64,
        _ => {}
    }
    Ok(results)
}
