//! Bad input gets a clear message, a non-zero exit and no panic: missing
//! modules, files that are not components, components that do not implement
//! the contract, and invalid job specs.

use std::path::Path;

use weir_tests::artifacts;

use crate::util::{assert_fails_with, run_weir, toml_path};

/// A one-operator job over a generator, with `module` as the operator.
fn spec_with_module(module: &Path) -> String {
    format!(
        r#"
[job]
name = "bad"

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
count = 10

[[operator]]
id = "op"
module = {module}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "gen"
to = "op"

[[edge]]
from = "op"
to = "out"
"#,
        module = toml_path(module)
    )
}

fn run_spec(spec: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, spec).unwrap();
    run_weir(&dir.path().join("cache"), &["run", path.to_str().unwrap()])
}

#[test]
fn missing_module_names_the_operator_and_path() {
    let out = run_spec(&spec_with_module(Path::new("/nonexistent/op.wasm")));
    assert_fails_with(&out, 2, &["/nonexistent/op.wasm", "op"]);
}

#[test]
fn random_bytes_are_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("garbage.wasm");
    std::fs::write(&module, b"this is not wasm at all").unwrap();
    let out = run_spec(&spec_with_module(&module));
    assert_fails_with(&out, 2, &["garbage.wasm", "not a WebAssembly file"]);
}

#[test]
fn core_module_is_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("core.wasm");
    // The smallest valid core module: magic and version 1.
    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    let out = run_spec(&spec_with_module(&module));
    assert_fails_with(&out, 2, &["core WebAssembly module, not a component"]);
}

#[test]
fn component_of_another_world_does_not_fit_the_contract() {
    let out = run_spec(&spec_with_module(Path::new(artifacts::BOUNDARY_PROBE)));
    assert_fails_with(&out, 2, &["contract mismatch", "weir:operator"]);

    let dir = tempfile::tempdir().unwrap();
    let inspect = run_weir(dir.path(), &["inspect", artifacts::BOUNDARY_PROBE]);
    assert_fails_with(&inspect, 2, &["does not implement weir:operator@0.1.3"]);
    assert!(String::from_utf8_lossy(&inspect.stdout).contains("weir:boundary-bench/probe"));
}

#[test]
fn inspect_shows_exports_and_declared_state() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_weir(dir.path(), &["inspect", "--json", artifacts::WORD_COUNT]);
    assert!(out.status.success(), "{}", crate::util::describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["contract"]["fits"], true);
    assert_eq!(v["contract"]["keyed"], true);
    assert_eq!(v["contract"]["states"][0]["kind"], "value");
    let exports: Vec<&str> = v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        exports
            .iter()
            .any(|e| e.starts_with("weir:operator/operator")),
        "{exports:?}"
    );
}

/// A valid two-vertex spec with `extra` appended (edges included as needed).
fn spec(body: &str) -> String {
    format!(
        r#"
[job]
name = "spec-errors"
{body}
"#
    )
}

fn validate(spec: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, spec).unwrap();
    run_weir(
        &dir.path().join("cache"),
        &["validate", path.to_str().unwrap()],
    )
}

const GEN: &str = r#"
[[source]]
id = "gen"
type = "generator"
kind = "sequence"
count = 10
"#;

const SINK: &str = r#"
[[sink]]
id = "out"
type = "blackhole"
"#;

#[test]
fn unknown_field_is_named() {
    let out = validate(&spec(&format!(
        "{GEN}\nparalelism = 2\n{SINK}\n[[edge]]\nfrom = \"gen\"\nto = \"out\"\n"
    )));
    assert_fails_with(&out, 2, &["paralelism", "job.toml"]);
}

#[test]
fn dangling_edge_is_named() {
    let out = validate(&spec(&format!(
        "{GEN}{SINK}\n[[edge]]\nfrom = \"gen\"\nto = \"nowhere\"\n"
    )));
    assert_fails_with(&out, 2, &["edge[0]", "nowhere"]);
}

#[test]
fn cycle_is_named() {
    let m = toml_path(Path::new(artifacts::UPPERCASE));
    let body = format!(
        "{GEN}\n[[operator]]\nid = \"a\"\nmodule = {m}\n\n[[operator]]\nid = \"b\"\nmodule = {m}\n{SINK}\n\
         [[edge]]\nfrom = \"gen\"\nto = \"a\"\n[[edge]]\nfrom = \"a\"\nto = \"b\"\n\
         [[edge]]\nfrom = \"b\"\nto = \"a\"\n[[edge]]\nfrom = \"b\"\nto = \"out\"\n"
    );
    let out = validate(&spec(&body));
    assert_fails_with(&out, 2, &["cycle", "a", "b"]);
}

#[test]
fn invalid_parallelism_is_named() {
    let body = format!("{GEN}{SINK}parallelism = 0\n[[edge]]\nfrom = \"gen\"\nto = \"out\"\n");
    let out = validate(&spec(&body));
    assert_fails_with(&out, 2, &["parallelism", "out"]);
    let body = format!("{GEN}{SINK}parallelism = 1000\n[[edge]]\nfrom = \"gen\"\nto = \"out\"\n");
    let out = validate(&spec(&body));
    assert_fails_with(&out, 2, &["parallelism", "max_parallelism"]);
}

#[test]
fn keyed_operator_without_key_by_is_refused() {
    let m = toml_path(Path::new(artifacts::WORD_COUNT));
    let body = format!(
        "{GEN}\n[[operator]]\nid = \"count\"\nmodule = {m}\n{SINK}\n\
         [[edge]]\nfrom = \"gen\"\nto = \"count\"\n[[edge]]\nfrom = \"count\"\nto = \"out\"\n"
    );
    let out = validate(&spec(&body));
    assert_fails_with(&out, 2, &["count", "key_by"]);
}

#[test]
fn a_valid_spec_validates() {
    let body = format!("{GEN}{SINK}\n[[edge]]\nfrom = \"gen\"\nto = \"out\"\n");
    let out = validate(&spec(&body));
    assert!(out.status.success(), "{}", crate::util::describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("is valid"));
}
