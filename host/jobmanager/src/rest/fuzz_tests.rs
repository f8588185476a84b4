//! Fuzz properties of REST request decoding: every endpoint (and paths
//! that are none) fed arbitrary methods, path segments, query strings,
//! headers and bodies — random bytes, random JSON, and mutated valid
//! requests (a job submission, a savepoint, an upgrade, a module upload) —
//! against a JobManager with a running job, through the whole router
//! (the `Host` and token guard included). See `weir_fuzz` for how to run
//! them longer.
//!
//! What must hold: no panic; no `500` (bad input is the client's error:
//! 4xx, or 503 when a valid job finds no free slots); without the token,
//! nothing but 401 (or 403 for a refused `Host`), whatever the request.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use proptest::prelude::*;
use tower::ServiceExt;

use super::{RestOptions, router};
use crate::modules::ModuleStore;
use crate::{CoreConfig, JobManager};
use weir_fuzz::{config, mutate, mutations};
use weir_runtime::connectors::AllowedRoots;
use weir_runtime::wasm::{Runtime, RuntimeConfig};

const TOKEN: &str = "fuzz-token";

/// A job a fuzzed submission may mutate (and one the fixture runs).
const SPEC: &str = r#"
[job]
name = "fuzzed"

[job.checkpoints]
interval_ms = 60000

[[source]]
id = "seq"
type = "generator"
kind = "sequence"
rate = 10

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "seq"
to = "out"
"#;

/// A JobManager with a fake TaskManager of many slots (it never answers:
/// the job stays deployed) and one job submitted, its router, and the
/// runtime they run on.
struct Fixture {
    rt: tokio::runtime::Runtime,
    router: Router,
    job: String,
    _dir: tempfile::TempDir,
    _tm: tokio::sync::mpsc::UnboundedReceiver<weir_runtime::rpc::ToTaskManager>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let entered = rt.enter();
        let runtime = Arc::new(Runtime::new(RuntimeConfig { cache_dir: None }).unwrap());
        let data_dir = dir.path().join("jobmanager");
        let store = ModuleStore::open(&data_dir.join("modules")).unwrap();
        let jm = JobManager::new(
            CoreConfig::for_tests(
                data_dir,
                dir.path().join("checkpoints"),
                AllowedRoots::none(),
            ),
            runtime,
            store,
        );
        let (_, tm) = jm.register_in_process("tm", 1_000_000);
        let job = rt
            .block_on(jm.submit(SPEC.to_owned(), None))
            .expect("the fixture's job is valid")
            .id;
        let router = router(
            jm,
            RestOptions {
                token: Some(TOKEN.into()),
                listen: "127.0.0.1:8081".parse().unwrap(),
                read_timeout: super::DEFAULT_READ_TIMEOUT,
                upload_timeout: super::DEFAULT_UPLOAD_TIMEOUT,
            },
        );
        drop(entered);
        Fixture {
            rt,
            router,
            job,
            _dir: dir,
            _tm: tm,
        }
    }

    /// The status `request` is answered with.
    fn status(&self, request: Request<Body>) -> u16 {
        let response = self
            .rt
            .block_on(self.router.clone().oneshot(request))
            .expect("the router is infallible");
        response.status().as_u16()
    }
}

/// Arbitrary JSON, a few levels deep.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,16}".prop_map(Value::String),
        Just(Value::String("/etc/passwd".into())),
        Just(Value::String("../../x".into())),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    "\\PC{0,6}",
                    Just("spec".to_owned()),
                    Just("dir".to_owned()),
                    Just("set".to_owned()),
                    Just("modules".to_owned()),
                    Just("from_savepoint".to_owned()),
                    Just("from_checkpoint".to_owned()),
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A path segment: the running job's id (`{job}`), plausible names, and
/// hostile ones (traversal, encodings, control characters, long).
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{job}".to_owned()),
        Just("sha256:00".to_owned()),
        Just("name@1.0".to_owned()),
        Just("..".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("%00".to_owned()),
        Just("%ff%fe".to_owned()),
        "[a-z0-9@:._-]{0,20}",
        "[a-zA-Z0-9%._~-]{200,300}",
    ]
}

/// A request path: an endpoint's template with fuzzed segments, or
/// something else.
fn path() -> impl Strategy<Value = String> {
    let template = prop_oneof![
        Just("/v1/overview"),
        Just("/v1/modules"),
        Just("/v1/modules/{}"),
        Just("/v1/modules/{}/content"),
        Just("/v1/jobs"),
        Just("/v1/jobs/{}"),
        Just("/v1/jobs/{}/cancel"),
        Just("/v1/jobs/{}/checkpoints"),
        Just("/v1/jobs/{}/savepoints"),
        Just("/v1/jobs/{}/upgrades"),
        Just("/v1/jobs/{}/logs"),
        Just("/v1/taskmanagers"),
        Just("/metrics"),
        Just("/"),
        Just("/{}/{}"),
    ];
    (template, segment(), segment())
        .prop_map(|(t, a, b)| t.replacen("{}", &a, 1).replacen("{}", &b, 1))
}

/// A query string: the ones endpoints read (`name`, `version`, the log
/// filters) with fuzzed values, or arbitrary text.
fn query() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("name"),
        Just("version"),
        Just("operator"),
        Just("subtask"),
        Just("after"),
        Just("limit"),
        Just("x"),
    ];
    let value = prop_oneof![
        "[a-z0-9._-]{0,12}",
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_owned()),
        "[a-zA-Z0-9%&=+]{0,24}",
    ];
    prop_oneof![
        Just(String::new()),
        prop::collection::vec((key, value), 0..4).prop_map(|pairs| {
            let q: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", q.join("&"))
        }),
    ]
}

/// A body: empty, random bytes, random JSON, or a valid request of some
/// endpoint mutated.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let valid = prop_oneof![
        Just(serde_json::json!({ "spec": SPEC, "set": ["job.parallelism=2"] })),
        Just(serde_json::json!({ "spec": SPEC, "from_checkpoint": { "path": "/etc" } })),
        Just(serde_json::json!({ "spec": "[job]\nname = \"x\"" })),
        Just(serde_json::json!({ "dir": "/tmp/savepoint", "stop": true })),
        Just(serde_json::json!({ "modules": { "a": "b@1" }, "dry_run": true })),
        Just(serde_json::json!({ "set": ["job.checkpoints.interval_ms=1"] })),
    ]
    .prop_map(|v| serde_json::to_vec(&v).unwrap());
    prop_oneof![
        Just(Vec::new()),
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        valid.clone(),
        (valid, mutations()).prop_map(|(v, m)| mutate(v, &m)),
        Just(b"\0asm\x01\0\0\0".to_vec()),
    ]
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        4 => Just(Method::GET),
        4 => Just(Method::POST),
        1 => Just(Method::DELETE),
        1 => Just(Method::PUT),
        1 => Just(Method::HEAD),
        1 => Just(Method::PATCH),
    ]
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        Just("application/json".to_owned()),
        Just("application/wasm".to_owned()),
        Just("application/json; charset=utf-8".to_owned()),
        Just("text/plain".to_owned()),
        "[ -~]{0,30}",
    ])
}

/// One fuzzed request.
#[derive(Debug, Clone)]
struct Fuzzed {
    method: Method,
    path: String,
    query: String,
    content_type: Option<String>,
    host: Option<String>,
    body: Vec<u8>,
}

fn fuzzed() -> impl Strategy<Value = Fuzzed> {
    let host = prop::option::weighted(
        0.5,
        prop_oneof![
            3 => Just("localhost".to_owned()),
            3 => Just("127.0.0.1:8081".to_owned()),
            1 => Just("[::1]".to_owned()),
            1 => Just("attacker.example".to_owned()),
            1 => "[ -~]{0,40}",
        ],
    );
    (method(), path(), query(), content_type(), host, body()).prop_map(
        |(method, path, query, content_type, host, body)| Fuzzed {
            method,
            path,
            query,
            content_type,
            host,
            body,
        },
    )
}

impl Fuzzed {
    /// The request, with `authorization` as its `Authorization` header;
    /// `None` when the fuzzed parts do not make a valid HTTP request (the
    /// server's parser refuses those before the router).
    fn request(&self, job: &str, authorization: Option<&[u8]>) -> Option<Request<Body>> {
        let uri = format!("{}{}", self.path.replace("{job}", job), self.query);
        let mut builder = Request::builder().method(self.method.clone()).uri(uri);
        if let Some(t) = &self.content_type {
            builder = builder.header(header::CONTENT_TYPE, t.as_str());
        }
        if let Some(h) = &self.host {
            builder = builder.header(header::HOST, h.as_str());
        }
        if let Some(a) = authorization {
            builder = builder.header(header::AUTHORIZATION, a);
        }
        builder.body(Body::from(self.body.clone())).ok()
    }
}

/// Whether `host` is one a loopback listener serves (no `Host` at all is).
fn served_host(host: Option<&str>) -> bool {
    super::auth::host_allowed(host, "127.0.0.1:8081".parse().unwrap())
}

proptest! {
    #![proptest_config(config())]

    /// With the token: an answer for every request, never a panic or a
    /// 500.
    #[test]
    fn every_request_gets_a_client_error_or_an_answer_never_a_500(req in fuzzed()) {
        let fixture = FIXTURE.with(|f| f.clone());
        let bearer = format!("Bearer {TOKEN}");
        if let Some(request) = req.request(&fixture.job, Some(bearer.as_bytes())) {
            let status = fixture.status(request);
            prop_assert!(status != 500, "{req:?} → {status}");
        }
    }

    /// Without the token (none, a wrong one, a prefix of it, the right one
    /// without `Bearer`): 401, or 403 for a refused `Host`, whatever the
    /// request; the UI's page answers 401 too.
    #[test]
    fn without_the_token_every_request_is_refused(
        req in fuzzed(),
        authorization in prop::option::of(prop_oneof![
            Just(TOKEN.as_bytes().to_vec()),
            Just(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]).into_bytes()),
            Just(format!("Bearer {TOKEN}x").into_bytes()),
            Just(format!("bearer {TOKEN}").into_bytes()),
            "[ -~]{0,40}".prop_map(String::into_bytes),
        ]),
    ) {
        let fixture = FIXTURE.with(|f| f.clone());
        if let Some(request) = req.request(&fixture.job, authorization.as_deref()) {
            let status = fixture.status(request);
            let expected = if served_host(req.host.as_deref()) { 401 } else { 403 };
            prop_assert_eq!(status, expected, "{:?}", req);
        }
    }
}

/// The properties are not vacuous: most fuzzed requests are valid HTTP,
/// and they reach the handlers (answers other than the guard's and the
/// fallback's), some successfully.
#[test]
fn fuzzed_requests_reach_the_handlers() {
    use proptest::strategy::ValueTree;
    let fixture = FIXTURE.with(|f| f.clone());
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let bearer = format!("Bearer {TOKEN}");
    let mut statuses = std::collections::BTreeMap::new();
    for _ in 0..400 {
        let req = fuzzed().new_tree(&mut runner).unwrap().current();
        let status = req
            .request(&fixture.job, Some(bearer.as_bytes()))
            .map(|r| fixture.status(r));
        *statuses.entry(status).or_insert(0) += 1;
    }
    let count = |f: &dyn Fn(u16) -> bool| -> u32 {
        statuses
            .iter()
            .filter(|(s, _)| s.is_some_and(f))
            .map(|(_, n)| n)
            .sum()
    };
    let built = count(&|_| true);
    assert!(built >= 200, "{statuses:?}");
    assert!(count(&|s| (200..300).contains(&s)) >= 20, "{statuses:?}");
    assert!(
        count(&|s| (400..500).contains(&s) && ![401, 403, 404].contains(&s)) >= 20,
        "{statuses:?}"
    );
    assert_eq!(count(&|s| s == 500), 0, "{statuses:?}");
    eprintln!("answers by status (None: not valid HTTP): {statuses:?}");
}

thread_local! {
    /// One fixture per test thread: a JobManager takes a while to start,
    /// and the properties only read from it or make it refuse.
    static FIXTURE: Arc<Fixture> = Arc::new(Fixture::new());
}
