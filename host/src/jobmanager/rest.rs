//! The JobManager's REST API (axum, JSON). Every endpoint is listed in
//! `REST.md` next to this file.
//!
//! Handlers are thin: extract, call [`JobManager`], map [`ApiError`] to a
//! status with a `{ "error": ... }` body. Extractor rejections (malformed
//! JSON, a body over its limit, a bad query) become the same JSON errors.
//! A body over its limit is read to its end (up to [`MAX_DRAIN`]) before
//! the 413 goes out, so that a client still sending gets the answer rather
//! than a reset connection.
//! With a token configured, every request must carry
//! `Authorization: Bearer <token>`.

use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::{ApiError, JobManager};

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

/// The router, with `token` required when given.
pub fn router(jm: Arc<JobManager>, token: Option<String>) -> Router {
    // The two endpoints with a body read it with `read_body`, which
    // enforces their limits (`DefaultBodyLimit` would not drain).
    let router = Router::new()
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
        .route("/v1/taskmanagers", get(taskmanagers))
        .fallback(|req: Request| async {
            // Read any body first: see `MAX_DRAIN`.
            let _ = read_body(req.into_body(), 0, MAX_DRAIN_REFUSED).await;
            ApiError::not_found("no such endpoint; see GET /v1/overview and the REST reference")
        })
        .with_state(jm);
    match token {
        None => router,
        Some(token) => router.layer(middleware::from_fn(move |req: Request, next: Next| {
            let expected = format!("Bearer {token}");
            async move {
                let ok = req
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v == expected);
                if ok {
                    next.run(req).await
                } else {
                    // Read any body first: see `MAX_DRAIN`.
                    let _ = read_body(req.into_body(), 0, MAX_DRAIN_REFUSED).await;
                    ApiError {
                        status: 401,
                        message: "missing or wrong token: send Authorization: Bearer <token> \
                                  (the CLI: --rest-token or WEIR_REST_TOKEN)"
                            .into(),
                    }
                    .into_response()
                }
            }
        })),
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
/// large.
async fn read_body(mut body: Body, limit: usize, drain: usize) -> Result<Bytes, BodyError> {
    let mut bytes = Vec::new();
    let mut over = 0usize;
    while let Some(chunk) = next_chunk(&mut body).await {
        let chunk = chunk.map_err(BodyError::Read)?;
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
        Ok(Bytes::from(bytes))
    }
}

fn body_error(e: BodyError, too_large: impl FnOnce() -> String) -> ApiError {
    match e {
        BodyError::TooLarge => ApiError {
            status: 413,
            message: too_large(),
        },
        BodyError::Read(e) => ApiError::bad_request(format!("cannot read the request body: {e}")),
    }
}

async fn upload_module(State(jm): Jm, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    // The body first, even if the query is bad: see `MAX_DRAIN`.
    let limit = jm.max_module_bytes();
    let body = read_body(body, limit, MAX_DRAIN).await.map_err(|e| {
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
    let (info, created) = jm
        .upload_module(name, params.version, body.to_vec())
        .await?;
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
}

async fn submit_job(State(jm): Jm, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = read_body(body, MAX_JOB_BODY, MAX_DRAIN)
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
    let created = jm.submit(body.spec).await?;
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

async fn taskmanagers(State(jm): Jm) -> Response {
    Json(jm.taskmanagers()).into_response()
}
