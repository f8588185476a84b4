//! The contract: bindings generated from `wit/operator.wit`, world
//! `stream-operator`. The WIT file documents every item. At the bottom of
//! the layers: [`crate::record`] (the batch types) and [`crate::wasm`] (the
//! host side of every interface) both build on it, neither on the other.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../wit/operator.wit",
    world: "stream-operator",
    additional_derives: [PartialEq],
});
