//! The JobManager's REST API (axum, JSON). Every endpoint is listed in
//! `REST.md` next to this file.
//!
//! Handlers are thin: extract, call [`JobManager`], map [`ApiError`] to a
//! status with a `{ "error": ... }` body. Extractor rejections (malformed
//! JSON, a body over its limit, a bad query) become the same JSON errors.
//! With a token configured, every request must carry
//! `Authorization: Bearer <token>`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::{ApiError, JobManager};

/// Largest job submission body.
pub const MAX_JOB_BODY: usize = 1 << 20;

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
    let module_limit = jm.max_module_bytes();
    let router = Router::new()
        .route("/v1/overview", get(overview))
        .route(
            "/v1/modules",
            get(list_modules)
                .post(upload_module)
                .layer(DefaultBodyLimit::max(module_limit)),
        )
        .route(
            "/v1/modules/{reference}",
            get(get_module).delete(delete_module),
        )
        .route("/v1/modules/{reference}/content", get(module_content))
        .route(
            "/v1/jobs",
            get(list_jobs)
                .post(submit_job)
                .layer(DefaultBodyLimit::max(MAX_JOB_BODY)),
        )
        .route("/v1/jobs/{id}", get(get_job))
        .route("/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/taskmanagers", get(taskmanagers))
        .fallback(|| async {
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

async fn upload_module(
    State(jm): Jm,
    query: Result<Query<UploadParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = query?;
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError {
                status: 413,
                message: format!(
                    "module is over the upload limit of {} MiB (the JobManager's --max-module-mb)",
                    jm.max_module_bytes() >> 20
                ),
            }
        } else {
            ApiError::from(r)
        }
    })?;
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

async fn submit_job(
    State(jm): Jm,
    body: Result<Json<SubmitBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body.map_err(|r| {
        // Only a body over the limit is a 413; other read failures keep
        // their own status and message.
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError {
                status: 413,
                message: format!(
                    "request body is over the limit of {} KiB",
                    MAX_JOB_BODY >> 10
                ),
            }
        } else {
            ApiError::from(r)
        }
    })?;
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

async fn taskmanagers(State(jm): Jm) -> Response {
    Json(jm.taskmanagers()).into_response()
}
