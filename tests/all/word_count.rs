//! Word count over the bundled 4.4 MB text through `weir run` as a process,
//! at parallelism 1 and 4, with the RocksDB and the heap state backend.
//! The expected counts are computed here, from the text, without Weir.

use std::collections::HashMap;
use std::path::Path;

use weir_tests::artifacts;

use crate::util::{describe, kjv, read_sink, run_weir, toml_path};

/// The count a correct job must produce: split each line on every char that
/// is not alphanumeric, lowercase each word.
pub(crate) fn expected_counts(text: &str) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for line in text.lines() {
        for word in line
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
}

/// A word-count job spec over `input`, writing to `out`.
pub fn word_count_spec(input: &Path, out: &Path) -> String {
    word_count_spec_with(input, Path::new(artifacts::WORD_COUNT), out)
}

/// The same with `counter` (a component path) as the counting operator.
pub fn word_count_spec_with(input: &Path, counter: &Path, out: &Path) -> String {
    format!(
        r#"
[job]
name = "word-count"

[[source]]
id = "lines"
type = "file"
path = {input}

[[operator]]
id = "tokenize"
module = {tokenize}
config = {{ lowercase = true }}

[[operator]]
id = "count"
module = {count}
key_by = "key"

[[sink]]
id = "out"
type = "file"
path = {out}

[[edge]]
from = "lines"
to = "tokenize"

[[edge]]
from = "tokenize"
to = "count"

[[edge]]
from = "count"
to = "out"
"#,
        input = toml_path(input),
        tokenize = toml_path(Path::new(artifacts::TOKENIZE)),
        count = toml_path(counter),
        out = toml_path(out),
    )
}

fn check(parallelism: u32, backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("counts.txt");
    let spec = dir.path().join("job.toml");
    std::fs::write(&spec, word_count_spec(&kjv(), &out)).unwrap();
    let p = parallelism.to_string();
    let backend_set = format!("job.state_backend={backend}");
    let result = run_weir(
        &dir.path().join("cache"),
        &[
            "run",
            spec.to_str().unwrap(),
            "--parallelism",
            &p,
            "--set",
            &backend_set,
            "--set",
            "source.lines.parallelism=1",
            "--json",
        ],
    );
    assert!(result.status.success(), "{}", describe(&result));
    // The settings took effect: the backend the job ran with, the keyed
    // vertex's parallelism, and one sink part file per subtask.
    let summary: serde_json::Value = serde_json::from_slice(&result.stdout).unwrap();
    assert_eq!(summary["state_backend"], backend, "{summary}");
    let count = summary["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "count")
        .unwrap_or_else(|| panic!("no `count` vertex: {summary}"));
    assert_eq!(count["parallelism"], parallelism, "{summary}");
    let parts = (0..parallelism)
        .filter(|i| {
            let part = match i {
                0 => out.clone(),
                i => out.with_extension(format!("txt.{i}")),
            };
            part.exists()
        })
        .count();
    assert_eq!(
        parts,
        parallelism as usize,
        "sink part files of {}",
        out.display()
    );

    let expected = expected_counts(&std::fs::read_to_string(kjv()).unwrap());
    let mut got = HashMap::new();
    for line in read_sink(&out) {
        let (word, count) = line
            .rsplit_once('\t')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}"));
        assert!(
            got.insert(word.to_string(), count).is_none(),
            "word {word:?} emitted twice (final counts must be emitted once)"
        );
    }
    assert!(expected.len() > 10_000, "the text has a real vocabulary");
    let total: u64 = expected.values().sum();
    assert!(total > 700_000, "the text has {total} words");
    if got != expected {
        let missing: Vec<_> = expected
            .keys()
            .filter(|k| !got.contains_key(*k))
            .take(5)
            .collect();
        let wrong: Vec<_> = got
            .iter()
            .filter(|(k, v)| expected.get(*k) != Some(v))
            .take(5)
            .collect();
        panic!(
            "counts differ: {} expected words, {} got; missing e.g. {missing:?}; wrong e.g. {wrong:?}",
            expected.len(),
            got.len()
        );
    }
}

#[test]
fn word_count_parallelism_1_rocksdb() {
    check(1, "rocksdb");
}

#[test]
fn word_count_parallelism_4_rocksdb() {
    check(4, "rocksdb");
}

#[test]
fn word_count_parallelism_1_heap() {
    check(1, "heap");
}

#[test]
fn word_count_parallelism_4_heap() {
    check(4, "heap");
}
