//! Event time in the spec: watermark strategies per source, the job's
//! watermark interval, following a file.

use super::{JOB, SINK, SRC, assert_problem, edge, parse, valid};
use crate::{
    DEFAULT_WATERMARK_INTERVAL_MS, JobError, JobGraph, SourceSpec, VertexKind, WatermarkStrategy,
};

const FILE: &str = r#"
[[source]]
id = "src"
type = "file"
path = "in.jsonl"
format = "json-lines"
timestamp_field = "ts"
"#;

#[test]
fn defaults_are_ascending_never_idle_every_200_ms() {
    let graph = valid(&format!("{SRC}{SINK}{}", edge("src", "out")));
    assert_eq!(
        graph.settings.watermark_interval_ms,
        DEFAULT_WATERMARK_INTERVAL_MS
    );
    assert_eq!(
        graph.vertices[0].watermark,
        Some(WatermarkStrategy {
            max_out_of_orderness_ms: 0,
            idle_timeout_ms: None
        })
    );
    assert_eq!(graph.vertices[1].watermark, None, "sinks have none");
}

#[test]
fn a_strategy_and_an_interval_are_read() {
    let graph = valid(&format!(
        "watermark_interval_ms = 0\n{FILE}follow = true\n\
         watermark = {{ max_out_of_orderness_ms = 5000, idle_timeout_ms = 300 }}\n{SINK}{}",
        edge("src", "out")
    ));
    assert_eq!(graph.settings.watermark_interval_ms, 0);
    assert_eq!(
        graph.vertices[0].watermark,
        Some(WatermarkStrategy {
            max_out_of_orderness_ms: 5000,
            idle_timeout_ms: Some(300)
        })
    );
    let VertexKind::Source(SourceSpec::File(file)) = &graph.vertices[0].kind else {
        panic!("a file source")
    };
    assert!(file.follow);
}

#[test]
fn bad_strategies_are_named() {
    assert_problem(
        &format!(
            "{FILE}watermark = {{ idle_timeout_ms = 0 }}\n{SINK}{}",
            edge("src", "out")
        ),
        "source[0] \"src\".watermark.idle_timeout_ms",
        &["found 0", "1..=86400000"],
    );
    assert_problem(
        &format!(
            "{FILE}watermark = {{ max_out_of_orderness_ms = 100000000000 }}\n{SINK}{}",
            edge("src", "out")
        ),
        "source[0] \"src\".watermark.max_out_of_orderness_ms",
        &["0..=86400000"],
    );
    assert_problem(
        &format!("{SRC}follow = true\n{SINK}{}", edge("src", "out")),
        "source[0] \"src\".follow",
        &["file-source field"],
    );
    let text = format!(
        "{JOB}watermark_interval_ms = 86400001\n{SRC}{SINK}{}",
        edge("src", "out")
    );
    let error = JobGraph::from_spec(parse(&text).unwrap()).unwrap_err();
    assert!(
        error.to_string().contains("job.watermark_interval_ms"),
        "{error}"
    );
}

#[test]
fn a_misspelt_strategy_field_is_a_parse_error_with_its_line() {
    let text = format!(
        "{JOB}{FILE}watermark = {{ max_out_of_order_ms = 5 }}\n{SINK}{}",
        edge("src", "out")
    );
    match parse(&text) {
        Err(JobError::Parse { message, .. }) => {
            assert!(message.contains("max_out_of_order_ms"), "{message}");
            assert!(message.contains("max_out_of_orderness_ms"), "{message}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}
