//! The code `wit-bindgen` generates from `wit/operator.wit`, world `stream-operator`.
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
    world: "stream-operator",
    path: "../wit/operator.wit",
    // UDF crates export through `weir_sdk::export_*!`, which expand to the
    // generated export macro: it must be `pub` and find the types here.
    pub_export_macro: true,
    export_macro_name: "__export_weir_stream_operator",
    default_bindings_module: "weir_sdk::bindings",
    additional_type_attributes: {
        "weir:operator/types@0.1.0/batch": [#[derive(Default, PartialEq, Eq)]],
        "weir:operator/types@0.1.0/emitted": [#[derive(Default, PartialEq, Eq)]],
        "weir:operator/types@0.1.0/side-output": [#[derive(PartialEq, Eq)]],
    },
});
