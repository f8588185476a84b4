//! Host→guest cost per record through real operators, beside the same work
//! done natively.
//!
//! * `identity/{wasm,native}/N`: the `identity` operator through
//!   [`OperatorInstance::process`] (lower the batch into the guest, call,
//!   lift and validate the output) versus [`copy_batch`], the copy identity
//!   amounts to. Records are [`VALUE_BYTES`]-byte values without keys;
//!   batch sizes [`BATCH_SIZES`].
//! * `keyed_count/{wasm,native}_{rocksdb,heap}`: the `word-count` operator
//!   with `emit = "updates"` (per record: one state `get`, one `put`, one
//!   emitted record), over [`COUNT_KEYS`] distinct keys in batches of
//!   [`COUNT_BATCH`], with no `flush_state` between batches, as the task
//!   driver does between checkpoints (the RocksDB backend's write-back
//!   buffer flushes itself only when its dirty entries pass a size limit:
//!   these 100 000 counters fit, so RocksDB is written only at a flush);
//!   `native_*` is the same work in Rust against the same backend.
//!   `*_rocksdb_flushN` flushes the state every N batches ([`FLUSH_EVERY`])
//!   as a checkpoint does: every 100 batches is about once per write of
//!   each key, the worst case, with no update coalesced (a checkpoint
//!   every 50 ms at 2 M records/s); every 2000 batches is about a
//!   checkpoint per second at that rate.
//!   The raw RocksDB `get` + `put` floor is `benches/state.rs`
//!   (`state_get_put/raw_rocksdb`); run both in one session to compare.
//!
//! Every benchmark reports records/s (`Throughput::Elements`).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weir_benches::fixtures::{
    BATCH_SIZES, COUNT_BATCH, COUNT_KEYS, VALUE_BYTES, count_batches, unkeyed_batch,
};
use weir_benches::native::copy_batch;
use weir_host::record::Batch;
use weir_host::state::{
    BackendConfig, BackendKind, DEFAULT_MAX_PARALLELISM, KeyGroupRange, KeyedStateBackend,
    StateDescriptor, StateKind, open_backend,
};
use weir_host::wasm::{InstanceConfig, OperatorInstance, Runtime, RuntimeConfig};
use weir_tests::artifacts;

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig { cache_dir: None }).expect("wasm runtime")
}

fn identity(c: &mut Criterion) {
    let runtime = runtime();
    let module = runtime
        .load(Path::new(artifacts::IDENTITY))
        .expect("load identity");
    let mut instance = runtime
        .instantiate(&module, InstanceConfig::new("identity"))
        .expect("instantiate identity");
    instance.open().expect("open identity");

    let mut group = c.benchmark_group("identity");
    for n in BATCH_SIZES {
        let batch = unkeyed_batch(n, VALUE_BYTES);
        let out = instance.process(&batch).expect("process");
        assert_eq!(out.main, batch);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("wasm", n), &batch, |b, batch| {
            b.iter(|| black_box(instance.process(batch).expect("process")))
        });
        group.bench_with_input(BenchmarkId::new("native", n), &batch, |b, batch| {
            b.iter(|| black_box(copy_batch(batch)))
        });
    }
    group.finish();
}

/// The states `word-count` declares.
fn count_states() -> [StateDescriptor; 1] {
    [StateDescriptor::new("count", StateKind::Value)]
}

fn backend(kind: BackendKind, dir: &Path) -> Box<dyn KeyedStateBackend> {
    open_backend(BackendConfig {
        kind,
        dir,
        states: &count_states(),
        key_groups: KeyGroupRange::all(DEFAULT_MAX_PARALLELISM),
        max_parallelism: DEFAULT_MAX_PARALLELISM,
    })
    .expect("open backend")
}

fn word_count_instance(runtime: &Runtime, kind: BackendKind, dir: &Path) -> OperatorInstance {
    let module = runtime
        .load(Path::new(artifacts::WORD_COUNT))
        .expect("load word-count");
    let info = runtime.describe(&module).expect("describe word-count");
    assert_eq!(info.states.len(), 1, "word-count declares one state");
    let mut config = InstanceConfig::new("count");
    config.config = vec![("emit".into(), "updates".into())];
    let mut instance = runtime
        .instantiate(&module, config)
        .expect("instantiate word-count");
    instance.attach_state(
        backend(kind, dir),
        KeyGroupRange::all(DEFAULT_MAX_PARALLELISM),
    );
    instance.open().expect("open word-count");
    instance
}

/// `word-count`'s per-record work in Rust: read the count, add one, write
/// it back (8 bytes, little-endian, as the SDK's codec stores a `u64`) and
/// emit `"{word}\t{count}"` keyed by the word (the count formatted with
/// `itoa`, as the operator does).
fn native_count(backend: &mut dyn KeyedStateBackend, input: &Batch) -> Batch {
    let mut out = Batch::with_capacity(input.len(), input.data.len() + input.len() * 8);
    let mut value = Vec::with_capacity(64);
    for r in input.iter() {
        let key = r.key.expect("keyed input");
        let previous = backend.value_get(0, key).expect("get");
        let count = previous.map_or(0, |v| u64::from_le_bytes(v.try_into().expect("u64"))) + 1;
        backend
            .value_set(0, key, &count.to_le_bytes())
            .expect("set");
        value.clear();
        value.extend_from_slice(key);
        value.push(b'\t');
        value.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
        out.push(Some(key), &value, r.timestamp);
    }
    out
}

/// Batches between two state flushes in the `*_flushN` variants.
const FLUSH_EVERY: [usize; 2] = [100, 2000];

fn keyed_count(c: &mut Criterion) {
    let runtime = runtime();
    let batches = count_batches();
    let mut group = c.benchmark_group("keyed_count");
    group.throughput(Throughput::Elements(COUNT_BATCH as u64));
    assert!(batches.len() * COUNT_BATCH >= COUNT_KEYS as usize);

    let variants = [
        (BackendKind::RocksDb, None),
        (BackendKind::RocksDb, Some(FLUSH_EVERY[0])),
        (BackendKind::RocksDb, Some(FLUSH_EVERY[1])),
        (BackendKind::Heap, None),
    ];
    for (kind, flush_every) in variants {
        let suffix = flush_every.map_or(String::new(), |n| format!("_flush{n}"));
        let flush_now = move |next: usize| flush_every.is_some_and(|n| next.is_multiple_of(n));
        let dir = tempfile::tempdir().expect("temp dir");
        let mut instance = word_count_instance(&runtime, kind, dir.path());
        let mut next = 0;
        group.bench_function(format!("wasm_{kind}{suffix}"), |b| {
            b.iter(|| {
                let batch = &batches[next % batches.len()];
                next += 1;
                let out = instance.process(batch).expect("process");
                if flush_now(next) {
                    instance.flush_state().expect("flush");
                }
                debug_assert_eq!(out.main.len(), COUNT_BATCH);
                black_box(out)
            })
        });

        let dir = tempfile::tempdir().expect("temp dir");
        let mut state = backend(kind, dir.path());
        let mut next = 0;
        group.bench_function(format!("native_{kind}{suffix}"), |b| {
            b.iter(|| {
                let batch = &batches[next % batches.len()];
                next += 1;
                let out = native_count(state.as_mut(), batch);
                if flush_now(next) {
                    state.flush().expect("flush");
                }
                black_box(out)
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the benchmark machine has two cores shared with builds.
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = identity, keyed_count
}
criterion_main!(benches);
