//! Side outputs: an operator's named side output reaches the edges declared
//! with `from = "<operator>:<tag>"`, its main output the plain edges, and no
//! record is lost or duplicated between them.

use std::path::Path;

use weir_tests::artifacts;

use crate::util::{describe, read_sink, run_weir, toml_path};

#[test]
fn side_output_and_main_output_reach_their_own_sinks() {
    let dir = tempfile::tempdir().unwrap();
    let (main_out, side_out) = (dir.path().join("rest.txt"), dir.path().join("sevens.txt"));
    let spec = dir.path().join("split.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "split"
parallelism = 2

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
count = 10000

[[operator]]
id = "split"
module = {m}
config = {{ contains = "7", tag = "sevens" }}

[[sink]]
id = "rest"
type = "file"
path = {main_out}

[[sink]]
id = "sevens"
type = "file"
path = {side_out}
parallelism = 1

[[edge]]
from = "gen"
to = "split"

[[edge]]
from = "split"
to = "rest"

[[edge]]
from = "split:sevens"
to = "sevens"
"#,
            m = toml_path(Path::new(artifacts::SPLIT)),
            main_out = toml_path(&main_out),
            side_out = toml_path(&side_out),
        ),
    )
    .unwrap();
    let out = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));

    let numbers = |lines: Vec<String>| -> Vec<u64> {
        let mut v: Vec<u64> = lines.iter().map(|l| l.parse().unwrap()).collect();
        v.sort_unstable();
        v
    };
    let (expected_sevens, expected_rest): (Vec<u64>, Vec<u64>) =
        (0..10_000).partition(|n| n.to_string().contains('7'));
    assert_eq!(numbers(read_sink(&side_out)), expected_sevens);
    assert_eq!(numbers(read_sink(&main_out)), expected_rest);
}
