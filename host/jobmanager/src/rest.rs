//! The JobManager's REST API (axum, JSON) and its HTTP server. Every
//! endpoint is listed in `REST.md` next to this file.
//!
//! Handlers are thin: extract, call [`JobManager`], map [`ApiError`] to a
//! status with a `{ "error": ... }` body. Extractor rejections (malformed
//! JSON, a body over its limit, a bad query) become the same JSON errors.
//! A body over its limit is read to its end (up to [`MAX_DRAIN`]) before
//! the 413 goes out, so that a client still sending gets the answer rather
//! than a reset connection.
//!
//! Every request passes a guard first ([`auth`]): the `Host` allow-list on
//! a loopback listener (403), then `Authorization: Bearer <token>` unless
//! the server was started with `--rest-insecure-loopback` (401). The web
//! UI's routes ([`crate::ui`]) are behind the same guard; a page request
//! refused 401 gets the page's empty shell, which asks for the token.
//!
//! Resources a client holds are bounded: [`serve`] closes a connection
//! that does not send a complete request header within the read timeout
//! (also an idle keep-alive one), a body that stalls that long is answered
//! 408, and at most [`MAX_CONCURRENT_UPLOADS`] module uploads are read and
//! validated at once (the others wait their turn).

pub mod auth;
#[cfg(test)]
mod fuzz_tests;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{FromRef, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::sync::Semaphore;

use super::{ApiError, FromSavepoint, JobManager, LogQuery, UpgradeRequest};

/// Largest job submission body.
pub const MAX_JOB_BODY: usize = 1 << 20;

/// How much of a body over its limit is still read, and discarded, before
/// the 413 answer. Closing a connection with unread request bytes resets it,
/// and a client still writing then sees "broken pipe" instead of the 413
/// (`weir upload` of a too-big module did). Reading on costs only
/// bandwidth; past this much the connection is closed anyway.
pub const MAX_DRAIN: usize = 1 << 30;

/// What is drained of the body of a request that is refused before its
/// body matters (no token, unknown path): a client without the token must
/// not make the server read a gigabyte.
pub const MAX_DRAIN_REFUSED: usize = 1 << 20;

/// Module uploads read and validated at once; more wait their turn. Each
/// holds its body (up to `--max-module-mb`) and a compilation in memory, so
/// this bounds what uploads can take of the JobManager's memory. Two: one
/// large upload does not block a small one, and a 2-core machine compiles
/// no more than two at a time anyway.
pub const MAX_CONCURRENT_UPLOADS: usize = 2;

/// Default of `--rest-read-timeout-ms`: how long a client may take to send
/// a request's header (counted from the connection's start or its previous
/// response) and how long its body may stall between two chunks. Long
/// enough for a slow link, short enough that held-open connections do not
/// pile up.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Default of `--rest-upload-timeout-ms`: how long one module upload may
/// take to arrive in all. An upload holds one of the
/// [`MAX_CONCURRENT_UPLOADS`] turns while its body arrives, and the read
/// timeout only bounds each stall: without this, a client trickling a byte
/// at a time would keep its turn, and every other upload waiting, for as
/// long as it likes. Ten minutes: 256 MiB at under 0.5 MiB/s.
pub const DEFAULT_UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// How long to wait after a failed `accept` (out of file descriptors, most
/// likely) before trying again: open connections get a chance to close.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How the REST server guards and bounds requests.
#[derive(Debug, Clone)]
pub struct RestOptions {
    /// The token every request must send; `None` only with
    /// `--rest-insecure-loopback` (see [`auth::RestAuth`]).
    pub token: Option<String>,
    /// The address the server listens on, for the `Host` allow-list.
    pub listen: SocketAddr,
    /// How long a client may stall while sending a request's header or
    /// body ([`DEFAULT_READ_TIMEOUT`]).
    pub read_timeout: Duration,
    /// How long a module upload's body may take in all
    /// ([`DEFAULT_UPLOAD_TIMEOUT`]).
    pub upload_timeout: Duration,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(serde_json::json!({ "error": self.message }))).into_response()
    }
}

fn rejected(status: StatusCode, text: String) -> ApiError {
    ApiError {
        status: status.as_u16(),
        message: text,
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        rejected(r.status(), r.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        rejected(r.status(), r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        rejected(r.status(), r.body_text())
    }
}

type Jm = State<Arc<JobManager>>;

/// What the handlers share: the JobManager, and the limits on reading
/// bodies.
#[derive(Clone)]
struct AppState {
    jm: Arc<JobManager>,
    limits: Arc<Limits>,
}

impl FromRef<AppState> for Arc<JobManager> {
    fn from_ref(state: &AppState) -> Self {
        state.jm.clone()
    }
}

impl FromRef<AppState> for Arc<Limits> {
    fn from_ref(state: &AppState) -> Self {
        state.limits.clone()
    }
}

/// Bounds on reading request bodies.
struct Limits {
    /// See [`RestOptions::read_timeout`].
    read_timeout: Duration,
    /// One permit per upload in progress ([`MAX_CONCURRENT_UPLOADS`]).
    uploads: Semaphore,
    /// See [`RestOptions::upload_timeout`].
    upload_timeout: Duration,
}

/// What the guard in front of every route checks.
struct Guard {
    token: Option<String>,
    listen: SocketAddr,
    read_timeout: Duration,
}

/// The router, with every request guarded as `options` say.
pub fn router(jm: Arc<JobManager>, options: RestOptions) -> Router {
    let read_timeout = options.read_timeout;
    let state = AppState {
        jm,
        limits: Arc::new(Limits {
            read_timeout,
            uploads: Semaphore::new(MAX_CONCURRENT_UPLOADS),
            upload_timeout: options.upload_timeout,
        }),
    };
    let guard = Arc::new(Guard {
        token: options.token,
        listen: options.listen,
        read_timeout,
    });
    // The two endpoints with a body read it with `read_body`, which
    // enforces their limits (`DefaultBodyLimit` would not drain).
    Router::new()
        .route("/v1/overview", get(overview))
        .route("/v1/modules", get(list_modules).post(upload_module))
        .route(
            "/v1/modules/{reference}",
            get(get_module).delete(delete_module),
        )
        .route("/v1/modules/{reference}/content", get(module_content))
        .route("/v1/jobs", get(list_jobs).post(submit_job))
        .route("/v1/jobs/{id}", get(get_job))
        .route("/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/jobs/{id}/checkpoints", get(job_checkpoints))
        .route(
            "/v1/jobs/{id}/savepoints",
            get(job_savepoints).post(trigger_savepoint),
        )
        .route(
            "/v1/jobs/{id}/upgrades",
            get(job_upgrades).post(upgrade_job),
        )
        .route("/v1/jobs/{id}/logs", get(job_logs))
        .route("/v1/taskmanagers", get(taskmanagers))
        .route("/metrics", get(metrics))
        .merge(crate::ui::routes())
        .fallback(move |req: Request| async move {
            // Read any body first: see `MAX_DRAIN`.
            let _ = read_body(req.into_body(), 0, MAX_DRAIN_REFUSED, read_timeout).await;
            ApiError::not_found("no such endpoint; see GET /v1/overview and the REST reference")
        })
        .layer(middleware::from_fn_with_state(guard, guard_request))
        .with_state(state)
}

/// The `Host` allow-list, then the token (see [`auth`]).
async fn guard_request(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    // The authority of an absolute-form URI and every `Host` header: all
    // must be allowed (a non-UTF-8 `Host` names no allowed host).
    let uri_host = req.uri().authority().map(|a| a.as_str().to_owned());
    let header_hosts = req
        .headers()
        .get_all(header::HOST)
        .iter()
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    let refused_host = uri_host
        .into_iter()
        .chain(header_hosts)
        .find(|h| !auth::host_allowed(Some(h), guard.listen));
    let refusal = if let Some(host) = refused_host {
        let mut shown: String = host.chars().take(100).collect();
        if shown.len() < host.len() {
            shown.push('…');
        }
        Some((
            ApiError {
                status: 403,
                message: format!(
                    "Host `{shown}` is not served: on a loopback address the REST API answers \
                     only requests to localhost, 127.0.0.1 or [::1] (against DNS rebinding)"
                ),
            },
            false,
        ))
    } else if let Some(token) = &guard.token
        && !auth::token_matches(
            req.headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
            token,
        )
    {
        Some((
            ApiError {
                status: 401,
                message: "missing or wrong token: send Authorization: Bearer <token>; the token \
                          is in the JobManager's DATA_DIR/rest-token (the CLI reads it from \
                          there, or takes --rest-token-file / WEIR_REST_TOKEN_FILE or \
                          --rest-token / WEIR_REST_TOKEN)"
                    .into(),
            },
            true,
        ))
    } else {
        None
    };
    let Some((error, challenge)) = refusal else {
        return next.run(req).await;
    };
    // A browser navigating to a page of the UI sends no token: 401 all
    // the same, with the page's empty shell that asks for it (`ui`).
    let ui_page = challenge
        && (req.method() == axum::http::Method::GET || req.method() == axum::http::Method::HEAD)
        && crate::ui::is_page(req.uri().path());
    // Read any body first: see `MAX_DRAIN`.
    let _ = read_body(req.into_body(), 0, MAX_DRAIN_REFUSED, guard.read_timeout).await;
    if ui_page {
        return crate::ui::unauthorized_page();
    }
    let mut response = error.into_response();
    if challenge {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

/// Serves `router` over HTTP/1.1 on `listener` until this future is
/// dropped; with `tls`, over TLS (`--rest-tls`). A connection that does
/// not send a complete request header within `read_timeout` (counted from
/// its start, or from its previous response when kept alive) is closed:
/// half-sent requests do not pile up (`axum::serve` sets no timer, so
/// hyper's header timeout would be off); a TLS handshake gets as long.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    read_timeout: Duration,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("REST: cannot accept a connection: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let tls = tls.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(read_timeout);
            let served = match tls {
                None => {
                    let io = hyper_util::rt::TokioIo::new(WriteTimeout::new(stream, read_timeout));
                    http.serve_connection(io, service).await
                }
                Some(tls) => {
                    let stream = match tokio::time::timeout(read_timeout, tls.accept(stream)).await
                    {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!("REST TLS handshake failed: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("REST TLS handshake timed out");
                            return;
                        }
                    };
                    let io = hyper_util::rt::TokioIo::new(WriteTimeout::new(stream, read_timeout));
                    http.serve_connection(io, service).await
                }
            };
            if let Err(e) = served {
                tracing::debug!("REST connection closed: {e}");
            }
        });
    }
}

/// A connection whose writes fail with `TimedOut` once the client has
/// accepted no byte for `timeout`: a client that never reads its answer
/// does not hold the connection (and the answer's memory) forever. Reads
/// pass through (hyper's header timeout and the body timeouts bound them).
struct WriteTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write waits for the client; re-armed on progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        WriteTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// `poll`'s result, with the stall timer armed while it is pending and
    /// disarmed once it makes progress.
    fn watch<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        poll: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::task::Poll;
        match poll {
            Poll::Pending => {
                let timeout = self.timeout;
                let stalled = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if stalled.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("the client read nothing of its answer for {timeout:?}"),
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

async fn overview(State(jm): Jm) -> Response {
    Json(jm.overview()).into_response()
}

#[derive(Debug, Deserialize)]
struct UploadParams {
    name: Option<String>,
    version: Option<String>,
}

/// Why [`read_body`] returns no body.
enum BodyError {
    /// Over the limit (and read on, up to [`MAX_DRAIN`]).
    TooLarge,
    /// The connection failed mid-body.
    Read(axum::Error),
    /// No bytes came for this long.
    Stalled(Duration),
}

/// The next data chunk of `body` (trailers skipped).
async fn next_chunk(body: &mut Body) -> Option<Result<Bytes, axum::Error>> {
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    return Some(Ok(data));
                }
            }
            Err(e) => return Some(Err(e)),
        }
    }
}

/// Reads `body` if it has at most `limit` bytes; otherwise reads it on to
/// its end (at most `drain` more bytes), discarding it, and says it is too
/// large. Gives up if no bytes come for `timeout`.
async fn read_body(
    mut body: Body,
    limit: usize,
    drain: usize,
    timeout: Duration,
) -> Result<Vec<u8>, BodyError> {
    // One allocation when the length is announced (and within the limit):
    // no doubling, no copy.
    let announced = body.size_hint().exact().unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(announced).unwrap_or(0).min(limit));
    let mut over = 0usize;
    loop {
        let chunk = match tokio::time::timeout(timeout, next_chunk(&mut body)).await {
            Err(_) => return Err(BodyError::Stalled(timeout)),
            Ok(None) => break,
            Ok(Some(chunk)) => chunk.map_err(BodyError::Read)?,
        };
        if over == 0 && bytes.len() + chunk.len() <= limit {
            bytes.extend_from_slice(&chunk);
            continue;
        }
        if over == 0 {
            bytes = Vec::new();
        }
        over = over.saturating_add(chunk.len());
        if over > drain {
            break;
        }
    }
    if over > 0 {
        Err(BodyError::TooLarge)
    } else {
        Ok(bytes)
    }
}

fn body_error(e: BodyError, too_large: impl FnOnce() -> String) -> ApiError {
    match e {
        BodyError::TooLarge => ApiError {
            status: 413,
            message: too_large(),
        },
        BodyError::Read(e) => ApiError::bad_request(format!("cannot read the request body: {e}")),
        BodyError::Stalled(t) => ApiError {
            status: 408,
            message: format!(
                "the request body stalled: no bytes for {} ms (the JobManager's \
                 --rest-read-timeout-ms)",
                t.as_millis()
            ),
        },
    }
}

/// Whether the request says its body is `application/wasm` (parameters
/// after `;` ignored).
fn is_wasm(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/wasm"))
}

async fn upload_module(
    State(jm): Jm,
    State(limits): State<Arc<Limits>>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    // Only as `application/wasm`: a web page cannot make a browser send
    // that type to another origin without a CORS preflight, which this
    // server never grants.
    if !is_wasm(&parts.headers) {
        let found = parts
            .headers
            .get(header::CONTENT_TYPE)
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .chars()
                    .take(100)
                    .collect()
            })
            .unwrap_or_else(|| "none".to_owned());
        // Read the body first: see `MAX_DRAIN`.
        let _ = read_body(body, 0, MAX_DRAIN, limits.read_timeout).await;
        return Err(ApiError {
            status: 415,
            message: format!(
                "a module upload must be sent with Content-Type: application/wasm (found {found})"
            ),
        });
    }
    // Wait for a turn (see `MAX_CONCURRENT_UPLOADS`); held until the module
    // is validated and stored.
    let _turn = limits
        .uploads
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the JobManager is shutting down"))?;
    // The body first, even if the query is bad: see `MAX_DRAIN`.
    let limit = jm.max_module_bytes();
    let deadline = limits.upload_timeout;
    let body = tokio::time::timeout(
        deadline,
        read_body(body, limit, MAX_DRAIN, limits.read_timeout),
    )
    .await
    .map_err(|_| ApiError {
        status: 408,
        message: format!(
            "the module upload took longer than {} s in all (the JobManager's \
             --rest-upload-timeout-ms); send it again over a faster link",
            deadline.as_secs_f64()
        ),
    })?
    .map_err(|e| {
        body_error(e, || {
            format!(
                "module is over the upload limit of {} MiB (the JobManager's --max-module-mb)",
                limit >> 20
            )
        })
    })?;
    let Query(params) = Query::<UploadParams>::try_from_uri(&parts.uri)?;
    let name = params.name.ok_or_else(|| {
        ApiError::bad_request("missing query parameter `name` (?name=N[&version=V])")
    })?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "empty body: send the component's bytes",
        ));
    }
    let (info, created) = jm.upload_module(name, params.version, body).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)).into_response())
}

async fn list_modules(State(jm): Jm) -> Response {
    Json(jm.store().list()).into_response()
}

async fn get_module(State(jm): Jm, Path(reference): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(jm.store().resolve(&reference)?).into_response())
}

async fn module_content(
    State(jm): Jm,
    Path(reference): Path<String>,
) -> Result<Response, ApiError> {
    let info = jm.store().resolve(&reference)?;
    let bytes = {
        let jm = jm.clone();
        tokio::task::spawn_blocking(move || jm.store().read(&info.hash))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))??
    };
    Ok(([(header::CONTENT_TYPE, "application/wasm")], bytes).into_response())
}

async fn delete_module(State(jm): Jm, Path(reference): Path<String>) -> Result<Response, ApiError> {
    let removed = jm.delete_module(&reference)?;
    Ok(Json(removed.into_iter().next()).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    spec: String,
    /// Start from this savepoint.
    #[serde(default)]
    from_savepoint: Option<FromSavepoint>,
    /// Start from this retained checkpoint (`path` is its `chk-<n>`).
    #[serde(default)]
    from_checkpoint: Option<FromSavepoint>,
    /// Changes to the spec, `key=value` as `weir run --set` takes them.
    #[serde(default)]
    set: Vec<String>,
}

async fn submit_job(
    State(jm): Jm,
    State(limits): State<Arc<Limits>>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = read_body(body, MAX_JOB_BODY, MAX_DRAIN, limits.read_timeout)
        .await
        .map_err(|e| {
            body_error(e, || {
                format!(
                    "request body is over the limit of {} KiB",
                    MAX_JOB_BODY >> 10
                )
            })
        })?;
    // Axum's `Json` on the read bytes: its Content-Type check and messages.
    let request = Request::from_parts(parts, Body::from(bytes));
    let Json(body) = Json::<SubmitBody>::from_request(request, &()).await?;
    let from = match (body.from_savepoint, body.from_checkpoint) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give from_savepoint or from_checkpoint, not both",
            ));
        }
        (None, Some(checkpoint)) => {
            let jm = jm.clone();
            Some(
                tokio::task::spawn_blocking(move || {
                    jm.savepoint_from_checkpoint(
                        &checkpoint.path,
                        checkpoint.allow_non_restored_state,
                    )
                })
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??,
            )
        }
        (from, None) => from,
    };
    let overrides = body
        .set
        .iter()
        .map(|s| weir_runtime::job::parse_override(s).map_err(ApiError::bad_request))
        .collect::<Result<Vec<_>, _>>()?;
    let created = jm.submit_with(body.spec, overrides, from).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

async fn list_jobs(State(jm): Jm) -> Response {
    Json(jm.jobs()).into_response()
}

async fn get_job(State(jm): Jm, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(jm.job(&id)?).into_response())
}

async fn cancel_job(State(jm): Jm, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok((StatusCode::ACCEPTED, Json(jm.cancel(&id)?)).into_response())
}

async fn job_checkpoints(State(jm): Jm, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(jm.checkpoints(&id)?).into_response())
}

async fn job_logs(
    State(jm): Jm,
    Path(id): Path<String>,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    Ok(Json(jm.logs(&id, &query)?).into_response())
}

/// The Prometheus exposition (`metrics`); same guard as every route.
async fn metrics(State(jm): Jm) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            weir_runtime::telemetry::exposition::CONTENT_TYPE,
        )],
        jm.prometheus(),
    )
        .into_response()
}

/// `POST /v1/jobs/{id}/savepoints`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavepointBody {
    /// The savepoint directory.
    dir: std::path::PathBuf,
    /// Cancel the job once the savepoint is taken.
    #[serde(default)]
    stop: bool,
    /// With `stop`: drain the sources first (the final watermark fires
    /// every event-time timer; nothing more is read).
    #[serde(default)]
    drain: bool,
}

async fn trigger_savepoint(
    State(jm): Jm,
    Path(id): Path<String>,
    Json(body): Json<SavepointBody>,
) -> Result<Response, ApiError> {
    let jm2 = jm.clone();
    // The directory checks touch the file system: off the async threads.
    let view = tokio::task::spawn_blocking(move || {
        jm2.trigger_savepoint_draining(&id, &body.dir, body.stop, body.drain)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

async fn job_savepoints(State(jm): Jm, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(jm.savepoints(&id)?).into_response())
}

/// `POST /v1/jobs/{id}/upgrades`: checks the new version, then stops the
/// job at a savepoint and restarts it on the new modules (202 with the
/// upgrade; poll `GET` for the rest). An incompatible upgrade is refused
/// with 400 and the job runs on untouched.
async fn upgrade_job(
    State(jm): Jm,
    Path(id): Path<String>,
    Json(body): Json<UpgradeRequest>,
) -> Result<Response, ApiError> {
    if body.dry_run {
        let plan = jm.plan_upgrade(&id, body).await?;
        return Ok(Json(plan).into_response());
    }
    let view = jm.upgrade(&id, body).await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

async fn job_upgrades(State(jm): Jm, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(jm.upgrades(&id)?).into_response())
}

async fn taskmanagers(State(jm): Jm) -> Response {
    Json(jm.taskmanagers()).into_response()
}
