//! `nexmark`: the Nexmark queries of `udfs/jobs/nexmark/` in Weir beside the
//! same queries as plain Rust loops, over one generated file, each pinned to
//! the same cores, in one run.
//!
//! ```text
//! cargo build --release --workspace
//! cargo build --release --target wasm32-wasip2 --manifest-path udfs/Cargo.toml --target-dir udfs/target
//! target/release/nexmark [--events 2000000] [--queries q0,q1,q2,q5,q7,q11] [--parallelism 1,2] [--backend rocksdb]
//! ```
//!
//! The harness writes `--events` Nexmark events once (Weir's `nexmark`
//! generator, as `udfs/jobs/nexmark/generate.toml` does) to a JSON-lines
//! file. For each query it runs:
//!
//! * **Weir**: `weir run --json` of the committed `qN.toml` with its source
//!   replaced by a file source over that file (`json-lines`,
//!   `timestamp_field = "date_time"`: the same records the generator makes)
//!   and its sink by a blackhole, at each `--parallelism`, pinned with
//!   `taskset` to that many cores. Wall time is the job's as `weir run`
//!   reports it (`elapsed_ms`, submission to end; compiling the modules
//!   comes before and is cached after the first run); CPU time is the
//!   child process's user + system time, start-up included (so events per
//!   CPU-second slightly understates Weir).
//! * **native**: this binary, in a child pinned to one core, reading the
//!   same file line by line, parsing the bids with serde_json as the Wasm
//!   operators do, and computing the query with `HashMap`s: the floor.
//!
//! Both must produce the same number of results (the harness checks). The
//! table prints events/s, events per CPU-second, and Weir's ratio to
//! native. Flink beside them is still to come (issue 16).

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
    #[arg(long, value_delimiter = ',', default_value = "q0,q1,q2,q3,q5,q7,q11")]
    queries: Vec<String>,
    /// Weir parallelisms to run, comma-separated (each pinned to as many cores).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
    /// Weir's state backend.
    #[arg(long, default_value = "rocksdb")]
    backend: String,
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
    println!(
        "{:<5} {:<14} {:>10} {:>12} {:>14} {:>9} {:>9}",
        "query", "run", "results", "events/s", "events/CPU-s", "÷native", "CPU÷nat"
    );
    for query in &cli.queries {
        let ((results, secs), _, cpu) = child_cpu(|| {
            let out = Command::new("taskset")
                .args(["-c", "0"])
                .arg(&exe)
                .args(["--native", query])
                .arg(&events)
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
        let native_rate = cli.events as f64 / secs;
        let native_cpu_rate = cli.events as f64 / cpu;
        row(
            query,
            "native p=1",
            results,
            native_rate,
            native_cpu_rate,
            None,
        );
        for &p in &cli.parallelism {
            let spec = bench_spec(query, &events, dir.path(), p, &cli.backend)?;
            let cores = if p == 1 {
                "0".to_string()
            } else {
                format!("0-{}", p - 1)
            };
            let ((got, job_secs), _, cpu) = child_cpu(|| {
                let out = Command::new("taskset")
                    .args(["-c", &cores])
                    .arg(&weir)
                    .args(["run", "--json", "--allow-path"])
                    .arg(dir.path())
                    .arg(&spec)
                    .env("WEIR_CACHE_DIR", dir.path().join("cache"))
                    .output()?;
                if !out.status.success() {
                    bail!("weir {query}: {}", String::from_utf8_lossy(&out.stderr));
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
            if got != results {
                bail!("{query} p={p}: Weir emitted {got} results, native {results}");
            }
            let rate = cli.events as f64 / job_secs;
            let cpu_rate = cli.events as f64 / cpu;
            row(
                query,
                &format!("weir p={p}"),
                got,
                rate,
                cpu_rate,
                Some((rate / native_rate, cpu_rate / native_cpu_rate)),
            );
        }
    }
    Ok(())
}

fn row(query: &str, run: &str, results: u64, rate: f64, cpu_rate: f64, ratio: Option<(f64, f64)>) {
    let (r, c) = match ratio {
        Some((r, c)) => (format!("{r:.2}"), format!("{c:.2}")),
        None => ("—".into(), "—".into()),
    };
    println!(
        "{query:<5} {run:<14} {results:>10} {:>12} {:>14} {r:>9} {c:>9}",
        format!("{:.2} M", rate / 1e6),
        format!("{:.2} M", cpu_rate / 1e6)
    );
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

/// The committed `qN.toml` with a file source over `events` and a
/// blackhole sink, written into `dir`.
fn bench_spec(
    query: &str,
    events: &Path,
    dir: &Path,
    parallelism: u32,
    backend: &str,
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
    source.insert("format".into(), "json-lines".into());
    source.insert("timestamp_field".into(), "date_time".into());
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
    let path = dir.join(format!("{query}-p{parallelism}.toml"));
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

/// The fields of an auction q3 reads.
#[derive(Deserialize)]
struct Auction {
    id: u64,
    seller: u64,
    category: u64,
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
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if query == "q3" {
            q3.event(&line, &mut out)?;
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
        _ => {}
    }
    Ok(results)
}
