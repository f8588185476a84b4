//! The JobManager's REST API over real HTTP, endpoint by endpoint, as
//! `host/jobmanager/src/REST.md` documents it: one cluster of real daemons
//! per test (modules, jobs, limits and auth), every success checked against
//! values computed here (hashes with `sha2`, counts from what the test did)
//! and every error checked for its status and its `{"error": "..."}` body.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use weir_tests::artifacts;

use crate::cluster::harness::{Cluster, READY_TIMEOUT, wait_for};

/// The JobManager's limit on a `POST /v1/jobs` body (REST.md: 1 MiB).
const MAX_JOB_BODY: usize = 1 << 20;

/// An HTTP answer: status, `Content-Type` and body bytes.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (panics, showing the body, if it is not).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// A REST client for one JobManager, optionally sending a bearer token.
pub(crate) struct Api {
    base: String,
    pub(crate) agent: ureq::Agent,
    token: Option<String>,
}

impl Api {
    /// A client sending the cluster's own token.
    pub(crate) fn of(cluster: &Cluster) -> Api {
        Api::new(cluster, cluster.token.as_deref())
    }

    pub(crate) fn new(cluster: &Cluster, token: Option<&str>) -> Api {
        Api::at(&cluster.rest, token)
    }

    /// A client for the REST API at `base` (`http://host:port`).
    pub(crate) fn at(base: &str, token: Option<&str>) -> Api {
        Api {
            base: base.to_owned(),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into(),
            token: token.map(str::to_owned),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        }
    }

    pub(crate) fn get(&self, path: &str) -> Reply {
        read(self.auth(self.agent.get(self.url(path))).call(), path)
    }

    pub(crate) fn delete(&self, path: &str) -> Reply {
        read(self.auth(self.agent.delete(self.url(path))).call(), path)
    }

    /// POST `body` with `Content-Type: content_type`.
    pub(crate) fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Reply {
        let req = self
            .auth(self.agent.post(self.url(path)))
            .header("Content-Type", content_type);
        read(req.send(body), path)
    }

    pub(crate) fn post_empty(&self, path: &str) -> Reply {
        read(
            self.auth(self.agent.post(self.url(path))).send_empty(),
            path,
        )
    }

    /// `POST /v1/modules?name=..[&version=..]` with `bytes`.
    pub(crate) fn upload(&self, name: Option<&str>, version: Option<&str>, bytes: &[u8]) -> Reply {
        let mut req = self
            .auth(self.agent.post(self.url("/v1/modules")))
            .header("Content-Type", "application/wasm");
        if let Some(n) = name {
            req = req.query("name", n);
        }
        if let Some(v) = version {
            req = req.query("version", v);
        }
        read(req.send(bytes), "/v1/modules")
    }

    /// `POST /v1/jobs` with `{"spec": spec}`.
    pub(crate) fn submit(&self, spec: &str) -> Reply {
        let body = serde_json::to_vec(&json!({ "spec": spec })).unwrap();
        self.post("/v1/jobs", "application/json", &body)
    }
}

pub(crate) fn read(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    path: &str,
) -> Reply {
    let mut r = result.unwrap_or_else(|e| panic!("{path}: no HTTP answer: {e}"));
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap_or_else(|e| panic!("{path}: cannot read the body: {e}"));
    Reply {
        status,
        content_type,
        body,
    }
}

/// Asserts an error answer: `status`, a JSON body that is exactly
/// `{"error": "<message>"}`, and a message containing each of `needles`.
#[track_caller]
pub(crate) fn assert_error(reply: &Reply, status: u16, needles: &[&str], what: &str) {
    assert_eq!(
        reply.status,
        status,
        "{what}: status (body {:?})",
        String::from_utf8_lossy(&reply.body)
    );
    assert_error_body(reply, needles, what);
}

/// Like [`assert_error`] for a status that REST.md only gives as "4xx".
#[track_caller]
fn assert_client_error(reply: &Reply, needles: &[&str], what: &str) {
    assert!(
        (400..500).contains(&reply.status),
        "{what}: status {} is not 4xx (body {:?})",
        reply.status,
        String::from_utf8_lossy(&reply.body)
    );
    assert_error_body(reply, needles, what);
}

#[track_caller]
fn assert_error_body(reply: &Reply, needles: &[&str], what: &str) {
    assert!(
        reply.content_type.starts_with("application/json"),
        "{what}: error Content-Type is {:?}",
        reply.content_type
    );
    let v = reply.json();
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("{what}: error body is not an object: {v}"));
    assert_eq!(
        obj.keys().collect::<Vec<_>>(),
        ["error"],
        "{what}: error body has exactly the key `error`: {v}"
    );
    let message = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: `error` is not a string: {v}"));
    for n in needles {
        assert!(
            message.contains(n),
            "{what}: error message lacks {n:?}: {message:?}"
        );
    }
}

/// `sha256:<hex>` of `bytes`, computed here (not by Weir).
fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub(crate) fn artifact(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Asserts that `v` is the `Module` entry `name@version` of `bytes`.
#[track_caller]
fn assert_module(v: &Value, name: &str, version: &str, bytes: &[u8], what: &str) {
    assert_eq!(v["name"], name, "{what}: name in {v}");
    assert_eq!(v["version"], version, "{what}: version in {v}");
    assert_eq!(v["hash"], sha256(bytes), "{what}: hash in {v}");
    assert_eq!(v["size"], bytes.len() as u64, "{what}: size in {v}");
    assert!(
        v["uploaded_at_ms"].is_u64(),
        "{what}: uploaded_at_ms in {v}"
    );
}

/// `(name, version)` of each entry of a `[Module]`, in order.
fn names_versions(list: &Value) -> Vec<(String, String)> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or_default().to_owned(),
                m["version"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn u64_at(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no number `{key}` in {v}"))
}

/// A job: sequence generator → `module` → blackhole, at `parallelism`,
/// endless unless `count` is given.
fn spec(name: &str, module: &str, parallelism: u32, count: Option<u64>) -> String {
    let limit = match count {
        Some(n) => format!("count = {n}"),
        None => "rate = 1000".to_owned(),
    };
    format!(
        r#"
[job]
name = "{name}"
parallelism = {parallelism}

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
{limit}

[[operator]]
id = "up"
module = "{module}"

[[sink]]
id = "null"
type = "blackhole"

[[edge]]
from = "gen"
to = "up"

[[edge]]
from = "up"
to = "null"
"#
    )
}

/// The `Overview`'s job counts as (running, finished, failed, canceled).
fn job_counts(overview: &Value) -> (u64, u64, u64, u64) {
    let j = &overview["jobs"];
    (
        u64_at(j, "running"),
        u64_at(j, "finished"),
        u64_at(j, "failed"),
        u64_at(j, "canceled"),
    )
}

/// Uploads, lists, resolves, downloads and deletes modules; every upload
/// error; and a module in use by a running job cannot be deleted.
#[test]
fn rest_modules_upload_resolve_download_delete() {
    let cluster = Cluster::start(1, 1, &[]);
    let api = Api::of(&cluster);
    let upper = artifact(artifacts::UPPERCASE);
    let tokenize = artifact(artifacts::TOKENIZE);
    let word_count = artifact(artifacts::WORD_COUNT);
    assert!(
        upper != tokenize && tokenize != word_count,
        "distinct modules"
    );

    let overview = api.get("/v1/overview");
    assert_eq!(overview.status, 200, "overview");
    let o = overview.json();
    assert_eq!(o["modules"], 0, "no module yet: {o}");
    let list = api.get("/v1/modules");
    assert_eq!(list.status, 200, "empty list");
    assert_eq!(list.json(), json!([]), "no module listed yet");

    // A valid component: 201 with its hash and size; the same bytes again:
    // 200 and the same entry (first upload time kept).
    let before = now_ms();
    let created = api.upload(Some("upper"), Some("1.0"), &upper);
    let after = now_ms();
    assert_eq!(created.status, 201, "first upload creates");
    assert!(
        created.content_type.starts_with("application/json"),
        "{}",
        created.content_type
    );
    let first = created.json();
    assert_module(&first, "upper", "1.0", &upper, "first upload");
    let at = u64_at(&first, "uploaded_at_ms");
    assert!(
        (before..=after).contains(&at),
        "uploaded_at_ms {at} within the request ({before}..={after})"
    );
    let again = api.upload(Some("upper"), Some("1.0"), &upper);
    assert_eq!(again.status, 200, "same bytes, same name@version: 200");
    assert_eq!(again.json(), first, "the existing entry, unchanged");

    // Same name@version, other bytes: 409 naming it.
    let conflict = api.upload(Some("upper"), Some("1.0"), &tokenize);
    assert_error(&conflict, 409, &["upper@1.0"], "name@version taken");

    // No version: 1, 2, and the same bytes again get their version back.
    let v1 = api.upload(Some("tok"), None, &tokenize);
    assert_eq!(v1.status, 201, "auto version 1");
    assert_module(&v1.json(), "tok", "1", &tokenize, "auto version 1");
    let v2 = api.upload(Some("tok"), None, &word_count);
    assert_eq!(v2.status, 201, "auto version 2");
    assert_module(&v2.json(), "tok", "2", &word_count, "auto version 2");
    let v1_again = api.upload(Some("tok"), None, &tokenize);
    assert_eq!(v1_again.status, 200, "known bytes without a version");
    assert_module(&v1_again.json(), "tok", "1", &tokenize, "known bytes");

    // Bad uploads.
    let mut random = vec![0u8; 4096];
    let mut x: u32 = 0x9e37_79b9;
    for b in &mut random {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let junk = api.upload(Some("junk"), Some("1"), &random);
    assert_error(&junk, 400, &["junk"], "random bytes");
    let core = api.upload(Some("core"), Some("1"), b"\0asm\x01\0\0\0");
    assert_error(&core, 400, &["core", "component"], "a core Wasm module");
    let probe = api.upload(
        Some("probe"),
        Some("1"),
        &artifact(artifacts::BOUNDARY_PROBE),
    );
    assert_error(&probe, 400, &["probe"], "a component that is no operator");
    let unnamed = api.upload(None, Some("1"), &upper);
    assert_error(&unnamed, 400, &["name"], "missing name");
    let empty_name = api.upload(Some(""), Some("1"), &upper);
    assert_error(&empty_name, 400, &["name"], "empty name");
    let traversal = api.upload(Some("../x"), Some("1"), &upper);
    assert_error(&traversal, 400, &["../x"], "bad name");
    let bad_version = api.upload(Some("upper"), Some("../1"), &upper);
    assert_error(&bad_version, 400, &["../1"], "bad version");
    let empty = api.upload(Some("upper"), Some("9"), b"");
    assert_error(&empty, 400, &["empty"], "empty body");

    // The list: three entries, by name then version; the failures left none.
    let list = api.get("/v1/modules");
    assert_eq!(list.status, 200, "list");
    let list = list.json();
    let expected: Vec<(String, String)> = [("tok", "1"), ("tok", "2"), ("upper", "1.0")]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(names_versions(&list), expected, "listed modules: {list}");
    assert_module(&list[0], "tok", "1", &tokenize, "list[0]");
    assert_module(&list[1], "tok", "2", &word_count, "list[1]");
    assert_module(&list[2], "upper", "1.0", &upper, "list[2]");
    assert_eq!(
        api.get("/v1/overview").json()["modules"],
        3,
        "overview counts the modules"
    );

    // Resolving: name@version, name (highest version), sha256:hex.
    let get = api.get("/v1/modules/tok@1");
    assert_eq!(get.status, 200, "tok@1");
    assert_module(&get.json(), "tok", "1", &tokenize, "GET tok@1");
    let latest = api.get("/v1/modules/tok");
    assert_eq!(latest.status, 200, "tok");
    assert_module(&latest.json(), "tok", "2", &word_count, "GET tok = tok@2");
    let by_hash = api.get(&format!("/v1/modules/{}", sha256(&upper)));
    assert_eq!(by_hash.status, 200, "by hash");
    assert_module(&by_hash.json(), "upper", "1.0", &upper, "GET sha256:");
    for missing in ["nope", "tok@3", "nope@1"] {
        let r = api.get(&format!("/v1/modules/{missing}"));
        assert_error(&r, 404, &[missing], &format!("GET unknown {missing}"));
    }
    let absent_hash = sha256(b"never uploaded");
    let r = api.get(&format!("/v1/modules/{absent_hash}"));
    assert_error(&r, 404, &[&absent_hash], "GET unknown hash");
    let r = api.get("/v1/modules/sha256:xyz");
    assert_error(&r, 400, &["sha256:xyz"], "GET malformed hash");

    // Content: exactly the uploaded bytes.
    for (reference, bytes) in [
        ("upper@1.0", &upper),
        ("tok", &word_count),
        ("tok@1", &tokenize),
        (sha256(&upper).as_str(), &upper),
    ] {
        let r = api.get(&format!("/v1/modules/{reference}/content"));
        assert_eq!(r.status, 200, "content of {reference}");
        assert_eq!(
            r.content_type, "application/wasm",
            "content type of {reference}"
        );
        assert!(
            r.body == *bytes,
            "content of {reference}: {} bytes, not the {} uploaded",
            r.body.len(),
            bytes.len()
        );
    }
    let r = api.get("/v1/modules/nope/content");
    assert_error(&r, 404, &["nope"], "content of an unknown module");

    // A running job uses upper@1.0: it cannot be deleted, by any reference.
    let job = api.submit(&spec("uses-upper", "upper@1.0", 1, None));
    assert_eq!(job.status, 201, "submit: {:?}", job.json());
    let id = job.json()["id"].as_str().expect("job id").to_owned();
    cluster.wait_job(&id, |s| s == "running");
    for reference in ["upper@1.0", "upper", &sha256(&upper)] {
        let r = api.delete(&format!("/v1/modules/{reference}"));
        assert_error(
            &r,
            409,
            &[&id, "uses-upper"],
            &format!("DELETE {reference} in use"),
        );
    }
    assert_eq!(
        api.get("/v1/modules/upper@1.0").status,
        200,
        "still there after the refused deletes"
    );
    let cancel = api.post_empty(&format!("/v1/jobs/{id}/cancel"));
    assert_eq!(cancel.status, 202, "cancel");
    cluster.wait_job(&id, |s| s == "canceled");

    // Now it goes: 200 with the deleted entry, then 404 everywhere.
    let deleted = api.delete("/v1/modules/upper@1.0");
    assert_eq!(deleted.status, 200, "DELETE after the job ended");
    assert_module(&deleted.json(), "upper", "1.0", &upper, "deleted entry");
    let r = api.get("/v1/modules/upper@1.0");
    assert_error(&r, 404, &["upper@1.0"], "GET after DELETE");
    let r = api.get("/v1/modules/upper@1.0/content");
    assert_error(&r, 404, &["upper@1.0"], "content after DELETE");
    let r = api.get(&format!("/v1/modules/{}/content", sha256(&upper)));
    assert_error(&r, 404, &[], "content by hash after DELETE");
    let r = api.delete("/v1/modules/upper@1.0");
    assert_error(&r, 404, &["upper@1.0"], "DELETE twice");

    // Deleting the highest version makes the next one the latest.
    let deleted = api.delete("/v1/modules/tok");
    assert_eq!(deleted.status, 200, "DELETE tok (= tok@2)");
    assert_module(&deleted.json(), "tok", "2", &word_count, "deleted tok");
    let latest = api.get("/v1/modules/tok");
    assert_eq!(latest.status, 200, "tok after deleting tok@2");
    assert_module(&latest.json(), "tok", "1", &tokenize, "tok is now tok@1");
    let expected = vec![("tok".to_owned(), "1".to_owned())];
    assert_eq!(
        names_versions(&api.get("/v1/modules").json()),
        expected,
        "list after the deletes"
    );
    assert_eq!(
        api.get("/v1/overview").json()["modules"],
        1,
        "overview after the deletes"
    );

    // Two names for the same bytes share one blob: deleting one entry
    // leaves the other's content intact.
    let alias = api.upload(Some("alias"), Some("a"), &tokenize);
    assert_eq!(alias.status, 201, "same bytes under another name");
    assert_module(&alias.json(), "alias", "a", &tokenize, "alias");
    let deleted = api.delete("/v1/modules/alias@a");
    assert_eq!(deleted.status, 200, "DELETE alias@a");
    let r = api.get("/v1/modules/tok@1/content");
    assert_eq!(r.status, 200, "tok@1 content after deleting its alias");
    assert!(r.body == tokenize, "tok@1 still has its bytes");
}

/// Submits, lists, inspects and cancels jobs; every submission error;
/// TaskManagers and the overview follow; unknown paths are JSON 404s.
#[test]
fn rest_jobs_submit_inspect_cancel() {
    const SLOTS: u64 = 2;
    let cluster = Cluster::start(1, SLOTS as u32, &[]);
    let api = Api::of(&cluster);
    let upper = artifact(artifacts::UPPERCASE);

    let o = api.get("/v1/overview");
    assert_eq!(o.status, 200, "overview");
    let o = o.json();
    assert_eq!(
        o["version"],
        env!("CARGO_PKG_VERSION"),
        "the workspace version: {o}"
    );
    assert_eq!(o["taskmanagers"], 1, "one TaskManager: {o}");
    assert_eq!(o["slots_total"], SLOTS, "its slots: {o}");
    assert_eq!(o["slots_free"], SLOTS, "all free: {o}");
    assert_eq!(job_counts(&o), (0, 0, 0, 0), "no job yet: {o}");
    assert_eq!(o["modules"], 0, "no module yet: {o}");
    assert_eq!(api.get("/v1/jobs").json(), json!([]), "no job listed yet");

    // TaskManagers.
    let tms = api.get("/v1/taskmanagers");
    assert_eq!(tms.status, 200, "taskmanagers");
    let tms = tms.json();
    let tms = tms.as_array().expect("a list of TaskManagers");
    assert_eq!(tms.len(), 1, "one TaskManager: {tms:?}");
    let tm = &tms[0];
    assert_eq!(tm["id"], "tm-1", "the harness's id: {tm}");
    assert_eq!(tm["slots_total"], SLOTS, "{tm}");
    assert_eq!(tm["slots_free"], SLOTS, "{tm}");
    assert_eq!(tm["state"], "active", "{tm}");
    let data: SocketAddr = tm["data_address"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("data_address is a socket address: {tm}"));
    assert!(data.port() != 0, "a bound data port: {tm}");
    assert!(
        u64_at(tm, "registered_at_ms") <= now_ms(),
        "registered in the past: {tm}"
    );
    assert!(
        u64_at(tm, "last_heartbeat_ms_ago") < READY_TIMEOUT.as_millis() as u64,
        "a recent heartbeat: {tm}"
    );
    let net = tm["net"].as_object().expect("net is an object");
    for key in [
        "buffered_bytes",
        "max_buffered_bytes",
        "bytes_sent",
        "bytes_received",
    ] {
        assert!(net.get(key).is_some_and(Value::is_u64), "net.{key}: {tm}");
    }

    let up = api.upload(Some("upper"), Some("1"), &upper);
    assert_eq!(up.status, 201, "upload");

    // Bad bodies.
    let r = api.post("/v1/jobs", "application/json", b"{\"spec\": ");
    assert_error(&r, 400, &[], "malformed JSON");
    let r = api.post("/v1/jobs", "application/json", b"{}");
    assert_client_error(&r, &["spec"], "JSON without spec");
    let body = json!({ "spec": spec("x", "upper@1", 1, None), "priority": 1 });
    let r = api.post(
        "/v1/jobs",
        "application/json",
        &serde_json::to_vec(&body).unwrap(),
    );
    assert_client_error(&r, &["priority"], "unknown field");
    let r = api.post("/v1/jobs", "application/json", b"\"spec\"");
    assert_client_error(&r, &["invalid type"], "JSON of the wrong shape");
    let r = api.post("/v1/jobs", "text/plain", b"{\"spec\": \"\"}");
    assert_client_error(&r, &["Content-Type"], "not sent as JSON");

    // Bad specs.
    let r = api.submit("[job\nname = ");
    assert_error(&r, 400, &["TOML", "line 1"], "invalid TOML");
    let bad_edge = spec("bad-edge", "upper@1", 1, None).replace(
        "from = \"up\"\nto = \"null\"",
        "from = \"up\"\nto = \"nowhere\"",
    );
    assert!(bad_edge.contains("nowhere"), "the spec was edited");
    let r = api.submit(&bad_edge);
    assert_error(
        &r,
        400,
        &["edge[1].to", "nowhere"],
        "edge to an unknown vertex",
    );
    let r = api.submit(&spec("bad-module", "nope@7", 1, None));
    assert_error(&r, 400, &["nope@7", "upload"], "unknown module");
    let r = api.submit(&spec("by-path", "/opt/ops/upper.wasm", 1, None));
    assert_error(&r, 400, &["upper.wasm", "upload"], "module as a path");
    let padding = "#".repeat(MAX_JOB_BODY + 1);
    let r = api.submit(&format!("{padding}\n{}", spec("big", "upper@1", 1, None)));
    assert_error(&r, 413, &["limit"], "body over 1 MiB");
    let r = api.submit(&spec("too-wide", "upper@1", SLOTS as u32 + 1, None));
    assert_error(
        &r,
        503,
        &["too-wide", &(SLOTS + 1).to_string(), "slots"],
        "more slots than the cluster has",
    );
    assert_eq!(
        api.get("/v1/jobs").json(),
        json!([]),
        "refused submissions leave no job"
    );

    // A good one.
    let before = now_ms();
    let created = api.submit(&spec("endless", "upper@1", 1, None));
    assert_eq!(created.status, 201, "submit: {:?}", created.json());
    let created = created.json();
    assert_eq!(created["name"], "endless", "{created}");
    let id = created["id"].as_str().expect("an id").to_owned();
    assert!(!id.is_empty(), "a non-empty id");
    assert_eq!(
        created.as_object().map(|o| o.len()),
        Some(2),
        "JobCreated is {{id, name}}: {created}"
    );

    let jobs = api.get("/v1/jobs");
    assert_eq!(jobs.status, 200, "jobs");
    let jobs = jobs.json();
    let summary = jobs
        .as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("job {id} listed: {jobs}"));
    assert_eq!(summary["name"], "endless", "{summary}");
    assert!(summary["state"].is_string(), "{summary}");
    let submitted = u64_at(summary, "submitted_at_ms");
    assert!(
        (before..=now_ms()).contains(&submitted),
        "submitted_at_ms {submitted} within the request: {summary}"
    );
    assert!(summary["ended_at_ms"].is_null(), "not ended: {summary}");
    assert!(summary["failure"].is_null(), "no failure: {summary}");

    // The detail: vertices with state, records and placed subtasks.
    cluster.wait_job(&id, |s| s == "running");
    let detail = wait_for("records through every vertex", || {
        let r = api.get(&format!("/v1/jobs/{id}"));
        assert_eq!(r.status, 200, "job detail");
        let d = r.json();
        let flowing = d["vertices"].as_array()?.iter().all(|v| {
            v["state"] == "running"
                && (v["role"] == "sink" || v["records_out"].as_u64() > Some(0))
                && (v["role"] == "source" || v["records_in"].as_u64() > Some(0))
        });
        flowing.then_some(d)
    });
    assert_eq!(detail["id"], id.as_str(), "{detail}");
    assert_eq!(detail["name"], "endless", "{detail}");
    let vertices = detail["vertices"].as_array().unwrap();
    let roles: Vec<(&str, &str)> = vertices
        .iter()
        .map(|v| (v["id"].as_str().unwrap(), v["role"].as_str().unwrap()))
        .collect();
    assert_eq!(
        roles,
        [("gen", "source"), ("up", "operator"), ("null", "sink")],
        "vertices and roles: {detail}"
    );
    for v in vertices {
        assert_eq!(v["parallelism"], 1, "{v}");
        for key in ["busy_ms", "backpressured_ms", "idle_ms"] {
            assert!(v[key].is_u64(), "{key} in {v}");
        }
        let subtasks = v["subtasks"].as_array().expect("subtasks");
        assert_eq!(subtasks.len(), 1, "one subtask: {v}");
        assert_eq!(subtasks[0]["index"], 0, "{v}");
        assert_eq!(subtasks[0]["taskmanager"], "tm-1", "{v}");
        assert_eq!(subtasks[0]["state"], "running", "{v}");
    }
    let r = api.get("/v1/jobs/0000000000000000");
    assert_error(&r, 404, &["0000000000000000"], "unknown job");

    // The overview and the TaskManager count the running job and its slot.
    let o = api.get("/v1/overview").json();
    assert_eq!(job_counts(&o), (1, 0, 0, 0), "one running job: {o}");
    assert_eq!(o["slots_free"], SLOTS - 1, "one slot taken: {o}");
    assert_eq!(o["modules"], 1, "one module: {o}");
    assert_eq!(
        cluster.taskmanager("tm-1")["slots_free"],
        SLOTS - 1,
        "the TaskManager's slot is taken"
    );

    // A finite job finishes next to it.
    let finite = api.submit(&spec("finite", "upper@1", 1, Some(100)));
    assert_eq!(finite.status, 201, "finite job: {:?}", finite.json());
    let finite = finite.json()["id"].as_str().unwrap().to_owned();
    let done = cluster.wait_job(&finite, |s| s != "running");
    assert_eq!(done["state"], "finished", "{done}");
    // The final counts come in a report the TaskManager sends after the
    // subtasks' `finished` states, so they may lag the state briefly.
    wait_for("the sink's final count of 100 records", || {
        let d = api.get(&format!("/v1/jobs/{finite}")).json();
        let sink = &d["vertices"][2];
        assert_eq!(sink["id"], "null", "{d}");
        let n = u64_at(sink, "records_in");
        assert!(n <= 100, "at most the 100 generated records: {d}");
        (n == 100).then_some(())
    });
    let r = api.post_empty(&format!("/v1/jobs/{finite}/cancel"));
    assert_error(&r, 409, &[&finite, "finished"], "cancel of a finished job");

    // Cancel: 202, then canceled; a second cancel is a conflict.
    let cancel = api.post_empty(&format!("/v1/jobs/{id}/cancel"));
    assert_eq!(cancel.status, 202, "cancel");
    let c = cancel.json();
    assert_eq!(c["id"], id.as_str(), "{c}");
    assert!(
        c["state"] == "canceling" || c["state"] == "canceled",
        "the summary shows it stopping: {c}"
    );
    let ended = cluster.wait_job(&id, |s| s != "running" && s != "canceling");
    assert_eq!(ended["state"], "canceled", "{ended}");
    let ended_at = u64_at(&ended, "ended_at_ms");
    assert!(ended_at >= submitted, "ended after it started: {ended}");
    assert!(ended["failure"].is_null(), "no failure: {ended}");
    let r = api.post_empty(&format!("/v1/jobs/{id}/cancel"));
    assert_error(&r, 409, &[&id, "canceled"], "cancel twice");
    let r = api.post_empty("/v1/jobs/0000000000000000/cancel");
    assert_error(&r, 404, &["0000000000000000"], "cancel of an unknown job");

    let o = wait_for("the slots to be free again", || {
        let o = api.get("/v1/overview").json();
        (o["slots_free"] == SLOTS).then_some(o)
    });
    assert_eq!(
        job_counts(&o),
        (0, 1, 0, 1),
        "one finished, one canceled: {o}"
    );
    let jobs = api.get("/v1/jobs").json();
    let mut listed: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut expected = vec![id.as_str(), finite.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected, "both jobs listed: {jobs}");

    // Unknown paths and methods (`/` is the web UI's page: cluster::ui).
    for path in ["/v1/nope", "/v2/overview"] {
        let r = api.get(path);
        assert_error(&r, 404, &["endpoint"], &format!("GET {path}"));
    }
    let r = api.post_empty("/v1/nope");
    assert_error(&r, 404, &["endpoint"], "POST to an unknown path");
}

/// The module size limit, a bearer token given with `--rest-token`, and the
/// refusal to serve a non-loopback address without one.
#[test]
fn rest_limits_and_token() {
    let cluster = Cluster::start(0, 1, &["--max-module-mb", "1", "--rest-token", "secret"]);
    let anonymous = Api::new(&cluster, None);
    let wrong = Api::new(&cluster, Some("secrets"));
    let api = Api::new(&cluster, Some("secret"));

    // Auth: every endpoint wants the token.
    for path in ["/v1/overview", "/v1/modules", "/v1/jobs", "/v1/nope"] {
        let r = anonymous.get(path);
        assert_error(&r, 401, &["token"], &format!("GET {path} without token"));
        let r = wrong.get(path);
        assert_error(&r, 401, &["token"], &format!("GET {path} wrong token"));
    }
    let r = anonymous.upload(Some("upper"), Some("1"), &artifact(artifacts::UPPERCASE));
    assert_error(&r, 401, &["token"], "upload without token");
    let r = anonymous.submit("x");
    assert_error(&r, 401, &["token"], "submit without token");
    let basic = api
        .agent
        .get(api.url("/v1/overview"))
        .header("Authorization", "Basic secret")
        .call();
    assert_error(
        &read(basic, "/v1/overview"),
        401,
        &["token"],
        "Basic scheme",
    );
    let r = api.get("/v1/overview");
    assert_eq!(r.status, 200, "with the token");
    assert_eq!(r.json()["taskmanagers"], 0, "overview with the token");
    let r = api.get("/v1/nope");
    assert_error(&r, 404, &["endpoint"], "unknown path with the token");
    assert_eq!(
        anonymous.get("/v1/modules").status,
        401,
        "nothing was uploaded"
    );
    assert_eq!(api.get("/v1/modules").json(), json!([]), "no module stored");

    // Size limit: a module under 1 MiB is fine, 2 MiB is 413.
    let upper = artifact(artifacts::UPPERCASE);
    assert!(upper.len() < 1 << 20, "uppercase fits the limit");
    let r = api.upload(Some("upper"), Some("1"), &upper);
    assert_eq!(r.status, 201, "a module under the limit");
    let mut big = upper.clone();
    big.resize(2 << 20, 0);
    let r = api.upload(Some("big"), Some("1"), &big);
    assert_error(&r, 413, &["1 MiB", "--max-module-mb"], "2 MiB over 1 MiB");
    let list = api.get("/v1/modules").json();
    let expected = vec![("upper".to_owned(), "1".to_owned())];
    assert_eq!(
        names_versions(&list),
        expected,
        "the big one was not stored"
    );

    // `--rest` off loopback without a token: refused at start, exit 2.
    let stderr = cluster.dir.path().join("public.stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["jobmanager", "--rest", "0.0.0.0:0", "--rpc", "127.0.0.1:0"])
        .arg("--rest-insecure-loopback")
        .arg("--data-dir")
        .arg(cluster.dir.path().join("public"))
        .arg("--certs")
        .arg(cluster.certs())
        .env_remove("WEIR_REST_TOKEN")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("weir starts");
    let mut child = Reaped(child);
    let status = wait_exit(&mut child.0, Duration::from_secs(60));
    let text = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "exit code 2; stderr:\n{text}");
    assert!(
        text.contains("--rest-insecure-loopback") && text.contains("0.0.0.0"),
        "the message names the address and the flag:\n{text}"
    );
    assert!(!text.contains("panicked"), "no panic:\n{text}");
}

/// A child process killed and reaped when dropped (a failing assertion
/// leaves no daemon behind).
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls until `child` exits; panics if it is still running after `limit`.
pub(crate) fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    wait_for("the process to exit by itself", || {
        let status = child.try_wait().expect("try_wait");
        assert!(
            status.is_some() || Instant::now() < deadline,
            "still running after {limit:?}"
        );
        status
    })
}
