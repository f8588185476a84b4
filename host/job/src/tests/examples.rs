//! The example specs under `udfs/jobs/` parse, validate and chain as intended.

use std::path::PathBuf;

use crate::{
    GeneratorKind, JobGraph, KeySelector, ModuleRef, Partitioner, SinkFormat, SinkSpec,
    SourceFormat, SourceSpec, StateBackendKind, VertexKind, chain, task_edges,
};

fn jobs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../udfs/jobs")
}

fn load(name: &str) -> JobGraph {
    let path = jobs_dir().join(name);
    JobGraph::from_file(&path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn module_file(graph: &JobGraph, id: &str) -> PathBuf {
    let v = graph.vertex_index(id).expect("operator exists");
    match &graph.vertices[v].kind {
        VertexKind::Operator(op) => match &op.module {
            ModuleRef::Path(path) => path.clone(),
            other => panic!("expected a module path, got {other}"),
        },
        other => panic!("{id} is a {}", other.role()),
    }
}

#[test]
fn word_count_example_builds() {
    let graph = load("word-count.toml");
    assert_eq!(graph.name, "word-count");
    assert_eq!(graph.settings.state_backend, StateBackendKind::RocksDb);
    let ids: Vec<&str> = graph.vertices.iter().map(|v| v.id.as_str()).collect();
    assert_eq!(ids, ["lines", "tokenize", "count", "out"]);

    let VertexKind::Source(SourceSpec::File(source)) = &graph.vertices[0].kind else {
        panic!("lines is a file source");
    };
    assert_eq!(source.format, SourceFormat::Lines);
    assert!(source.path.is_absolute());
    // The text under udfs/data/, resolved against udfs/jobs/.
    assert!(source.path.parent().unwrap().ends_with("jobs/../data"));

    assert!(module_file(&graph, "tokenize").ends_with("release/tokenize.wasm"));
    assert!(module_file(&graph, "count").ends_with("release/word_count.wasm"));
    let VertexKind::Operator(count) = &graph.vertices[2].kind else {
        panic!("count is an operator");
    };
    assert_eq!(count.key_by, Some(KeySelector::RecordKey));
    assert!(count.config.contains(&("emit".into(), "final".into())));

    let VertexKind::Sink(SinkSpec::File(sink)) = &graph.vertices[3].kind else {
        panic!("out is a file sink");
    };
    assert_eq!(sink.format, SinkFormat::Value);
    assert!(sink.path.ends_with("jobs/out/word-counts.txt"));

    let partitioners: Vec<&Partitioner> = graph.edges.iter().map(|e| &e.partitioner).collect();
    assert_eq!(
        partitioners,
        [
            &Partitioner::Forward,
            &Partitioner::Hash(KeySelector::RecordKey),
            &Partitioner::Forward
        ]
    );
    let tasks = chain(&graph);
    let task_ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(task_ids, ["lines+tokenize", "count+out"]);
    assert_eq!(task_edges(&graph, &tasks).len(), 1);
    assert!(graph.warnings.is_empty(), "{:?}", graph.warnings);
}

#[test]
fn word_count_example_scales_with_parallelism_override() {
    let path = jobs_dir().join("word-count.toml");
    let graph = JobGraph::from_file(&path, &[("job.parallelism".into(), "4".into())]).unwrap();
    let parallelism: Vec<u32> = graph.vertices.iter().map(|v| v.parallelism).collect();
    // Every vertex follows the default, the file source too (its file's
    // splits are spread over its subtasks).
    assert_eq!(parallelism, [4, 4, 4, 4]);
    assert_eq!(graph.edges[0].partitioner, Partitioner::Forward);
    let task_ids: Vec<String> = chain(&graph).iter().map(|t| t.id.0.clone()).collect();
    assert_eq!(task_ids, ["lines+tokenize", "count+out"]);
}

#[test]
fn fraud_detect_example_builds() {
    let graph = load("fraud-detect.toml");
    assert_eq!(graph.name, "fraud-detect");
    let VertexKind::Source(SourceSpec::Generator(generator)) = &graph.vertices[0].kind else {
        panic!("the first vertex is a generator");
    };
    assert_eq!(
        generator.kind,
        GeneratorKind::Transactions { accounts: 500 }
    );
    assert_eq!(generator.count, Some(200_000));
    assert_eq!(generator.seed, 7);
    assert!(module_file(&graph, "fraud-detect").ends_with("release/fraud_detect.wasm"));
    let keyed = graph.vertex_index("fraud-detect").unwrap();
    let input = graph.inputs(keyed).next().unwrap();
    assert_eq!(input.partitioner, Partitioner::Hash(KeySelector::RecordKey));
    assert!(graph.warnings.is_empty(), "{:?}", graph.warnings);
}

#[test]
fn every_example_spec_builds() {
    let mut seen = 0;
    for entry in std::fs::read_dir(jobs_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            JobGraph::from_file(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
            seen += 1;
        }
    }
    assert!(seen >= 2);
}
