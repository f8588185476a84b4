//! The contract only grows: a component built against `weir:operator@0.1.0`
//! (the `legacy-count` fixture, whose WIT is the 0.1.0 file kept verbatim)
//! loads and runs on this host, `weir inspect` says which version each
//! component was built against, and a one-input component fed a second
//! input is refused by name.

use std::path::Path;

use serde_json::Value;
use weir_tests::artifacts;

use crate::util::{assert_fails_with, describe, kjv, read_sink, run_weir, toml_path};
use crate::word_count::{expected_counts, word_count_spec_with};

#[test]
fn a_component_built_against_0_1_0_counts_words_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("counts.txt");
    let spec = dir.path().join("job.toml");
    std::fs::write(
        &spec,
        word_count_spec_with(&kjv(), Path::new(artifacts::LEGACY_COUNT), &out),
    )
    .unwrap();
    let run = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(run.status.success(), "{}", describe(&run));
    let expected = expected_counts(&std::fs::read_to_string(kjv()).unwrap());
    let mut got = std::collections::HashMap::new();
    for line in read_sink(&out) {
        let (word, count) = line.rsplit_once('\t').expect("word\tcount");
        assert!(
            got.insert(word.to_owned(), count.parse::<u64>().unwrap())
                .is_none()
        );
    }
    assert!(got == expected, "counts differ from the independent count");
}

#[test]
fn inspect_says_which_contract_version_a_component_targets() {
    let dir = tempfile::tempdir().unwrap();
    for (module, version) in [
        (artifacts::LEGACY_COUNT, "0.1.0"),
        (artifacts::WORD_COUNT, weir_host::wasm::CONTRACT_VERSION),
    ] {
        let out = run_weir(dir.path(), &["inspect", "--json", module]);
        assert!(out.status.success(), "{}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["contract"]["fits"], true, "{v}");
        assert_eq!(v["contract"]["built_against"], version, "{module}: {v}");
        let text = run_weir(dir.path(), &["inspect", module]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains(&format!("built against weir:operator@{version}")),
            "{text}"
        );
    }
}

#[test]
fn a_one_input_component_on_a_right_input_is_refused_naming_the_interface() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "two-inputs"

[[source]]
id = "a"
type = "generator"
kind = "sequence"
count = 10
keys = 2

[[source]]
id = "b"
type = "generator"
kind = "sequence"
count = 10
keys = 2

[[operator]]
id = "count"
module = {m}
key_by = "key"

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "a"
to = "count"

[[edge]]
from = "b"
to = "count"
input = "right"

[[edge]]
from = "count"
to = "out"
"#,
            m = toml_path(Path::new(artifacts::LEGACY_COUNT))
        ),
    )
    .unwrap();
    let out = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert_fails_with(
        &out,
        2,
        &[
            "operator `count`",
            "weir:operator/two-input",
            "input = \"right\"",
        ],
    );
}
