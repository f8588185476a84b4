//! `boundary-probe`: the bench probe of `wit/bench/boundary.wit`, without the SDK.
//!
//! Does the same identity work on a typed list of records (one guest
//! allocation per key and value), on a packed batch with a list of
//! per-record metas (two allocations in all) and on a columnar batch (four
//! lists of integers and bytes, the contract's layout), touching every value
//! byte once, so the benches can measure which encoding crosses the Wasm
//! boundary cheaper.

#![allow(unsafe_code)] // wit-bindgen's export glue

use std::hint::black_box;

wit_bindgen::generate!({
    world: "boundary-probe",
    path: "../../wit/bench/boundary.wit",
});

use exports::weir::boundary_bench::probe::{ColumnarBatch, Guest, PackedBatch, TypedRecord};

/// The probe.
struct Probe;

/// Touches every value of `data`, whose records have the key and value
/// lengths `lens`. A malformed batch is touched as far as it is valid; the
/// probe only measures.
fn touch_values(data: &[u8], lens: impl Iterator<Item = (i32, u32)>) {
    // Values sit between keys in `data`: walk the lengths to touch the same
    // bytes as the typed side does.
    let mut rest = data;
    for (key_len, value_len) in lens {
        let key_len = usize::try_from(key_len).unwrap_or(0);
        let Some(value) = rest.get(key_len..key_len + value_len as usize) else {
            break;
        };
        touch(value);
        rest = &rest[key_len + value.len()..];
    }
}

/// Sums `bytes` so that reading them cannot be optimized away.
fn touch(bytes: &[u8]) {
    let sum = bytes
        .iter()
        .fold(0u64, |sum, &b| sum.wrapping_add(u64::from(b)));
    black_box(sum);
}

impl Guest for Probe {
    fn typed_identity(records: Vec<TypedRecord>) -> Vec<TypedRecord> {
        for record in &records {
            touch(&record.value);
        }
        records
    }

    fn packed_identity(batch: PackedBatch) -> PackedBatch {
        touch_values(
            &batch.data,
            batch.metas.iter().map(|m| (m.key_len, m.value_len)),
        );
        batch
    }

    fn columnar_identity(batch: ColumnarBatch) -> ColumnarBatch {
        touch_values(
            &batch.data,
            batch
                .key_lens
                .iter()
                .copied()
                .zip(batch.value_lens.iter().copied()),
        );
        batch
    }
}

export!(Probe);
