//! `incremental-checkpoint` (`src/bin/incremental.rs`; cargo forbids a binary named
//! `incremental`): how much an incremental RocksDB checkpoint uploads.
//!
//! ```text
//! cargo run --release -p weir-benches --bin incremental-checkpoint -- [--keys 1000000] [--value-bytes 100] \
//!     [--change-percent 1] [--rounds 10]
//! ```
//!
//! Fills one value state with `--keys` keys of `--value-bytes` random
//! (incompressible) bytes through Weir's RocksDB backend, takes checkpoint
//! 1 (full) into a [`DirStorage`], changes `--change-percent` of the keys,
//! takes checkpoint 2 with checkpoint 1 as `previous`, and prints the bytes
//! each uploaded, their ratio, and the time of the synchronous part
//! (`snapshot_local`: flush + RocksDB checkpoint) and of the upload. Then
//! `--rounds` more rounds of the same change show the steady state, when
//! RocksDB compactions rewrite files between checkpoints. Last, the time to
//! restore the latest checkpoint (download + open + first read).
//!
//! Storage and the database live in temp dirs under `--dir` (default
//! `/var/tmp`), on one disk: "upload" is a file copy plus fsync, so the
//! durations are a floor for a remote store; the byte counts are what any
//! store would receive.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Parser;
use weir_host::checkpoint::{DirStorage, StateHandle, StoragePath, download, upload};
use weir_host::state::{
    BackendConfig, BackendKind, DEFAULT_MAX_PARALLELISM, KeyGroupRange, KeyedStateBackend,
    StateDescriptor, StateKind, open_backend, restore_backend,
};

#[derive(Parser)]
#[command(about = "Bytes uploaded by incremental RocksDB checkpoints")]
struct Cli {
    /// Keys in the value state.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Percent of the keys changed between checkpoints.
    #[arg(long, default_value_t = 1.0)]
    change_percent: f64,
    /// Further checkpoints after the second, each after the same change.
    #[arg(long, default_value_t = 10)]
    rounds: u64,
    /// Where the temp dirs for the database and the storage go.
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
}

/// xorshift64: deterministic, fast, incompressible enough for LZ4.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let x = self.next().to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:010}").into_bytes()
}

/// One checkpoint's numbers.
struct Taken {
    handle: StateHandle,
    sync: Duration,
    upload: Duration,
}

fn checkpoint(
    db: &mut dyn KeyedStateBackend,
    storage: &DirStorage,
    work: &Path,
    n: u64,
    previous: Option<&StateHandle>,
) -> anyhow::Result<Taken> {
    let local = work.join(format!("snap-{n}"));
    let t = Instant::now();
    db.snapshot_local(&local)?;
    let sync = t.elapsed();
    let t = Instant::now();
    let handle = upload(
        &local,
        storage,
        &StoragePath::new(format!("chk-{n}/op/0"))?,
        &StoragePath::new("shared/op/0")?,
        previous,
        BackendKind::RocksDb,
    )?;
    let upload = t.elapsed();
    std::fs::remove_dir_all(&local)?;
    Ok(Taken {
        handle,
        sync,
        upload,
    })
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn print(n: u64, taken: &Taken, reused: usize) {
    let h = &taken.handle;
    let ssts = h.files.iter().filter(|f| f.shared).count();
    println!(
        "checkpoint {n:>2}: full {:>8.2} MB in {ssts:>3} SST files ({reused:>3} reused), \
         uploaded {:>8.3} MB = {:>6.2}% of full; sync part {:>6.1} ms, upload {:>7.1} ms",
        mb(h.full_size),
        mb(h.incremental_size),
        100.0 * h.incremental_size as f64 / h.full_size as f64,
        taken.sync.as_secs_f64() * 1e3,
        taken.upload.as_secs_f64() * 1e3,
    );
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let tmp = tempfile::Builder::new()
        .prefix("weir-incremental-")
        .tempdir_in(&cli.dir)
        .context("temp dir")?;
    let storage = DirStorage::new(tmp.path().join("storage"));
    let states = [StateDescriptor::new("value", StateKind::Value)];
    let cfg = |dir| BackendConfig {
        kind: BackendKind::RocksDb,
        dir,
        states: &states,
        key_groups: KeyGroupRange::all(DEFAULT_MAX_PARALLELISM),
        max_parallelism: DEFAULT_MAX_PARALLELISM,
    };
    let db_dir = tmp.path().join("db");
    let mut db = open_backend(cfg(&db_dir))?;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut value = vec![0u8; cli.value_bytes];

    let t = Instant::now();
    for i in 0..cli.keys {
        rng.fill(&mut value);
        db.value_set(0, &key(i), &value)?;
        if i % 10_000 == 9_999 {
            db.flush()?;
        }
    }
    db.flush()?;
    println!(
        "loaded {} keys x {} B values ({:.0} MB of keys and values) in {:.1} s",
        cli.keys,
        cli.value_bytes,
        mb(cli.keys * (key(0).len() + cli.value_bytes) as u64),
        t.elapsed().as_secs_f64()
    );

    let changes = ((cli.keys as f64 * cli.change_percent / 100.0) as u64).max(1);
    let mut change = |db: &mut dyn KeyedStateBackend| -> anyhow::Result<()> {
        for _ in 0..changes {
            let i = rng.next() % cli.keys;
            let mut v = vec![0u8; cli.value_bytes];
            rng.fill(&mut v);
            db.value_set(0, &key(i), &v)?;
        }
        db.flush()?;
        Ok(())
    };

    let first = checkpoint(&mut *db, &storage, tmp.path(), 1, None)?;
    print(1, &first, 0);
    change(&mut *db)?;
    let second = checkpoint(&mut *db, &storage, tmp.path(), 2, Some(&first.handle))?;
    let reused = |prev: &StateHandle, next: &StateHandle| {
        next.files
            .iter()
            .filter(|f| f.shared && prev.files.contains(f))
            .count()
    };
    print(2, &second, reused(&first.handle, &second.handle));
    let ratio = second.handle.incremental_size as f64 / first.handle.incremental_size as f64;
    println!(
        "RESULT changed {changes} keys ({}%): checkpoint 2 uploaded {:.3} MB = {:.2}% of \
         checkpoint 1's {:.2} MB (goal < 5%, acceptance < 10%)",
        cli.change_percent,
        mb(second.handle.incremental_size),
        100.0 * ratio,
        mb(first.handle.incremental_size),
    );

    let mut last = second;
    let mut uploaded = Vec::new();
    for n in 3..3 + cli.rounds {
        change(&mut *db)?;
        let next = checkpoint(&mut *db, &storage, tmp.path(), n, Some(&last.handle))?;
        print(n, &next, reused(&last.handle, &next.handle));
        uploaded.push(next.handle.incremental_size);
        last = next;
    }
    if !uploaded.is_empty() {
        let mean = uploaded.iter().sum::<u64>() as f64 / uploaded.len() as f64;
        println!(
            "RESULT steady state over checkpoints 3..{}: mean upload {:.3} MB = {:.2}% of \
             checkpoint 1, max {:.3} MB = {:.2}%",
            2 + cli.rounds,
            mean / 1e6,
            100.0 * mean / first.handle.incremental_size as f64,
            mb(*uploaded.iter().max().expect("not empty")),
            100.0 * *uploaded.iter().max().expect("not empty") as f64
                / first.handle.incremental_size as f64,
        );
    }

    // Restore the latest checkpoint and read one key back.
    let probe = key(cli.keys / 2);
    let expected = db.value_get(0, &probe)?;
    drop(db);
    let t = Instant::now();
    let download_dir = tmp.path().join("download");
    download(&last.handle, &storage, &download_dir)?;
    let downloaded = t.elapsed();
    let restored_dir = tmp.path().join("restored");
    let mut restored = restore_backend(cfg(&restored_dir), &download_dir)?;
    let got = restored.value_get(0, &probe)?;
    let total = t.elapsed();
    ensure!(got == expected, "restored state differs at key {probe:?}");
    println!(
        "RESULT restore of {:.2} MB: download {:.0} ms, then open + first read {:.0} ms \
         (total {:.0} ms)",
        mb(last.handle.full_size),
        downloaded.as_secs_f64() * 1e3,
        (total - downloaded).as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
    );
    Ok(())
}
