//! Tests of the job module, one file per topic: the example specs,
//! parsing, `--set` overrides, validation, chaining.

mod chaining;
mod examples;
mod fuzz;
mod joins;
mod kafka;
mod nats;
mod overrides;
mod parsing;
mod validation;
mod watermarks;
mod windows;

use std::path::Path;

use super::{JobError, JobGraph, JobSpec, Problem};

/// Where test specs pretend to live; relative paths resolve against `/specs`.
const SPEC_PATH: &str = "/specs/job.toml";

/// A `[job]` header for specs assembled in tests.
const JOB: &str = "[job]\nname = \"test\"\n";

fn parse(text: &str) -> Result<JobSpec, JobError> {
    JobSpec::parse(text, SPEC_PATH, &[])
}

fn parse_with(text: &str, overrides: &[(&str, &str)]) -> Result<JobSpec, JobError> {
    let overrides: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    JobSpec::parse(text, SPEC_PATH, &overrides)
}

/// Builds the graph of `body` preceded by [`JOB`].
fn graph(body: &str) -> Result<JobGraph, JobError> {
    JobGraph::from_spec(parse(&format!("{JOB}{body}"))?)
}

/// The graph of `body`, which must be valid.
fn valid(body: &str) -> JobGraph {
    match graph(body) {
        Ok(graph) => graph,
        Err(error) => panic!("expected a valid spec, got: {error}"),
    }
}

/// The problems of `body`, which must be invalid (not merely unparsable).
fn problems(body: &str) -> Vec<Problem> {
    match graph(body) {
        Ok(_) => panic!("expected an invalid spec, but it built:\n{body}"),
        Err(JobError::Invalid { path, problems }) => {
            assert_eq!(path, Path::new(SPEC_PATH));
            assert!(!problems.is_empty());
            problems
        }
        Err(other) => panic!("expected JobError::Invalid, got: {other}"),
    }
}

/// Asserts that `body` is invalid with a problem at exactly `field` whose
/// message contains every one of `needles`; returns the full error text.
#[track_caller]
fn assert_problem(body: &str, field: &str, needles: &[&str]) -> String {
    let error = graph(body).expect_err("expected an invalid spec");
    let text = error.to_string();
    assert!(text.contains(SPEC_PATH), "error must name the file: {text}");
    let problem = error
        .problems()
        .iter()
        .find(|p| p.field == field)
        .unwrap_or_else(|| panic!("no problem at {field}; got: {text}"));
    for needle in needles {
        assert!(
            problem.message.contains(needle),
            "problem at {field} should mention {needle:?}: {problem}"
        );
    }
    text
}

/// source → a → out, all parallelism 1: a valid base to vary.
const SRC: &str = r#"
[[source]]
id = "src"
type = "generator"
kind = "sequence"
"#;

fn operator(id: &str, extra: &str) -> String {
    format!("\n[[operator]]\nid = \"{id}\"\nmodule = \"{id}.wasm\"\n{extra}\n")
}

fn edge(from: &str, to: &str) -> String {
    format!("\n[[edge]]\nfrom = \"{from}\"\nto = \"{to}\"\n")
}

fn edge_with(from: &str, to: &str, partition: &str) -> String {
    format!("\n[[edge]]\nfrom = \"{from}\"\nto = \"{to}\"\npartition = \"{partition}\"\n")
}

const SINK: &str = r#"
[[sink]]
id = "out"
type = "blackhole"
"#;
