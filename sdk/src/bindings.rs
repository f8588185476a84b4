//! The code `wit-bindgen` generates from `wit/operator.wit`, world
//! `window-operator`: every operator built with the SDK exports
//! `migration` (states without a migration function keep their bytes, see
//! [`crate::StateDescriptor::with_migration`]) and `two-input` (a one-input
//! operator refuses a batch on input 1, see
//! [`crate::Operator::process_input`]), `processing-time` and
//! `window-function` (kind `none` but for window functions, see
//! [`crate::Operator::WINDOW_KIND`]).
//!
//! Owns nothing hand-written: the WIT types (`Batch`, `Emitted`, `SideOutput`,
//! ...), the imported host interfaces and the raw export macro. UDF crates do
//! not use this module directly: the SDK's traits and `export_*!` macros wrap
//! it. The import functions compile on every target but may only be *called*
//! on `wasm32` (natively they are `unreachable!()`); `crate::backend` is the
//! only caller.
//!
//! The generated code is allowed `unsafe_code` (the workspace denies it): the
//! canonical ABI glue reads and writes raw guest memory by design, and is
//! `wit-bindgen`'s responsibility, not ours. `missing_docs` and clippy are
//! silenced for the same reason: what is documented comes from the WIT docs.

#![allow(unsafe_code, missing_docs, clippy::all)]

wit_bindgen::generate!({
    world: "window-operator",
    path: "../wit/operator.wit",
    // UDF crates export through `weir_sdk::export_*!`, which expand to the
    // generated export macro: it must be `pub` and find the types here.
    pub_export_macro: true,
    export_macro_name: "__export_weir_stream_operator",
    default_bindings_module: "weir_sdk::bindings",
});

// Derives the batch types need (wit-bindgen 0.60, the version built on the
// same wasm-tools as the host's wasmtime 48, cannot add them per type).
mod impls {
    use super::weir::operator::types::{Batch, Emitted, SideOutput};

    impl Default for Batch {
        fn default() -> Self {
            Batch {
                timestamps: Vec::new(),
                key_lens: Vec::new(),
                value_lens: Vec::new(),
                data: Vec::new(),
            }
        }
    }

    impl PartialEq for Batch {
        fn eq(&self, other: &Self) -> bool {
            self.timestamps == other.timestamps
                && self.key_lens == other.key_lens
                && self.value_lens == other.value_lens
                && self.data == other.data
        }
    }

    impl Eq for Batch {}

    impl Default for Emitted {
        fn default() -> Self {
            Emitted {
                main: Batch::default(),
                side: Vec::new(),
            }
        }
    }

    impl PartialEq for Emitted {
        fn eq(&self, other: &Self) -> bool {
            self.main == other.main && self.side == other.side
        }
    }

    impl Eq for Emitted {}

    impl PartialEq for SideOutput {
        fn eq(&self, other: &Self) -> bool {
            self.tag == other.tag && self.records == other.records
        }
    }

    impl Eq for SideOutput {}
}
