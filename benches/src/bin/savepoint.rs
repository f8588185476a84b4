//! `savepoint`: how fast a savepoint is written from a checkpoint and
//! restored, beside the native checkpoint of the same state.
//!
//! ```text
//! cargo run --release -p weir-benches --bin savepoint -- [--keys 1000000] [--value-bytes 100] \
//!     [--subtasks 2] [--dir /var/tmp]
//! ```
//!
//! Fills one value state of `--subtasks` subtasks (each its key groups'
//! share of `--keys` keys of `--value-bytes` random bytes) through Weir's
//! RocksDB backend and takes a native checkpoint of each into a
//! [`DirStorage`] (the baseline: flush + RocksDB checkpoint + upload).
//! Then it times, on the same state:
//!
//! - **write**: [`materialize`] of that checkpoint into a savepoint
//!   directory (download, open, export in the canonical format, fsync);
//! - **restore**: [`restore_subtask`] of every subtask at the same
//!   parallelism and at twice it (import of the overlapping state files
//!   into a fresh RocksDB, local snapshot), then opening it and one read,
//!   on up to one thread per core, as a TaskManager prepares its subtasks.
//!
//! Throughput is the canonical state bytes (keys and values) per second.
//! Everything is on one disk under `--dir`: "upload" and "download" are
//! file copies, so the times are a floor for remote storage.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use weir_host::checkpoint::savepoint::directory::{
    CheckpointSource, SavepointMetadata, materialize, restore_subtask,
};
use weir_host::checkpoint::{DirStorage, StoragePath, upload};
use weir_host::job::{JobGraph, JobSpec, chain};
use weir_host::rpc::SubtaskCheckpoint;
use weir_host::state::{
    BackendConfig, BackendKind, StateDescriptor, StateKind, key_group_of,
    key_group_range_for_subtask, open_backend, restore_backend,
};

#[derive(Parser)]
#[command(about = "Savepoint write and restore throughput beside a native checkpoint")]
struct Cli {
    /// Keys in the value state, over all subtasks.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Subtasks of the keyed operator when the savepoint is taken.
    #[arg(long, default_value_t = 2)]
    subtasks: u32,
    /// Where the temp dirs go.
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
}

const MAX_PARALLELISM: u16 = 128;

fn spec(parallelism: u32) -> String {
    format!(
        r#"
[job]
name = "savepoint-bench"
max_parallelism = {MAX_PARALLELISM}

[[source]]
id = "src"
type = "generator"
kind = "sequence"
count = 1

[[operator]]
id = "count"
module = "count.wasm"
key_by = "value"
parallelism = {parallelism}

[[sink]]
id = "out"
type = "blackhole"
parallelism = {parallelism}

[[edge]]
from = "src"
to = "count"

[[edge]]
from = "count"
to = "out"
"#
    )
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let tmp = tempfile::Builder::new()
        .prefix("weir-savepoint-bench-")
        .tempdir_in(&cli.dir)
        .context("temp dir")?;
    let states = vec![StateDescriptor::new("count", StateKind::Value)];
    let graph = JobGraph::from_spec(JobSpec::parse(&spec(cli.subtasks), "/bench/job.toml", &[])?)?;
    let tasks = chain(&graph);
    let v = graph
        .vertices
        .iter()
        .position(|x| x.id.0 == "count")
        .context("the operator")?;
    let t = tasks
        .iter()
        .position(|t| t.vertices.contains(&v))
        .context("its task")? as u32;
    let storage = DirStorage::new(tmp.path().join("storage"));

    // The state, and the baseline: a native checkpoint of it.
    let fill = Instant::now();
    let mut parts = Vec::new();
    let mut checkpoint_time = Duration::ZERO;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut value = vec![0u8; cli.value_bytes];
    let mut canonical_bytes = 0u64;
    for s in 0..cli.subtasks {
        let range = key_group_range_for_subtask(MAX_PARALLELISM, cli.subtasks, s);
        let mut b = open_backend(BackendConfig {
            kind: BackendKind::RocksDb,
            dir: &tmp.path().join(format!("db-{s}")),
            states: &states,
            key_groups: range,
            max_parallelism: MAX_PARALLELISM,
        })?;
        for i in 0..cli.keys {
            let key = format!("key-{i:012}");
            if !range.contains(key_group_of(key.as_bytes(), MAX_PARALLELISM)) {
                continue;
            }
            for chunk in value.chunks_mut(8) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                chunk.copy_from_slice(&rng.to_le_bytes()[..chunk.len()]);
            }
            b.value_set(0, key.as_bytes(), &value)?;
            // Stored key: key group (2) + length (4) + key.
            canonical_bytes += (6 + key.len() + value.len()) as u64;
        }
        let started = Instant::now();
        let snap = tmp.path().join(format!("snap-{s}"));
        b.snapshot_local(&snap)?;
        let handle = upload(
            &snap,
            &storage,
            &StoragePath::new(format!("job/chk-1/{s}"))?,
            &StoragePath::new("job/shared")?,
            None,
            BackendKind::RocksDb,
        )?;
        checkpoint_time += started.elapsed();
        parts.push((
            (t, s),
            SubtaskCheckpoint {
                states: vec![(v, handle)],
                ..SubtaskCheckpoint::default()
            },
        ));
    }
    println!(
        "state: {} keys × {} B over {} subtask(s), {:.1} MB canonical (filled in {:.1} s)",
        cli.keys,
        cli.value_bytes,
        cli.subtasks,
        canonical_bytes as f64 / 1e6,
        fill.elapsed().as_secs_f64() - checkpoint_time.as_secs_f64()
    );
    println!(
        "native checkpoint (baseline): {:>7.2} s  {:>7.1} MB/s",
        checkpoint_time.as_secs_f64(),
        mb_per_s(canonical_bytes, checkpoint_time)
    );

    let out = tmp.path().join("savepoint");
    let by_vertex: HashMap<usize, Vec<StateDescriptor>> = HashMap::from([(v, states.clone())]);
    let started = Instant::now();
    let metadata: SavepointMetadata = materialize(
        &CheckpointSource {
            job_id: "job",
            job_name: "savepoint-bench",
            checkpoint: 1,
            graph: &graph,
            tasks: &tasks,
            parts: &parts,
            states: &by_vertex,
            storage: &storage,
        },
        &out,
        &mut |_| {},
    )?;
    let write = started.elapsed();
    let file_bytes: u64 = metadata
        .vertices
        .iter()
        .flat_map(|x| &x.subtasks)
        .filter_map(|s| s.state.as_ref())
        .map(|f| f.file.size)
        .sum();
    println!(
        "savepoint write:              {:>7.2} s  {:>7.1} MB/s  ({:.1} MB of files)",
        write.as_secs_f64(),
        mb_per_s(canonical_bytes, write),
        file_bytes as f64 / 1e6
    );

    let vertex = metadata
        .vertices
        .iter()
        .find(|x| x.uid == "count")
        .context("the operator in the savepoint")?;
    for parallelism in [cli.subtasks, cli.subtasks * 2] {
        let started = Instant::now();
        // As a TaskManager holding every subtask prepares them: on up to
        // one thread per core.
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(parallelism as usize);
        let next = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| -> anyhow::Result<()> {
                        loop {
                            let s = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if s >= parallelism {
                                return Ok(());
                            }
                            let work = tmp.path().join(format!("restore-{parallelism}-{s}"));
                            let restored = restore_subtask(
                                &out,
                                &metadata,
                                vertex,
                                s,
                                parallelism,
                                &states,
                                BackendKind::RocksDb,
                                &work,
                                None,
                            )?;
                            let range =
                                key_group_range_for_subtask(MAX_PARALLELISM, parallelism, s);
                            let mut b = restore_backend(
                                BackendConfig {
                                    kind: BackendKind::RocksDb,
                                    dir: &work.join("db"),
                                    states: &states,
                                    key_groups: range,
                                    max_parallelism: MAX_PARALLELISM,
                                },
                                restored.state_dir.as_ref().context("restored state")?,
                            )?;
                            let _ = b.value_get(0, b"key-000000000000");
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().expect("a restore thread panicked"))
        })?;
        let restore = started.elapsed();
        println!(
            "savepoint restore, p={} → {}:  {:>7.2} s  {:>7.1} MB/s",
            cli.subtasks,
            parallelism,
            restore.as_secs_f64(),
            mb_per_s(canonical_bytes, restore)
        );
    }
    Ok(())
}
