//! Keyed-state microbenchmark: the hot path of a keyed operator, one state
//! `get` + `put` per record (read a u64 count, add one, write it back).
//!
//! Three contenders, measured in the same run:
//! * `rocksdb`: Weir's RocksDB backend, never flushed explicitly while
//!   measured, as the task driver does not flush between batches (the
//!   backend's write-back buffer flushes itself by size);
//! * `heap`: Weir's heap backend;
//! * `raw_rocksdb`: plain `get` + `put` on a RocksDB column family with the
//!   WAL disabled and the backend's key layout, table and memtable options —
//!   the baseline the RocksDB backend is compared with (target: within 1.5x).
//!   The backend can beat it: its buffer serves hot reads without a memtable
//!   lookup and hands RocksDB each flush's writes sorted by key.
//!
//! Keys: [`KEYS`] distinct keys, visited in a fixed pseudo-random order (a
//! multiplicative permutation), so every run does the same work.
//!
//! `state_cold_batch` is the read path of a keyed operator whose keys do
//! not fit the backend's buffer, as in the checkpointing benchmark: a batch
//! of 1024 records of [`COLD_KEYS`] keys (each read and rewritten), a
//! checkpoint (`snapshot_local`: a memtable flush into a level-0 file) every
//! [`COLD_CHECKPOINT_EVERY`] batches. `multi_get` reads each batch's keys
//! with `value_get_many_into`, as `value-get-many` does (one RocksDB
//! `MultiGet` for the keys the buffer misses); `one_by_one` reads them with
//! `value_get_into`, one point lookup each, as before it.
//!
//! `state_flush` is the synchronous work of a checkpoint (and of the
//! buffer's write-back limit) when most of the buffer is dirty: the time of
//! one `flush` — the dirty slots sorted and written to RocksDB in one
//! `WriteBatch` — after [`FLUSH_KEYS`] distinct keys were each written once
//! (the writes themselves are not timed).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, DBCompressionType, Options, ReadOptions,
    WriteOptions,
};
use weir_host::state::rocksdb::{BLOCK_CACHE_BYTES, DB_WRITE_BUFFER_BYTES, WRITE_BUFFER_BYTES};
use weir_host::state::{
    BackendConfig, BackendKind, DEFAULT_MAX_PARALLELISM, KeyGroupRange, KeyedStateBackend,
    StateDescriptor, StateKind, key_group_of, layout, open_backend,
};

/// Distinct keys.
const KEYS: u64 = 100_000;
/// Multiplier of the visiting order; coprime with `KEYS`, so `i * STRIDE % KEYS`
/// is a permutation.
const STRIDE: u64 = 48_271;

/// Distinct keys of `state_cold_batch`: about 90 MB of buffer slots, so
/// most reads miss the backend's 32 MiB buffer.
const COLD_KEYS: u64 = 1_000_000;
/// Batches between two checkpoints in `state_cold_batch`: about a second's
/// worth at the rate a subtask reaches in the checkpointing benchmark.
const COLD_CHECKPOINT_EVERY: u64 = 300;
/// Records per batch.
const BATCH: u64 = 1024;

/// Dirty keys per `state_flush` flush: about 27 MB of buffer slots, under
/// the buffer's 32 MiB limits, so the buffer does not flush them itself.
const FLUSH_KEYS: u64 = 300_000;

/// The key of the `i`-th record.
fn key(i: u64) -> [u8; 12] {
    let mut k = *b"user\0\0\0\0\0\0\0\0";
    k[4..].copy_from_slice(&((i * STRIDE) % KEYS).to_be_bytes());
    k
}

fn count(value: Option<&[u8]>) -> u64 {
    value.map_or(0, |v| {
        u64::from_le_bytes(v.try_into().expect("8-byte count"))
    })
}

fn open(kind: BackendKind, dir: &std::path::Path) -> Box<dyn KeyedStateBackend> {
    open_backend(BackendConfig {
        kind,
        dir,
        states: &[StateDescriptor::new("count", StateKind::Value)],
        key_groups: KeyGroupRange::all(DEFAULT_MAX_PARALLELISM),
        max_parallelism: DEFAULT_MAX_PARALLELISM,
    })
    .expect("open backend")
}

fn bench_backend(c: &mut Criterion, name: &str, kind: BackendKind) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut backend = open(kind, dir.path());
    let mut i = 0u64;
    let mut group = c.benchmark_group("state_get_put");
    group.throughput(Throughput::Elements(1));
    group.bench_function(name, |b| {
        b.iter(|| {
            let k = key(i);
            let n = count(backend.value_get(0, &k).expect("get").as_deref());
            backend
                .value_set(0, &k, &(n + 1).to_le_bytes())
                .expect("set");
            i += 1;
        })
    });
    group.finish();
    backend.flush().expect("flush");
}

fn bench_raw_rocksdb(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut cf_opts = Options::default();
    cf_opts.set_block_based_table_factory(&table);
    cf_opts.set_write_buffer_size(WRITE_BUFFER_BYTES);
    cf_opts.set_level_compaction_dynamic_level_bytes(true);
    cf_opts.set_compression_type(DBCompressionType::Lz4);
    let mut db_opts = Options::default();
    db_opts.create_if_missing(true);
    db_opts.create_missing_column_families(true);
    db_opts.set_max_background_jobs(2);
    db_opts.set_db_write_buffer_size(DB_WRITE_BUFFER_BYTES);
    let db = DB::open_cf_descriptors(
        &db_opts,
        dir.path(),
        [ColumnFamilyDescriptor::new("state:count", cf_opts)],
    )
    .expect("open rocksdb");
    let cf = db.cf_handle("state:count").expect("column family");
    let read_opts = ReadOptions::default();
    let mut write_opts = WriteOptions::default();
    write_opts.disable_wal(true);

    let mut stored_key = Vec::with_capacity(32);
    let mut i = 0u64;
    let mut group = c.benchmark_group("state_get_put");
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw_rocksdb", |b| {
        b.iter(|| {
            let k = key(i);
            let kg = key_group_of(&k, DEFAULT_MAX_PARALLELISM);
            layout::encode_key(&mut stored_key, kg, &k).expect("key");
            let n = count(
                db.get_pinned_cf_opt(cf, &stored_key, &read_opts)
                    .expect("get")
                    .as_deref(),
            );
            db.put_cf_opt(cf, &stored_key, (n + 1).to_le_bytes(), &write_opts)
                .expect("put");
            i += 1;
        })
    });
    group.finish();
}

/// The key of the `i`-th record of `state_cold_batch`.
fn cold_key(i: u64) -> [u8; 12] {
    let mut k = *b"user\0\0\0\0\0\0\0\0";
    k[4..].copy_from_slice(&((i * STRIDE) % COLD_KEYS).to_be_bytes());
    k
}

fn bench_cold_batch(c: &mut Criterion, name: &str, batched: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut backend = open(BackendKind::RocksDb, &dir.path().join("db"));
    for i in 0..COLD_KEYS {
        backend
            .value_set(0, &cold_key(i), &0u64.to_le_bytes())
            .expect("set");
    }
    backend.flush().expect("flush");
    let (mut i, mut batches, mut checkpoints) = (0u64, 0u64, 0u64);
    let (mut out, mut lens) = (Vec::new(), Vec::new());
    let mut group = c.benchmark_group("state_cold_batch");
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function(name, |b| {
        b.iter(|| {
            let keys: Vec<[u8; 12]> = (i..i + BATCH).map(cold_key).collect();
            let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            out.clear();
            lens.clear();
            if batched {
                backend
                    .value_get_many_into(0, &keys, &mut out, &mut lens)
                    .expect("get many");
            } else {
                for key in &keys {
                    let start = out.len();
                    let found = backend.value_get_into(0, key, &mut out).expect("get");
                    lens.push(found.then(|| out.len() - start));
                }
            }
            let mut at = 0;
            for (key, len) in keys.iter().zip(&lens) {
                let n = count(len.map(|len| {
                    at += len;
                    &out[at - len..at]
                }));
                backend
                    .value_set(0, key, &(n + 1).to_le_bytes())
                    .expect("set");
            }
            i += BATCH;
            batches += 1;
            if batches % COLD_CHECKPOINT_EVERY == 0 {
                let snapshot = dir.path().join(format!("checkpoint-{checkpoints}"));
                backend.snapshot_local(&snapshot).expect("checkpoint");
                std::fs::remove_dir_all(&snapshot).expect("remove checkpoint");
                checkpoints += 1;
            }
        })
    });
    group.finish();
}

fn bench_flush(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut backend = open(BackendKind::RocksDb, &dir.path().join("db"));
    let mut round = 0u64;
    let mut group = c.benchmark_group("state_flush");
    group.throughput(Throughput::Elements(FLUSH_KEYS));
    group.sample_size(20);
    group.bench_function("dirty_300k", |b| {
        b.iter_custom(|iters| {
            let mut timed = std::time::Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                for i in 0..FLUSH_KEYS {
                    backend
                        .value_set(0, &cold_key(i), &round.to_le_bytes())
                        .expect("set");
                }
                let start = std::time::Instant::now();
                backend.flush().expect("flush");
                timed += start.elapsed();
            }
            timed
        })
    });
    group.finish();
}

fn state(c: &mut Criterion) {
    bench_backend(c, "rocksdb", BackendKind::RocksDb);
    bench_backend(c, "heap", BackendKind::Heap);
    bench_raw_rocksdb(c);
    bench_cold_batch(c, "multi_get", true);
    bench_cold_batch(c, "one_by_one", false);
    bench_flush(c);
}

criterion_group!(benches, state);
criterion_main!(benches);
