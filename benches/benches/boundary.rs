//! The batch-encoding decision: what it costs to pass records across the
//! Wasm component boundary as a typed list, as one packed buffer with a list
//! of per-record metas, or as one packed buffer with per-record columns.
//!
//! The `boundary-probe` component (`udfs/boundary-probe`, world
//! `weir:boundary-bench/boundary-probe` in `wit/bench/boundary.wit`) exports
//! the same identity three times:
//! * `typed` (`typed-identity`): `list<typed-record>`, each record its own
//!   `option<list<u8>>` key and `list<u8>` value: one guest allocation per
//!   key and per value on the way in, one host `Vec` each on the way out;
//! * `packed-struct` (`packed-identity`): a `list<record-meta>` (timestamp,
//!   key length, value length) plus one flat `data` buffer, the contract's
//!   first draft: two allocations per batch, but wasmtime lowers and lifts
//!   the list of records one element and one field at a time;
//! * `columnar` (`columnar-identity`): `timestamps`, `key-lens` and
//!   `value-lens` as lists of integers plus `data`, the layout of the real
//!   contract's `batch`: four allocations per batch, each list copied in bulk.
//!
//! All three touch every value byte once in the guest. A fourth variant,
//! `flat-bytes`, calls `packed-identity` with no metas and a `data` buffer
//! as long as the packed batch's data plus its metas (16 bytes per record):
//! the cost of the same bytes crossing as one `list<u8>`, a floor for any
//! encoding. The guest touches nothing there, so compare it with
//! `identity/wasm` in `benches/operator.rs` (no touching either), not with
//! the other three.
//!
//! Records have
//! [`KEY_BYTES`]-byte keys and [`VALUE_BYTES`]-byte values; batch sizes are
//! [`BATCH_SIZES`]. Criterion reports time per batch and records/s
//! (`Throughput::Elements`). The probe runs on the engine of Weir's own
//! [`Runtime`] (same compiler settings, epoch interruption on), linked with
//! WASI only, as the probe needs nothing else.
//!
//! Results and the conclusion: `wit/README.md`, "Batch encoding: measurements".

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use wasmtime::Store;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use weir_benches::fixtures::{BATCH_SIZES, KEY_BYTES, VALUE_BYTES, key, keyed_batch, value};
use weir_host::record::META_BYTES;
use weir_host::wasm::{Runtime, RuntimeConfig};
use weir_tests::artifacts;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/bench/boundary.wit",
        world: "boundary-probe",
    });
}

use bindings::BoundaryProbe;
use bindings::exports::weir::boundary_bench::probe::{
    ColumnarBatch, PackedBatch, RecordMeta, TypedRecord,
};

/// Epoch ticks before a call is interrupted: effectively never (the
/// runtime's ticker advances the epoch every 10 ms).
const NO_DEADLINE: u64 = 1 << 40;

/// The store's data: WASI, which the probe imports because it is built
/// with `std` for `wasm32-wasip2`.
struct ProbeState {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for ProbeState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// An instantiated probe and its store.
struct Probe {
    store: Store<ProbeState>,
    probe: BoundaryProbe,
}

fn instantiate(runtime: &Runtime) -> Probe {
    let engine = runtime.engine();
    let component = Component::from_file(engine, Path::new(artifacts::BOUNDARY_PROBE))
        .expect("compile the boundary-probe component");
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("link WASI");
    let mut store = Store::new(
        engine,
        ProbeState {
            wasi: WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
        },
    );
    store.set_epoch_deadline(NO_DEADLINE);
    let probe =
        BoundaryProbe::instantiate(&mut store, &component, &linker).expect("instantiate the probe");
    Probe { store, probe }
}

/// `n` records as typed WIT values.
fn typed_records(n: usize) -> Vec<TypedRecord> {
    (0..n as u64)
        .map(|i| TypedRecord {
            key: Some(key(i).to_vec()),
            value: value(i, VALUE_BYTES),
            timestamp: i as i64,
        })
        .collect()
}

/// The same `n` records, packed with a list of metas.
fn packed_records(n: usize) -> PackedBatch {
    let batch = keyed_batch(n, VALUE_BYTES);
    PackedBatch {
        metas: (0..n)
            .map(|i| RecordMeta {
                timestamp: batch.timestamps[i],
                key_len: batch.key_lens[i],
                value_len: batch.value_lens[i],
            })
            .collect(),
        data: batch.data,
    }
}

/// The same `n` records, packed column by column (the contract's `batch`).
fn columnar_records(n: usize) -> ColumnarBatch {
    let batch = keyed_batch(n, VALUE_BYTES);
    ColumnarBatch {
        timestamps: batch.timestamps,
        key_lens: batch.key_lens,
        value_lens: batch.value_lens,
        data: batch.data,
    }
}

fn boundary(c: &mut Criterion) {
    let runtime = Runtime::new(RuntimeConfig { cache_dir: None }).expect("wasm runtime");
    let Probe { mut store, probe } = instantiate(&runtime);
    let guest = probe.weir_boundary_bench_probe();

    let mut group = c.benchmark_group("boundary");
    for n in BATCH_SIZES {
        group.throughput(Throughput::Elements(n as u64));

        let typed = typed_records(n);
        let out = guest
            .call_typed_identity(&mut store, &typed)
            .expect("typed-identity");
        assert_eq!(out.len(), n);
        assert!(
            out.iter()
                .zip(&typed)
                .all(|(a, b)| a.key == b.key && a.value == b.value && a.timestamp == b.timestamp)
        );
        group.bench_with_input(BenchmarkId::new("typed", n), &typed, |b, typed| {
            b.iter(|| {
                black_box(
                    guest
                        .call_typed_identity(&mut store, typed)
                        .expect("typed-identity"),
                )
            })
        });

        let packed = packed_records(n);
        let out = guest
            .call_packed_identity(&mut store, &packed)
            .expect("packed-identity");
        assert_eq!(out.data, packed.data);
        assert_eq!(out.metas.len(), n);
        assert_eq!(packed.data.len(), n * (KEY_BYTES + VALUE_BYTES));
        group.bench_with_input(
            BenchmarkId::new("packed-struct", n),
            &packed,
            |b, packed| {
                b.iter(|| {
                    black_box(
                        guest
                            .call_packed_identity(&mut store, packed)
                            .expect("packed-identity"),
                    )
                })
            },
        );

        let columnar = columnar_records(n);
        let out = guest
            .call_columnar_identity(&mut store, &columnar)
            .expect("columnar-identity");
        assert_eq!(
            (&out.timestamps, &out.key_lens, &out.value_lens, &out.data),
            (
                &columnar.timestamps,
                &columnar.key_lens,
                &columnar.value_lens,
                &columnar.data
            )
        );
        assert_eq!(columnar.data, packed.data);
        group.bench_with_input(BenchmarkId::new("columnar", n), &columnar, |b, columnar| {
            b.iter(|| {
                black_box(
                    guest
                        .call_columnar_identity(&mut store, columnar)
                        .expect("columnar-identity"),
                )
            })
        });

        let flat = PackedBatch {
            metas: Vec::new(),
            data: vec![0xa5; packed.data.len() + n * META_BYTES],
        };
        group.bench_with_input(BenchmarkId::new("flat-bytes", n), &flat, |b, flat| {
            b.iter(|| {
                black_box(
                    guest
                        .call_packed_identity(&mut store, flat)
                        .expect("packed-identity"),
                )
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
    targets = boundary
}
criterion_main!(benches);
