//! Validation: every problem names the file, the field, what was found and
//! what was expected.

use super::{
    JOB, SINK, SRC, assert_problem, edge, edge_with, graph, operator, parse, problems, valid,
};
use crate::{JobGraph, KeySelector, Partitioner};

/// src → a → out with `a` given `extra` fields.
fn with_a(extra: &str) -> String {
    format!(
        "{SRC}{}{SINK}{}{}",
        operator("a", extra),
        edge("src", "a"),
        edge("a", "out")
    )
}

#[test]
fn valid_linear_job_builds() {
    let graph = valid(&with_a(""));
    assert_eq!(graph.vertices.len(), 3);
    assert_eq!(graph.topological_order(), [0, 1, 2]);
    assert!(graph.warnings.is_empty());
}

#[test]
fn edge_from_unknown_id_is_reported() {
    let body = format!(
        "{SRC}{}{SINK}{}{}",
        operator("a", ""),
        edge("scr", "a"),
        edge("a", "out")
    );
    assert_problem(
        &body,
        "edge[0].from",
        &["\"scr\"", "no source or operator", "src, a"],
    );
}

#[test]
fn edge_to_unknown_id_is_reported() {
    let body = format!(
        "{SRC}{}{SINK}{}{}",
        operator("a", ""),
        edge("src", "a"),
        edge("a", "sink")
    );
    let text = assert_problem(
        &body,
        "edge[1].to",
        &["\"sink\"", "no operator or sink", "a, out"],
    );
    // The sink is then left without input: reported too, not instead.
    assert!(text.contains("sink[0] \"out\": has no input"), "{text}");
}

#[test]
fn edge_into_a_source_is_reported() {
    let body = format!("{}{}", with_a(""), edge("a", "src"));
    assert_problem(
        &body,
        "edge[2].to",
        &["is a source", "sources have no inputs"],
    );
}

#[test]
fn edge_out_of_a_sink_is_reported() {
    let body = format!("{}{}", with_a(""), edge("out", "a"));
    assert_problem(
        &body,
        "edge[2].from",
        &["is a sink", "sinks have no outputs"],
    );
}

#[test]
fn cycle_is_reported_with_its_ids() {
    let body = format!(
        "{SRC}{}{}{}{SINK}{}{}{}{}{}",
        operator("a", ""),
        operator("b", ""),
        operator("c", ""),
        edge("src", "a"),
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("c", "out")
    );
    assert_problem(
        &body,
        "[[edge]]",
        &[
            "cycle \"a\" -> \"b\" -> \"c\" -> \"a\"",
            "edge[1], edge[2], edge[3]",
        ],
    );
}

#[test]
fn self_loop_is_a_cycle() {
    let body = format!("{}{}", with_a(""), edge("a", "a"));
    assert_problem(&body, "[[edge]]", &["cycle \"a\" -> \"a\"", "edge[2]"]);
}

#[test]
fn parallelism_zero_is_reported() {
    assert_problem(
        &with_a("parallelism = 0"),
        "operator[0] \"a\".parallelism",
        &["found 0", "expected 1..=128"],
    );
}

#[test]
fn parallelism_above_max_parallelism_is_reported() {
    let body = format!("max_parallelism = 8\n{}", with_a("parallelism = 9"));
    assert_problem(
        &body,
        "operator[0] \"a\".parallelism",
        &["found 9", "expected 1..=8"],
    );
    let body = format!("parallelism = 200\n{}", with_a(""));
    assert_problem(&body, "job.parallelism", &["found 200", "expected 1..=128"]);
    let body = format!("max_parallelism = 40000\n{}", with_a(""));
    assert_problem(
        &body,
        "job.max_parallelism",
        &["found 40000", "expected 1..=32768"],
    );
}

#[test]
fn file_source_takes_the_default_parallelism_or_its_own() {
    let graph = valid(&format!(
        "parallelism = 4\n[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"x.txt\"\n{SINK}{}",
        edge("lines", "out")
    ));
    assert_eq!(graph.vertices[0].parallelism, 4);
    assert_eq!(graph.edges[0].partitioner, Partitioner::Forward);
    let graph = valid(&format!(
        "parallelism = 4\n[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"x.txt\"\nparallelism = 2\n{SINK}{}",
        edge("lines", "out")
    ));
    assert_eq!(graph.vertices[0].parallelism, 2);
    assert_eq!(graph.edges[0].partitioner, Partitioner::Rebalance);
}

/// A file source table with `extra` fields, into the blackhole.
fn file_source(extra: &str) -> String {
    format!(
        "[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"in/*.txt\"\n{extra}\n{SINK}{}",
        edge("lines", "out")
    )
}

#[test]
fn file_source_csv_and_continuous_options_build() {
    let graph = valid(&file_source(
        "format = \"csv\"\nheader = false\ndelimiter = \";\"\nkey_field = \"0\"\nmonitor_interval_ms = 500",
    ));
    let crate::VertexKind::Source(crate::SourceSpec::File(f)) = &graph.vertices[0].kind else {
        panic!("a file source")
    };
    assert_eq!(f.format, crate::SourceFormat::Csv);
    assert!(!f.header);
    assert_eq!(f.delimiter, b';');
    assert_eq!(f.monitor_interval_ms, Some(500));
    assert_eq!(f.split_bytes, crate::DEFAULT_SPLIT_BYTES);
    assert!(f.path.ends_with("in/*.txt"));
}

#[test]
fn file_source_options_of_another_format_or_mode_are_refused() {
    for (extra, field, needles) in [
        (
            "header = true",
            "header",
            &["format = \"lines\"", "csv only"][..],
        ),
        (
            "format = \"json-lines\"\ndelimiter = \",\"",
            "delimiter",
            &["csv only"],
        ),
        (
            "format = \"csv\"\nsplit_bytes = 1000",
            "split_bytes",
            &["csv", "read whole"],
        ),
        ("format = \"csv\"\nfollow = true", "follow", &["csv"]),
        (
            "format = \"csv\"\ndelimiter = \"ab\"",
            "delimiter",
            &["one ASCII character"],
        ),
        (
            "format = \"csv\"\nheader = false\nkey_field = \"name\"",
            "key_field",
            &["column number"],
        ),
        ("follow = true", "follow", &["glob pattern"]),
        (
            "monitor_interval_ms = 0",
            "monitor_interval_ms",
            &["found 0"],
        ),
        ("split_bytes = 0", "split_bytes", &["found 0"]),
        (
            "key_field = \"k\"",
            "key_field",
            &["json-lines and csv only"],
        ),
    ] {
        assert_problem(
            &file_source(extra),
            &format!("source[0] \"lines\".{field}"),
            needles,
        );
    }
    let body = format!(
        "[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"x.gz\"\nfollow = true\nmonitor_interval_ms = 5\n{SINK}{}",
        edge("lines", "out")
    );
    let text = assert_problem(
        &body,
        "source[0] \"lines\".follow",
        &["monitor_interval_ms"],
    );
    assert!(text.contains("compressed"), "{text}");
    let body = format!(
        "[[source]]\nid = \"g\"\ntype = \"generator\"\nkind = \"sequence\"\nmonitor_interval_ms = 5\n{SINK}{}",
        edge("g", "out")
    );
    assert_problem(&body, "source[0] \"g\".monitor_interval_ms", &["generator"]);
}

#[test]
fn file_source_max_record_bytes_has_a_default_and_bounds() {
    let file = "[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"x.txt\"\n";
    let graph = valid(&format!("{file}{SINK}{}", edge("lines", "out")));
    let crate::VertexKind::Source(crate::SourceSpec::File(f)) = &graph.vertices[0].kind else {
        panic!("a file source")
    };
    assert_eq!(f.max_record_bytes, crate::config::DEFAULT_MAX_RECORD_BYTES);
    assert_problem(
        &format!("{file}max_record_bytes = 0\n{SINK}{}", edge("lines", "out")),
        "source[0] \"lines\".max_record_bytes",
        &["found 0", "expected 1..="],
    );
    assert_problem(
        &format!(
            "[[source]]\nid = \"g\"\ntype = \"generator\"\nkind = \"sequence\"\nmax_record_bytes = 9\n{SINK}{}",
            edge("g", "out")
        ),
        "source[0] \"g\".max_record_bytes",
        &["not allowed", "generator"],
    );
}

#[test]
fn the_longest_record_between_taskmanagers_is_the_output_cap_or_twice_a_sources_record() {
    let file = "[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"x.txt\"\n";
    let job = |source: &str, limits: &str| {
        valid(&format!("{limits}{source}{SINK}{}", edge("lines", "out"))).max_record_bytes()
    };
    // The defaults: 16 MiB lines, 16 MiB of output per call.
    assert_eq!(job(file, ""), 32 << 20);
    assert_eq!(
        job(&format!("{file}max_record_bytes = 1000\n"), ""),
        16 << 20
    );
    assert_eq!(
        job(
            &format!("{file}max_record_bytes = 1000\n"),
            "[job.limits]\nmax_output_mb = 64\n"
        ),
        64 << 20
    );
    assert_eq!(
        job(&format!("{file}max_record_bytes = {}\n", 100 << 20), ""),
        200 << 20
    );
    let generator = "[[source]]\nid = \"lines\"\ntype = \"generator\"\nkind = \"sequence\"\nrecord_bytes = 1048576\n";
    assert_eq!(job(generator, ""), 16 << 20);
    assert_eq!(job(generator, "[job.limits]\nmax_output_mb = 1\n"), 2 << 20);
}

#[test]
fn relative_file_paths_are_listed_with_their_field() {
    let spec = parse(&format!(
        "{JOB}[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"in/x.txt\"\n\
         [[sink]]\nid = \"a\"\ntype = \"file\"\npath = \"/abs/out.txt\"\n\
         [[sink]]\nid = \"b\"\ntype = \"file\"\npath = \"../out.txt\"\n{}{}",
        edge("lines", "a"),
        edge("lines", "b")
    ))
    .unwrap();
    let found: Vec<(String, String)> = spec
        .relative_file_paths()
        .into_iter()
        .map(|(field, path)| (field, path.display().to_string()))
        .collect();
    assert_eq!(
        found,
        [
            ("source[0] \"lines\".path".to_owned(), "in/x.txt".to_owned()),
            ("sink[1] \"b\".path".to_owned(), "../out.txt".to_owned()),
        ]
    );
}

#[test]
fn forward_edge_with_unequal_parallelism_is_reported() {
    let body = format!(
        "{SRC}{}{SINK}{}{}",
        operator("a", "parallelism = 2"),
        edge_with("src", "a", "forward"),
        edge("a", "out")
    );
    let text = assert_problem(
        &body,
        "edge[0].partition",
        &[
            "\"forward\"",
            "equal parallelism",
            "source[0] \"src\" has 1",
            "operator[0] \"a\" has 2",
        ],
    );
    assert!(
        !text.contains("has no input"),
        "a rejected edge is still an input: {text}"
    );
}

#[test]
fn hash_edge_without_key_by_is_reported() {
    let body = format!(
        "{SRC}{}{SINK}{}{}",
        operator("a", ""),
        edge_with("src", "a", "hash"),
        edge("a", "out")
    );
    assert_problem(
        &body,
        "edge[0].partition",
        &["\"hash\"", "operator[0] \"a\" has no key_by"],
    );
}

#[test]
fn keyed_operator_with_non_hash_input_is_reported() {
    let body = format!(
        "{SRC}{}{SINK}{}{}",
        operator("a", "key_by = \"key\""),
        edge_with("src", "a", "rebalance"),
        edge("a", "out")
    );
    assert_problem(
        &body,
        "edge[0].partition",
        &[
            "found \"rebalance\"",
            "expected \"hash\"",
            "key_by = \"key\"",
        ],
    );
}

#[test]
fn bad_ids_are_reported() {
    let body = format!(
        "[[source]]\nid = \"Src\"\ntype = \"generator\"\nkind = \"sequence\"\n{SINK}{}",
        edge("Src", "out")
    );
    assert_problem(
        &body,
        "source[0] \"Src\".id",
        &["found \"Src\"", "[a-z0-9][a-z0-9_-]*"],
    );
    let body = format!(
        "{}{}",
        with_a(""),
        operator("-x", "").replace("-x.wasm", "x.wasm")
    );
    assert_problem(&body, "operator[1] \"-x\".id", &["found \"-x\""]);
    let long = "a".repeat(65);
    let body = format!(
        "{SRC}{}{SINK}{}{}",
        operator(&long, ""),
        edge("src", &long),
        edge(&long, "out")
    );
    assert_problem(
        &body,
        &format!("operator[0] \"{long}\".id"),
        &["65 bytes", "at most 64"],
    );
}

#[test]
fn duplicate_ids_are_reported() {
    let body = format!("{}{}", with_a(""), operator("src", ""));
    assert_problem(
        &body,
        "operator[1] \"src\".id",
        &["duplicate id \"src\"", "source[0] \"src\""],
    );
}

#[test]
fn bad_job_name_is_reported() {
    let text = format!("[job]\nname = \"Word Count\"\n{}", with_a(""));
    let error = JobGraph::from_spec(parse(&text).unwrap()).unwrap_err();
    assert_eq!(error.problems()[0].field, "job.name");
}

#[test]
fn bad_key_by_is_reported() {
    assert_problem(
        &with_a("key_by = \"account\""),
        "operator[0] \"a\".key_by",
        &[
            "found \"account\"",
            "\"key\"",
            "\"value\"",
            "\"json:<field>\"",
        ],
    );
    assert_problem(
        &with_a("key_by = \"json:\""),
        "operator[0] \"a\".key_by",
        &["found \"json:\""],
    );
}

#[test]
fn key_by_variants_are_parsed() {
    for (text, selector) in [
        ("key", KeySelector::RecordKey),
        ("value", KeySelector::Value),
        ("json:account", KeySelector::JsonField("account".into())),
    ] {
        let graph = valid(&with_a(&format!("key_by = \"{text}\"")));
        assert_eq!(graph.edges[0].partitioner, Partitioner::Hash(selector));
    }
}

#[test]
fn bad_module_is_reported() {
    let body = format!(
        "{SRC}\n[[operator]]\nid = \"a\"\nmodule = \"a.wat\"\n{SINK}{}{}",
        edge("src", "a"),
        edge("a", "out")
    );
    assert_problem(
        &body,
        "operator[0] \"a\".module",
        &["found \"a.wat\"", ".wasm", "name@version"],
    );
}

#[test]
fn operator_and_sink_without_input_are_reported() {
    let body = format!("{SRC}{}{SINK}", operator("a", ""));
    let problems = problems(&body);
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["operator[0] \"a\"", "sink[0] \"out\""]);
    assert!(problems[0].message.contains("has no input"));
}

#[test]
fn source_or_operator_without_output_is_a_warning() {
    let body = format!(
        "{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("dead-end", ""),
        edge("src", "a"),
        edge("src", "dead-end"),
        edge("a", "out")
    );
    let graph = valid(&body);
    assert_eq!(graph.warnings.len(), 1, "{:?}", graph.warnings);
    assert!(graph.warnings[0].contains("operator[1] \"dead-end\": has no output"));
}

#[test]
fn job_without_source_or_sink_is_reported() {
    let problems = problems("");
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["[[source]]", "[[sink]]"]);
}

#[test]
fn batch_size_and_channel_capacity_ranges_are_checked() {
    let body = format!("batch_size = 0\nchannel_capacity = 0\n{}", with_a(""));
    assert_problem(&body, "job.batch_size", &["found 0", "expected 1..=65536"]);
    assert_problem(
        &body,
        "job.channel_capacity",
        &["found 0", "expected at least 1"],
    );
    let body = format!("batch_size = 65537\n{}", with_a(""));
    assert_problem(&body, "job.batch_size", &["found 65537"]);
    let body = format!("[job.limits]\nmemory_mb = 5000\n{}", with_a(""));
    assert_problem(
        &body,
        "job.limits.memory_mb",
        &["found 5000", "expected 1..=4096"],
    );
    // A one-hour deadline would let a spinning guest hold a core that long.
    let body = format!("[job.limits]\ncall_timeout_ms = 3600000\n{}", with_a(""));
    assert_problem(
        &body,
        "job.limits.call_timeout_ms",
        &["found 3600000", "expected 1..=60000"],
    );
}

#[test]
fn fields_of_another_type_are_reported() {
    let body = format!(
        "[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"x\"\ncount = 5\n{SINK}{}",
        edge("lines", "out")
    );
    assert_problem(
        &body,
        "source[0] \"lines\".count",
        &["not allowed for type = \"file\""],
    );
    let body = format!(
        "[[source]]\nid = \"g\"\ntype = \"generator\"\nkind = \"sequence\"\naccounts = 5\n{SINK}{}",
        edge("g", "out")
    );
    assert_problem(
        &body,
        "source[0] \"g\".accounts",
        &["kind = \"sequence\"", "transactions only"],
    );
    let body = format!(
        "[[source]]\nid = \"lines\"\ntype = \"file\"\npath = \"x\"\nkey_field = \"k\"\n{SINK}{}",
        edge("lines", "out")
    );
    assert_problem(
        &body,
        "source[0] \"lines\".key_field",
        &["json-lines and csv only"],
    );
    let body = format!(
        "{SRC}[[sink]]\nid = \"out\"\ntype = \"file\"\n{}",
        edge("src", "out")
    );
    assert_problem(&body, "sink[0] \"out\".path", &["missing"]);
}

#[test]
fn side_outputs_are_read_only_from_operators() {
    let graph = valid(&format!(
        "{}\n[[sink]]\nid = \"late\"\ntype = \"stdout\"\n{}",
        with_a(""),
        edge("a:late-events", "late")
    ));
    assert_eq!(graph.edges[2].from_tag.as_deref(), Some("late-events"));
    let body = format!("{}{}", with_a(""), edge("src:x", "a"));
    assert_problem(
        &body,
        "edge[2].from",
        &["is a source", "only operators have side outputs"],
    );
    let body = format!("{}{}", with_a(""), edge("a:Bad Tag", "out"));
    assert_problem(&body, "edge[2].from", &["tag \"Bad Tag\""]);
}

#[test]
fn duplicate_edge_is_reported() {
    let body = format!("{}{}", with_a(""), edge("a", "out"));
    assert_problem(&body, "edge[2]", &["duplicate edge", "edge[1]"]);
}

#[test]
fn duplicate_sink_files_are_reported() {
    let body = format!(
        "{SRC}[[sink]]\nid = \"x\"\ntype = \"file\"\npath = \"o.txt\"\n\
         [[sink]]\nid = \"y\"\ntype = \"file\"\npath = \"./../specs/o.txt\"\n\
         [[sink]]\nid = \"z\"\ntype = \"file\"\npath = \"o.txt\"\n{}{}{}",
        edge("src", "x"),
        edge("src", "y"),
        edge("src", "z")
    );
    assert_problem(
        &body,
        "sink[2] \"z\".path",
        &["also written by sink[0] \"x\""],
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let body = format!(
        "parallelism = 0\n{SRC}{}{SINK}{}{}",
        operator("a", "key_by = \"nope\""),
        edge("src", "b"),
        edge("a", "out")
    );
    let text = graph(&body).unwrap_err().to_string();
    assert!(text.contains("(4 problems)"), "{text}");
    for needle in [
        "job.parallelism",
        "key_by",
        "edge[0].to",
        "operator[0] \"a\": has no input",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn check_modules_exist_names_operator_and_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.wasm"), b"").unwrap();
    let text = format!(
        "{JOB}{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("b", ""),
        edge("src", "a"),
        edge("a", "b"),
        edge("b", "out")
    );
    let spec = crate::JobSpec::parse(&text, dir.path().join("job.toml"), &[]).unwrap();
    let graph = JobGraph::from_spec(spec).unwrap();
    let error = graph.check_modules_exist().unwrap_err();
    let problems = error.problems();
    assert_eq!(problems.len(), 1, "{error}");
    assert_eq!(problems[0].field, "operator \"b\".module");
    let b = dir.path().join("b.wasm");
    assert!(
        problems[0].message.contains(&b.display().to_string()),
        "{error}"
    );
    std::fs::write(&b, b"").unwrap();
    graph.check_modules_exist().unwrap();
}

#[test]
fn default_partitioner_follows_key_by_and_parallelism() {
    let graph = valid(&format!(
        "{SRC}{}{}{}{SINK}{}{}{}{}",
        operator("same", ""),
        operator("wider", "parallelism = 3"),
        operator("keyed", "parallelism = 3\nkey_by = \"json:user\""),
        edge("src", "same"),
        edge("same", "wider"),
        edge("wider", "keyed"),
        edge("keyed", "out")
    ));
    let partitioners: Vec<&Partitioner> = graph.edges.iter().map(|e| &e.partitioner).collect();
    assert_eq!(
        partitioners,
        [
            &Partitioner::Forward,
            &Partitioner::Rebalance,
            &Partitioner::Hash(KeySelector::JsonField("user".into())),
            &Partitioner::Rebalance,
        ]
    );
}
