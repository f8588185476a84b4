//! Joins of two streams: an interval join and a window join of two
//! generated, disordered inputs equal an independent nested-loop join, in
//! `weir run` and on a cluster. (State cleanup by the watermark is asserted
//! on the backend's entries in `weir-runtime`'s join tests.)

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use weir_tests::artifacts;

use super::cluster::harness::Cluster;
use crate::event_time::{Input, disordered, mix};
use crate::util::{describe, read_sink, run_weir, toml_path};

const DISORDER: u64 = 200;

/// (key, left index, right index) → how often the pair was emitted.
pub(crate) type Pairs = BTreeMap<(String, usize, usize), usize>;

pub(crate) fn write(path: &Path, input: &[Input]) {
    let text: Vec<String> = input.iter().map(Input::line).collect();
    std::fs::write(path, text.join("\n") + "\n").unwrap();
}

pub(crate) fn nested_loop(
    left: &[Input],
    right: &[Input],
    joins: impl Fn(i64, i64) -> bool,
) -> Pairs {
    let mut out = Pairs::new();
    for l in left {
        for r in right {
            if l.key == r.key && joins(l.ts, r.ts) {
                *out.entry((l.key.clone(), l.i, r.i)).or_insert(0) += 1;
            }
        }
    }
    out
}

/// The spec of `left` and `right` → join `j` (its `join` table) → `pairs`.
pub(crate) fn join_spec(
    dir: &Path,
    join: &str,
    parallelism: u32,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let out = dir.join("pairs.jsonl");
    let spec = dir.join("join.toml");
    let source = |id: &str| {
        format!(
            "[[source]]\nid = \"{id}\"\ntype = \"file\"\npath = {}\nformat = \"json-lines\"\n\
             key_field = \"k\"\ntimestamp_field = \"ts\"\n\
             watermark = {{ max_out_of_orderness_ms = {DISORDER} }}\n",
            toml_path(&dir.join(format!("{id}.jsonl")))
        )
    };
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "join"

{left}
{right}
[[operator]]
id = "j"
join = {join}
key_by = "key"
parallelism = {parallelism}

[[sink]]
id = "pairs"
type = "file"
path = {out}

[[edge]]
from = "left"
to = "j"
input = "left"

[[edge]]
from = "right"
to = "j"
input = "right"

[[edge]]
from = "j"
to = "pairs"
"#,
            left = source("left"),
            right = source("right"),
            out = toml_path(&out),
        ),
    )
    .unwrap();
    (spec, out)
}

pub(crate) fn parse_pairs(lines: &[String]) -> Pairs {
    let mut out = Pairs::new();
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let key = v["key"].as_str().unwrap().to_owned();
        assert_eq!(v["left"]["k"], v["key"], "{line}");
        assert_eq!(v["right"]["k"], v["key"], "{line}");
        let (l, r) = (
            v["left"]["i"].as_u64().unwrap(),
            v["right"]["i"].as_u64().unwrap(),
        );
        *out.entry((key, l as usize, r as usize)).or_insert(0) += 1;
    }
    out
}

fn inputs(dir: &Path) -> (Vec<Input>, Vec<Input>) {
    let (left, right) = (
        disordered(1_500, DISORDER, 1),
        disordered(1_500, DISORDER, 2),
    );
    write(&dir.join("left.jsonl"), &left);
    write(&dir.join("right.jsonl"), &right);
    (left, right)
}

#[test]
fn interval_and_window_joins_equal_a_nested_loop_join() {
    for (join, parallelism) in [
        ("{ type = \"interval\", lower_ms = -30, upper_ms = 50 }", 2),
        ("{ type = \"window\", size_ms = 100 }", 3),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (left, right) = inputs(dir.path());
        let expected = if join.contains("interval") {
            nested_loop(&left, &right, |l, r| (l - 30..=l + 50).contains(&r))
        } else {
            nested_loop(&left, &right, |l, r| l.div_euclid(100) == r.div_euclid(100))
        };
        assert!(
            expected.len() > 1_000,
            "a join with substance: {}",
            expected.len()
        );
        let (spec, out) = join_spec(dir.path(), join, parallelism);
        let run = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
        assert!(run.status.success(), "{}", describe(&run));
        let got = parse_pairs(&read_sink(&out));
        assert_eq!(got.len(), expected.len(), "{join}: distinct pairs");
        assert!(
            got == expected,
            "{join}: pairs differ from the nested-loop join"
        );
    }
}

#[test]
fn an_interval_join_on_a_cluster_equals_a_nested_loop_join() {
    let cluster = Cluster::start(2, 2, &[]);
    let dir = cluster.dir.path();
    let (left, right) = inputs(dir);
    let expected = nested_loop(&left, &right, |l, r| (l - 10..=l + 10).contains(&r));
    let (spec, out) = join_spec(
        dir,
        "{ type = \"interval\", lower_ms = -10, upper_ms = 10 }",
        4,
    );
    let id = cluster.submit(&spec);
    let job = cluster.wait_job(&id, |s| s != "running" && s != "created");
    assert_eq!(job["state"], "finished", "{job}");
    let got = parse_pairs(&read_sink(&out));
    assert!(got == expected, "pairs differ from the nested-loop join");
}

#[test]
fn a_keyed_co_process_function_in_wasm_joins_both_inputs_like_a_nested_loop() {
    let dir = tempfile::tempdir().unwrap();
    let got = co_process_join(dir.path(), Path::new(artifacts::PAIR_JOIN));
    let expected = co_process_expected(dir.path());
    assert_eq!(got.len(), expected.len(), "distinct pairs");
    assert!(got == expected, "pairs differ from the nested-loop join");
}

/// Writes the inputs of [`co_process_join`] into `dir`; returns every
/// pair of a key (the nested-loop join without a time condition). 50 keys:
/// every pair of a key is emitted, so few records per key keep the output
/// of one call far below its cap.
pub(crate) fn co_process_expected(dir: &Path) -> Pairs {
    let rekeyed = |mut input: Vec<Input>| {
        for r in &mut input {
            r.key = format!("k{}", mix(r.i as u64 ^ r.ts as u64) % 50);
        }
        input
    };
    let (left, right) = inputs(dir);
    let (left, right) = (rekeyed(left), rekeyed(right));
    write(&dir.join("left.jsonl"), &left);
    write(&dir.join("right.jsonl"), &right);
    nested_loop(&left, &right, |_, _| true)
}

/// Runs the two inputs of `dir` (see [`co_process_expected`]) through the
/// co-process `module` at parallelism 2; returns the pairs it wrote.
pub(crate) fn co_process_join(dir: &Path, module: &Path) -> Pairs {
    co_process_expected(dir);
    let (spec, out) = join_spec(dir, "{ type = \"window\", size_ms = 1 }", 2);
    let text = std::fs::read_to_string(&spec).unwrap().replace(
        "join = { type = \"window\", size_ms = 1 }",
        &format!("module = {}", toml_path(module)),
    );
    std::fs::write(&spec, text).unwrap();
    let run = run_weir(&dir.join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(run.status.success(), "{}", describe(&run));
    parse_pairs(&read_sink(&out))
}

#[test]
fn a_join_without_its_right_input_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    inputs(dir.path());
    let (spec, _) = join_spec(dir.path(), "{ type = \"window\", size_ms = 100 }", 1);
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("input = \"right\"", "input = \"left\"");
    std::fs::write(&spec, text).unwrap();
    let out = run_weir(
        &dir.path().join("cache"),
        &["validate", spec.to_str().unwrap()],
    );
    assert!(!out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a join has no right input"), "{err}");
}
