//! `--set key=value` overrides.

use std::path::Path;

use super::{JOB, SINK, SPEC_PATH, SRC, edge, operator, parse_with};
use crate::{
    GeneratorKind, JobError, JobGraph, Partitioner, SourceSpec, StateBackendKind, VertexKind,
};

/// src → a → b → out.
fn base() -> String {
    format!(
        "{JOB}{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("b", "parallelism = 3"),
        edge("src", "a"),
        edge("a", "b"),
        edge("b", "out")
    )
}

#[track_caller]
fn with(overrides: &[(&str, &str)]) -> JobGraph {
    JobGraph::from_spec(parse_with(&base(), overrides).unwrap()).unwrap()
}

#[track_caller]
fn override_error(overrides: &[(&str, &str)]) -> (String, String) {
    match parse_with(&base(), overrides) {
        Err(JobError::Override { path, key, message }) => {
            assert_eq!(path, Path::new(SPEC_PATH));
            (key, message)
        }
        Err(other) => panic!("expected JobError::Override, got: {other}"),
        Ok(_) => panic!("expected an override error"),
    }
}

fn parallelism(graph: &JobGraph, id: &str) -> u32 {
    graph.vertices[graph.vertex_index(id).unwrap()].parallelism
}

#[test]
fn job_parallelism_sets_the_default_but_not_vertex_values() {
    let graph = with(&[("job.parallelism", "4")]);
    assert_eq!(graph.settings.parallelism, 4);
    assert_eq!(parallelism(&graph, "src"), 4);
    assert_eq!(parallelism(&graph, "a"), 4);
    assert_eq!(parallelism(&graph, "b"), 3, "a vertex's own value wins");
    assert_eq!(parallelism(&graph, "out"), 4);
}

#[test]
fn array_element_is_chosen_by_id() {
    let graph = with(&[
        ("operator.b.parallelism", "2"),
        ("operator.a.parallelism", "2"),
    ]);
    assert_eq!(parallelism(&graph, "a"), 2);
    assert_eq!(parallelism(&graph, "b"), 2);
    assert_eq!(graph.edges[1].partitioner, Partitioner::Forward);
}

#[test]
fn array_element_is_chosen_by_index_when_no_id_matches() {
    let graph = with(&[("operator.1.parallelism", "5")]);
    assert_eq!(parallelism(&graph, "b"), 5);
    let graph = with(&[("edge.1.partition", "broadcast")]);
    assert_eq!(graph.edges[1].partitioner, Partitioner::Broadcast);
}

#[test]
fn values_that_are_not_toml_are_strings() {
    let graph = with(&[
        ("source.src.kind", "transactions"),
        ("source.src.accounts", "7"),
        ("job.state_backend", "heap"),
    ]);
    assert_eq!(graph.settings.state_backend, StateBackendKind::Heap);
    let VertexKind::Source(SourceSpec::Generator(generator)) = &graph.vertices[0].kind else {
        panic!()
    };
    assert_eq!(generator.kind, GeneratorKind::Transactions { accounts: 7 });
}

#[test]
fn relative_path_overrides_resolve_against_the_spec_directory() {
    let text = format!(
        "{JOB}[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"a.txt\"\n{SINK}{}",
        edge("lines", "out")
    );
    let spec = parse_with(&text, &[("source.lines.path", "data/b.txt")]).unwrap();
    let graph = JobGraph::from_spec(spec).unwrap();
    let VertexKind::Source(SourceSpec::File(file)) = &graph.vertices[0].kind else {
        panic!()
    };
    assert_eq!(file.path, Path::new("/specs/data/b.txt"));
    let spec = parse_with(&text, &[("source.lines.path", "/x")]).unwrap();
    let graph = JobGraph::from_spec(spec).unwrap();
    let VertexKind::Source(SourceSpec::File(file)) = &graph.vertices[0].kind else {
        panic!()
    };
    assert_eq!(file.path, Path::new("/x"));
}

#[test]
fn missing_tables_are_created() {
    let graph = with(&[
        ("job.limits.memory_mb", "128"),
        ("operator.a.config.mode", "fast"),
    ]);
    assert_eq!(graph.settings.limits.memory_mb, 128);
    let VertexKind::Operator(op) = &graph.vertices[1].kind else {
        panic!()
    };
    assert_eq!(op.config, [("mode".to_string(), "fast".to_string())]);
}

#[test]
fn quoting_forces_a_string() {
    let graph = with(&[
        ("operator.a.config.n", "\"4\""),
        ("operator.b.config.n", "4"),
    ]);
    let configs: Vec<&Vec<(String, String)>> = graph
        .vertices
        .iter()
        .filter_map(|v| match &v.kind {
            VertexKind::Operator(op) => Some(&op.config),
            _ => None,
        })
        .collect();
    // Both reach the guest as "4"; the quoted one was a TOML string.
    assert_eq!(configs[0], &[("n".to_string(), "4".to_string())]);
    assert_eq!(configs[1], &[("n".to_string(), "4".to_string())]);
    let error = parse_with(&base(), &[("job.parallelism", "\"4\"")]).unwrap_err();
    assert!(error.to_string().contains("expected u32"), "{error}");
}

#[test]
fn unknown_id_lists_the_known_ones() {
    let (key, message) = override_error(&[("operator.count.parallelism", "2")]);
    assert_eq!(key, "operator.count.parallelism");
    assert!(message.contains("no [[operator]] with id"), "{message}");
    assert!(message.contains("\"count\""), "{message}");
    assert!(message.contains("a, b"), "{message}");
    let error = parse_with(&base(), &[("operator.count.parallelism", "2")]).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(SPEC_PATH) && text.contains("--set operator.count.parallelism"),
        "{text}"
    );
}

#[test]
fn unknown_section_is_reported() {
    let (_, message) = override_error(&[("jobs.parallelism", "2")]);
    assert!(message.contains("unknown section \"jobs\""), "{message}");
    assert!(
        message.contains("job, source, operator, sink or edge"),
        "{message}"
    );
}

#[test]
fn malformed_keys_are_reported() {
    let (_, message) = override_error(&[("operator.a", "2")]);
    assert!(message.contains("expected a field after it"), "{message}");
    let (_, message) = override_error(&[("operator", "2")]);
    assert!(message.contains("expected operator.<id"), "{message}");
    let (_, message) = override_error(&[("job..parallelism", "2")]);
    assert!(message.contains("empty segment"), "{message}");
    let (_, message) = override_error(&[("edge.9.partition", "hash")]);
    assert!(
        message.contains("no [[edge]] with 0-based index \"9\""),
        "{message}"
    );
    let (_, message) = override_error(&[("job.name.x", "2")]);
    assert!(
        message.contains("job.name is a string, not a table"),
        "{message}"
    );
}

#[test]
fn unknown_field_set_by_override_is_a_parse_error() {
    let error = parse_with(&base(), &[("job.paralelism", "4")]).unwrap_err();
    let JobError::Parse { message, .. } = &error else {
        panic!("expected JobError::Parse, got: {error}");
    };
    assert!(message.contains("unknown field `paralelism`"), "{message}");
    assert!(
        message.contains("after applying the --set overrides"),
        "{message}"
    );
}

#[test]
fn errors_already_in_the_document_keep_their_position() {
    let text = format!("{}\n[[operator]]\nid = \"c\"\nmodul = \"c.wasm\"\n", base());
    let error = parse_with(&text, &[("job.parallelism", "2")]).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("unknown field `modul`"), "{message}");
    assert!(message.contains("TOML parse error at line"), "{message}");
}
