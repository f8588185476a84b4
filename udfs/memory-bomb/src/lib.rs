//! `memory-bomb` (sandbox test): allocates and touches memory forever on the
//! first batch with a record.
//!
//! 1 MiB chunks, every page written so the memory is really committed. The
//! host's memory cap must stop it (a failed allocation aborts, i.e. traps).

use std::hint::black_box;

use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};

/// The size of one allocation.
const CHUNK: usize = 1 << 20;
/// Wasm's page size: writing one byte per page touches all of it.
const PAGE: usize = 64 << 10;

/// The bomb.
pub struct MemoryBomb;

impl Operator for MemoryBomb {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(MemoryBomb)
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if input.is_empty() {
            return Ok(Emitted::empty());
        }
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut chunk = vec![0u8; CHUNK];
            for i in (0..CHUNK).step_by(PAGE) {
                chunk[i] = 0xA5;
            }
            hoard.push(black_box(chunk));
            black_box(&hoard);
        }
    }
}

weir_sdk::export_operator!(MemoryBomb);
