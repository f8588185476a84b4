//! NATS sources and sinks in the spec: what builds, and what is refused
//! with the field named.

use super::{SINK, SRC, assert_problem, edge, valid};
use crate::{NatsDelivery, NatsStart, SinkSpec, SourceSpec, VertexKind};

const NATS_SRC: &str = r#"
[[source]]
id = "orders"
type = "nats"
url = "nats://127.0.0.1:4222"
stream = "ORDERS"
"#;

const NATS_SINK: &str = r#"
[[sink]]
id = "totals"
type = "nats"
url = "nats://127.0.0.1:4222"
subject = "totals.eu"
"#;

#[test]
fn a_nats_source_and_sink_build_with_their_defaults() {
    let graph = valid(&format!(
        "{NATS_SRC}subject = \"orders.>\"\nkey_subject_token = 1\n{NATS_SINK}key_header = \"K\"\n{}",
        edge("orders", "totals")
    ));
    let VertexKind::Source(SourceSpec::Nats(source)) = &graph.vertices[0].kind else {
        panic!("{:?}", graph.vertices[0].kind)
    };
    assert_eq!(source.stream, "ORDERS");
    assert_eq!(source.subject.as_deref(), Some("orders.>"));
    assert_eq!(source.start, NatsStart::Earliest);
    assert_eq!(source.key_subject_token, Some(1));
    assert_eq!(graph.vertices[0].parallelism, 1);
    let VertexKind::Sink(SinkSpec::Nats(sink)) = &graph.vertices[1].kind else {
        panic!("{:?}", graph.vertices[1].kind)
    };
    assert_eq!(sink.delivery, NatsDelivery::ExactlyOnce);
    assert_eq!(sink.key_header.as_deref(), Some("K"));
}

#[test]
fn a_nats_source_needs_url_and_stream_and_refuses_file_fields() {
    let body = format!(
        "[[source]]\nid = \"orders\"\ntype = \"nats\"\npath = \"x.txt\"\nparallelism = 2\n{SINK}{}",
        edge("orders", "out")
    );
    assert_problem(&body, "source[0] \"orders\".url", &["missing", "nats://"]);
    assert_problem(&body, "source[0] \"orders\".stream", &["missing"]);
    assert_problem(
        &body,
        "source[0] \"orders\".path",
        &["not allowed for type = \"nats\""],
    );
    assert_problem(
        &body,
        "source[0] \"orders\".parallelism",
        &["found 2", "expected 1"],
    );
}

#[test]
fn nats_fields_are_refused_on_other_types_and_bad_subjects_are_named() {
    let body = format!(
        "{SRC}stream = \"X\"\n[[sink]]\nid = \"out\"\ntype = \"blackhole\"\nsubject = \"a.b\"\n{}",
        edge("src", "out")
    );
    assert_problem(&body, "source[0] \"src\".stream", &["NATS-source field"]);
    assert_problem(&body, "sink[0] \"out\".subject", &["NATS-sink field"]);
    let body = format!(
        "{NATS_SRC}subject = \"orders..x\"\n{NATS_SINK}{}",
        edge("orders", "totals")
    )
    .replace("subject = \"totals.eu\"", "subject = \"totals.*\"");
    assert_problem(&body, "source[0] \"orders\".subject", &["\"orders..x\""]);
    assert_problem(&body, "sink[0] \"totals\".subject", &["no wildcards"]);
}
