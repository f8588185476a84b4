//! Fuzz properties of the job spec: [`JobSpec::parse`] with `--set`
//! overrides, then validation ([`JobGraph::from_spec`]) and chaining, fed
//! TOML-like text, mutated valid specs (lines dropped, repeated, swapped,
//! values replaced by hostile ones, bytes flipped) and arbitrary overrides.
//! See `weir_fuzz` for how to run them longer.
//!
//! What must hold: no panic (nor a stack overflow); every error names the
//! spec file, and every problem of an invalid spec names its field.

use proptest::prelude::*;

use super::{JOB, SINK, SPEC_PATH, SRC, edge, operator};
use crate::{JobError, JobGraph, JobSpec, chain, task_edges};
use weir_fuzz::{config, mutate, mutations};

const WORD_COUNT: &str = include_str!("../../../../udfs/jobs/word-count.toml");
const FRAUD_DETECT: &str = include_str!("../../../../udfs/jobs/fraud-detect.toml");

/// A valid spec using most features, to mutate.
fn synthetic() -> String {
    format!(
        "{JOB}parallelism = 2\nbatch_size = 64\n[job.limits]\nmemory_mb = 32\n\
         [job.checkpoints]\ninterval_ms = 1000\n{SRC}{}{}{SINK}{}{}",
        operator("a", "config = { x = 1, y = \"z\", n = { deep = [1, 2] } }"),
        operator("b", "key_by = \"key\"\nparallelism = 3"),
        edge("src", "a"),
        edge("a", "b"),
    ) + &edge("b", "out")
}

fn valid_spec() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(WORD_COUNT.to_owned()),
        Just(FRAUD_DETECT.to_owned()),
        Just(synthetic()),
    ]
}

/// Values a hostile or careless spec might hold.
fn hostile_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "-1",
            "4294967296",
            "18446744073709551615",
            "99999999999999999999999",
            "1e308",
            "nan",
            "inf",
            "true",
            "\"\"",
            "\"../../../etc/passwd\"",
            "\"/dev/zero\"",
            "\"\\u0000\"",
            "\"sha256:\"",
            "\"sha256:zz\"",
            "[]",
            "{}",
            "[[]]",
            "{ a = { b = { c = 1 } } }",
            "1979-05-27T07:32:00Z",
            "'''x'''",
            "\"\"\"",
            "[1, \"a\"]",
        ])
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        "\"\\PC{0,70}\"",
    ]
}

/// Keys of the spec's tables, and table headers.
fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "name",
        "id",
        "type",
        "parallelism",
        "max_parallelism",
        "state_backend",
        "batch_size",
        "channel_capacity",
        "buffer_timeout_ms",
        "memory_mb",
        "call_timeout_ms",
        "max_output_mb",
        "interval_ms",
        "timeout_ms",
        "path",
        "format",
        "kind",
        "count",
        "rate",
        "record_bytes",
        "module",
        "config",
        "key_by",
        "from",
        "to",
        "partition",
        "slot_sharing_group",
        "restart",
    ])
    .prop_map(str::to_owned)
}

fn header() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "[job]",
        "[job.limits]",
        "[job.checkpoints]",
        "[job.restart]",
        "[[source]]",
        "[[operator]]",
        "[[sink]]",
        "[[edge]]",
        "[source]",
        "[[job]]",
        "[operator.config]",
    ])
    .prop_map(str::to_owned)
}

/// Text assembled from spec-shaped lines: headers, `key = value` pairs
/// with hostile values, and noise.
fn toml_soup() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        header(),
        (key(), hostile_value()).prop_map(|(k, v)| format!("{k} = {v}")),
        (key(), key(), hostile_value()).prop_map(|(a, b, v)| format!("{a}.{b} = {v}")),
        "\\PC{0,20}",
    ];
    prop::collection::vec(line, 0..24).prop_map(|lines| lines.join("\n"))
}

/// One change to a spec, line by line.
#[derive(Debug, Clone)]
enum LineEdit {
    Drop(usize),
    Repeat(usize),
    Swap(usize, usize),
    /// Replace the value of a `key = value` line.
    Value(usize, String),
    Insert(usize, String),
}

fn line_edit() -> impl Strategy<Value = LineEdit> {
    prop_oneof![
        any::<usize>().prop_map(LineEdit::Drop),
        any::<usize>().prop_map(LineEdit::Repeat),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| LineEdit::Swap(a, b)),
        (any::<usize>(), hostile_value()).prop_map(|(i, v)| LineEdit::Value(i, v)),
        (
            any::<usize>(),
            prop_oneof![
                header(),
                (key(), hostile_value()).prop_map(|(k, v)| format!("{k} = {v}"))
            ]
        )
            .prop_map(|(i, l)| LineEdit::Insert(i, l)),
    ]
}

fn edit_lines(spec: &str, edits: &[LineEdit]) -> String {
    let mut lines: Vec<String> = spec.lines().map(str::to_owned).collect();
    for edit in edits {
        let n = lines.len();
        if n == 0 {
            break;
        }
        match edit {
            LineEdit::Drop(i) => {
                lines.remove(i % n);
            }
            LineEdit::Repeat(i) => {
                let line = lines[i % n].clone();
                lines.insert(i % n, line);
            }
            LineEdit::Swap(a, b) => lines.swap(a % n, b % n),
            LineEdit::Value(i, v) => {
                // The `i`-th line that has a value, if any.
                let with_value: Vec<usize> = (0..n).filter(|&j| lines[j].contains('=')).collect();
                if let Some(&j) = with_value.get(i % with_value.len().max(1)) {
                    let k = lines[j].split('=').next().unwrap_or_default().to_owned();
                    lines[j] = format!("{k}= {v}");
                }
            }
            LineEdit::Insert(i, l) => lines.insert(i % (n + 1), l.clone()),
        }
    }
    lines.join("\n")
}

/// A `--set` override: a dotted key from spec-shaped segments, a value.
fn set_override() -> impl Strategy<Value = (String, String)> {
    let segment = prop_oneof![
        prop::sample::select(vec![
            "job",
            "source",
            "operator",
            "sink",
            "edge",
            "limits",
            "config",
            "0",
            "1",
            "7",
            "-1",
            "src",
            "a",
            "b",
            "out",
            "count",
            "tokenize",
            "",
            " ",
            "99999999999999999999"
        ])
        .prop_map(str::to_owned),
        key(),
    ];
    (
        prop::collection::vec(segment, 0..5).prop_map(|s| s.join(".")),
        prop_oneof![hostile_value(), "\\PC{0,12}"],
    )
}

/// Parses, validates and chains; checks that every error names what it
/// must. Never panics unless a property is broken.
fn check(text: &str, overrides: &[(String, String)]) {
    let graph = JobSpec::parse(text, SPEC_PATH, overrides).and_then(JobGraph::from_spec);
    match graph {
        Ok(graph) => {
            let tasks = chain(&graph);
            task_edges(&graph, &tasks);
        }
        Err(error) => {
            let text = error.to_string();
            assert!(text.contains(SPEC_PATH), "the error names the file: {text}");
            match &error {
                JobError::Parse { message, .. } => assert!(!message.is_empty()),
                JobError::Override { key, message, .. } => {
                    assert!(overrides.iter().any(|(k, _)| k == key), "{text}");
                    assert!(!message.is_empty(), "{text}");
                }
                JobError::Invalid { problems, .. } => {
                    assert!(!problems.is_empty());
                    for p in problems {
                        assert!(
                            ["job.", "[[", "source[", "operator[", "sink[", "edge["]
                                .iter()
                                .any(|start| p.field.starts_with(start)),
                            "a problem must name its field: {p}"
                        );
                        assert!(!p.message.is_empty(), "{p}");
                    }
                }
                JobError::Io { .. } => panic!("parsing text reads no file: {text}"),
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_panics_the_spec_parser(text in "\\PC{0,200}") {
        check(&text, &[]);
    }

    #[test]
    fn toml_like_text_never_panics_parse_and_validate(text in toml_soup()) {
        check(&text, &[]);
        check(&format!("{JOB}{text}"), &[]);
    }

    #[test]
    fn mutated_valid_specs_never_panic_and_name_their_fields(
        spec in valid_spec(),
        edits in prop::collection::vec(line_edit(), 1..6),
    ) {
        check(&edit_lines(&spec, &edits), &[]);
    }

    #[test]
    fn byte_mutated_valid_specs_never_panic(spec in valid_spec(), mutations in mutations()) {
        let bytes = mutate(spec.into_bytes(), &mutations);
        check(&String::from_utf8_lossy(&bytes), &[]);
    }

    #[test]
    fn arbitrary_overrides_never_panic_and_name_their_key(
        spec in valid_spec(),
        overrides in prop::collection::vec(set_override(), 1..4),
    ) {
        check(&spec, &overrides);
    }
}

/// Nesting is bounded before anything recurses over it: an operator's
/// `config` (flattened to JSON for the guest) nested 100,000 deep, as
/// arrays, inline tables or dotted keys, is an error, not a stack overflow.
#[test]
fn deeply_nested_specs_are_errors_not_stack_overflows() {
    let depth = 100_000;
    let deep = [
        format!("x = {}{}", "[".repeat(depth), "]".repeat(depth)),
        format!("x = {}1{}", "{ a = ".repeat(depth), " }".repeat(depth)),
        format!("{} = 1", vec!["a"; depth].join(".")),
    ];
    for config in deep {
        let spec = format!(
            "{JOB}{SRC}[[operator]]\nid = \"a\"\nmodule = \"a.wasm\"\n[operator.config]\n{config}\n{SINK}{}{}",
            edge("src", "a"),
            edge("a", "out")
        );
        check(&spec, &[]);
        // Through an override, too.
        check(&synthetic(), &[("operator.a.config.x".to_owned(), config)]);
    }
}
