//! `boundary-probe`: the bench probe of `wit/bench/boundary.wit`, without the SDK.
//!
//! Does the same identity work on a typed list of records (one guest
//! allocation per key and value) and on a packed batch (two allocations in
//! all), touching every value byte once, so the benches can measure which
//! encoding crosses the Wasm boundary cheaper.

#![allow(unsafe_code)] // wit-bindgen's export glue

use std::hint::black_box;

wit_bindgen::generate!({
    world: "boundary-probe",
    path: "../../wit/bench/boundary.wit",
});

use exports::weir::boundary_bench::probe::{Guest, PackedBatch, TypedRecord};

/// The probe.
struct Probe;

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
        // Values sit between keys in `data`: walk the metas to touch the
        // same bytes as the typed side does. A malformed batch is touched
        // as far as it is valid; the probe only measures.
        let mut rest = &batch.data[..];
        for meta in &batch.metas {
            let key_len = usize::try_from(meta.key_len).unwrap_or(0);
            let Some(value) = rest.get(key_len..key_len + meta.value_len as usize) else {
                break;
            };
            touch(value);
            rest = &rest[key_len + value.len()..];
        }
        batch
    }
}

export!(Probe);
