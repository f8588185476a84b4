//! Parsing: the document's shape, toml's positions in errors, defaults,
//! path resolution and config flattening.

use std::path::Path;

use super::{JOB, SINK, SPEC_PATH, SRC, edge, parse, valid};
use crate::{
    DEFAULT_BATCH_SIZE, DEFAULT_CHANNEL_CAPACITY, DEFAULT_MAX_PARALLELISM, JobError, JobGraph,
    JobSpec, ModuleRef, OperatorLimits, SinkSpec, SourceSpec, StateBackendKind, VertexKind,
    parse_override,
};

#[track_caller]
fn parse_error(text: &str) -> String {
    match parse(text) {
        Err(JobError::Parse { path, message }) => {
            assert_eq!(path, Path::new(SPEC_PATH));
            message
        }
        Err(other) => panic!("expected JobError::Parse, got: {other}"),
        Ok(_) => panic!("expected a parse error"),
    }
}

#[test]
fn unknown_field_is_reported_with_line_and_expected_fields() {
    let text = format!(
        "{JOB}{SRC}\n[[operator]]\nid = \"a\"\nmodule = \"a.wasm\"\nparalelism = 2\n{SINK}"
    );
    let message = parse_error(&text);
    assert!(message.contains("unknown field `paralelism`"), "{message}");
    assert!(
        message.contains("`parallelism`"),
        "lists what is expected: {message}"
    );
    assert!(message.contains("line 12"), "{message}");
    assert!(
        message.contains("paralelism = 2"),
        "quotes the line: {message}"
    );
    // The Display of the whole error names the file too.
    let error = parse(&text).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("cannot parse job spec {SPEC_PATH}")),
        "{error}"
    );
}

#[test]
fn unknown_field_in_job_table_is_reported() {
    let message = parse_error("[job]\nname = \"x\"\nbatchsize = 10\n");
    assert!(message.contains("unknown field `batchsize`"), "{message}");
}

#[test]
fn unknown_source_type_is_reported() {
    let message = parse_error(&format!(
        "{JOB}[[source]]\nid = \"s\"\ntype = \"pulsar\"\n{SINK}"
    ));
    assert!(message.contains("unknown variant `pulsar`"), "{message}");
    assert!(
        message.contains("`file`")
            && message.contains("`generator`")
            && message.contains("`kafka`"),
        "{message}"
    );
}

#[test]
fn unknown_sink_format_is_reported() {
    let message = parse_error(&format!(
        "{JOB}{SRC}[[sink]]\nid = \"out\"\ntype = \"stdout\"\nformat = \"csv\"\n"
    ));
    assert!(message.contains("unknown variant `csv`"), "{message}");
    assert!(message.contains("`key-value`"), "{message}");
}

#[test]
fn unknown_partition_and_state_backend_are_reported() {
    let message = parse_error(&format!(
        "{JOB}{SRC}{SINK}[[edge]]\nfrom = \"src\"\nto = \"out\"\npartition = \"shuffle\"\n"
    ));
    assert!(message.contains("unknown variant `shuffle`"), "{message}");
    let message = parse_error("[job]\nname = \"x\"\nstate_backend = \"redis\"\n");
    assert!(message.contains("unknown variant `redis`"), "{message}");
}

#[test]
fn negative_parallelism_is_a_type_error() {
    let message = parse_error("[job]\nname = \"x\"\nparallelism = -1\n");
    assert!(message.contains("parallelism = -1"), "{message}");
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let error = JobSpec::from_file("/nonexistent/spec.toml", &[]).unwrap_err();
    assert!(matches!(error, JobError::Io { .. }));
    assert!(
        error.to_string().contains("/nonexistent/spec.toml"),
        "{error}"
    );
}

#[test]
fn from_file_resolves_paths_against_the_spec_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("jobs")).unwrap();
    let spec = dir.path().join("jobs/job.toml");
    std::fs::write(
        &spec,
        format!(
            "{JOB}[[source]]\nid = \"in\"\ntype = \"file\"\npath = \"../data/in.txt\"\n\
             [[operator]]\nid = \"op\"\nmodule = \"mods/op.wasm\"\n\
             [[sink]]\nid = \"out\"\ntype = \"file\"\npath = \"/abs/out.txt\"\n{}{}",
            edge("in", "op"),
            edge("op", "out")
        ),
    )
    .unwrap();
    let graph = JobGraph::from_file(&spec, &[]).unwrap();
    let jobs = dir.path().join("jobs");
    let VertexKind::Source(SourceSpec::File(source)) = &graph.vertices[0].kind else {
        panic!()
    };
    assert_eq!(source.path, jobs.join("../data/in.txt"));
    let VertexKind::Operator(op) = &graph.vertices[1].kind else {
        panic!()
    };
    assert_eq!(op.module, ModuleRef::Path(jobs.join("mods/op.wasm")));
    let VertexKind::Sink(SinkSpec::File(sink)) = &graph.vertices[2].kind else {
        panic!()
    };
    assert_eq!(sink.path, Path::new("/abs/out.txt"));
    assert_eq!(graph.origin, spec);
}

#[test]
fn defaults_are_applied() {
    let graph = valid(&format!("{SRC}{SINK}{}", edge("src", "out")));
    let s = &graph.settings;
    assert_eq!(s.parallelism, 1);
    assert_eq!(s.max_parallelism, DEFAULT_MAX_PARALLELISM);
    assert_eq!(s.state_backend, StateBackendKind::RocksDb);
    assert_eq!(s.batch_size, DEFAULT_BATCH_SIZE);
    assert_eq!(s.channel_capacity, DEFAULT_CHANNEL_CAPACITY);
    assert_eq!(
        s.limits,
        OperatorLimits {
            memory_mb: 64,
            call_timeout_ms: 10_000,
            max_output_mb: 16
        }
    );
    let VertexKind::Source(SourceSpec::Generator(generator)) = &graph.vertices[0].kind else {
        panic!()
    };
    assert_eq!(
        (generator.count, generator.seed, generator.rate),
        (None, 0, None)
    );
}

#[test]
fn job_settings_are_read() {
    let graph = valid(&format!(
        "parallelism = 2\nmax_parallelism = 64\nstate_backend = \"heap\"\nbatch_size = 10\n\
         channel_capacity = 3\n[job.limits]\nmemory_mb = 32\ncall_timeout_ms = 5\nmax_output_mb = 1\n\
         {SRC}{SINK}{}",
        edge("src", "out")
    ));
    let s = &graph.settings;
    assert_eq!(
        (
            s.parallelism,
            s.max_parallelism,
            s.batch_size,
            s.channel_capacity
        ),
        (2, 64, 10, 3)
    );
    assert_eq!(s.state_backend, StateBackendKind::Heap);
    assert_eq!(
        s.limits,
        OperatorLimits {
            memory_mb: 32,
            call_timeout_ms: 5,
            max_output_mb: 1
        }
    );
}

#[test]
fn config_is_flattened_for_the_guest() {
    let graph = valid(&format!(
        "{SRC}\n[[operator]]\nid = \"a\"\nmodule = \"a.wasm\"\n\
         config = {{ s = \"text\", i = 42, f = 1.5, b = true, list = [1, \"x\"], t = {{ k = 1 }} }}\n\
         {SINK}{}{}",
        edge("src", "a"),
        edge("a", "out")
    ));
    let VertexKind::Operator(op) = &graph.vertices[1].kind else {
        panic!()
    };
    let config: Vec<(&str, &str)> = op
        .config
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        config,
        [
            ("b", "true"),
            ("f", "1.5"),
            ("i", "42"),
            ("list", r#"[1,"x"]"#),
            ("s", "text"),
            ("t", r#"{"k":1}"#),
        ]
    );
}

#[test]
fn named_modules_are_parsed() {
    let graph = valid(&format!(
        "{SRC}\n[[operator]]\nid = \"a\"\nmodule = \"word-count@1.2.0\"\n{SINK}{}{}",
        edge("src", "a"),
        edge("a", "out")
    ));
    let VertexKind::Operator(op) = &graph.vertices[1].kind else {
        panic!()
    };
    assert_eq!(
        op.module,
        ModuleRef::Named {
            name: "word-count".into(),
            version: "1.2.0".into()
        }
    );
}

#[test]
fn parse_override_splits_at_the_first_equals_sign() {
    assert_eq!(
        parse_override("source.lines.path=/x=y"),
        Ok(("source.lines.path".into(), "/x=y".into()))
    );
    assert!(parse_override("job.parallelism").is_err());
    assert!(parse_override("=4").is_err());
}
