//! The web UI: one page (`ui/index.html`) and its script and style,
//! embedded in the binary (`include_str!`, no build step), served by the
//! REST server under [`PREFIX`]. The page draws what the REST API answers
//! (it polls the `/v1/...` endpoints every second); it holds no data of
//! its own.
//!
//! # Routes
//!
//! - `/` and every path under `/ui/` but [`ASSETS`]: the page
//!   (`/ui/jobs/<id>`, `/ui/taskmanagers/<id>`, `/ui/modules`, …; the
//!   script routes by the path, so deep links and the back button work).
//! - `/ui/assets/app.js`, `/ui/assets/style.css`.
//!
//! # The token
//!
//! The guard in front of every route (`rest::guard_request`) treats these
//! as it treats the API: without the token, 401. A browser does not send
//! `Authorization` when it navigates, so a page request answered 401 gets
//! the page itself as its body ([`unauthorized_page`]): an empty shell
//! whose inline loader takes the token from the URL's fragment
//! (`#token=…`, never sent to the server) or from the tab's
//! `sessionStorage`, or asks for it, then fetches the script and the style
//! with `Authorization: Bearer` and every API call sends it too. The shell
//! holds no data; everything else stays behind the token. Without token
//! rules (`--rest-insecure-loopback`) the same loader simply loads.
//!
//! This module must not know the API's data: the script reads it.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// Where the UI lives.
pub const PREFIX: &str = "/ui";

/// Where its script and style live (under [`PREFIX`]); never the page.
pub const ASSETS: &str = "/ui/assets/";

const INDEX: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const STYLE_CSS: &str = include_str!("ui/style.css");

/// The page's policy: its own origin only; inline script for the loader
/// (and the script it loads); no framing (the page has buttons that
/// cancel jobs).
const CSP: &str = "default-src 'none'; script-src 'self' 'unsafe-inline'; \
                   style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Whether `path` is a page of the UI (answered with the page, also with
/// 401 when the token is missing).
pub fn is_page(path: &str) -> bool {
    path == "/" || path == PREFIX || (path.starts_with("/ui/") && !path.starts_with(ASSETS))
}

fn respond(status: StatusCode, content_type: &'static str, body: &'static str) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The page, for a request that has the token (or needs none).
fn page() -> Response {
    respond(StatusCode::OK, "text/html; charset=utf-8", INDEX)
}

/// The answer to a page request without the token: 401, with the empty
/// shell as its body (see the module docs).
pub fn unauthorized_page() -> Response {
    let mut response = respond(StatusCode::UNAUTHORIZED, "text/html; charset=utf-8", INDEX);
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The UI's routes, to merge into the API's router (behind its guard).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { page() }))
        .route("/ui", get(|| async { page() }))
        .route(
            "/ui/assets/app.js",
            get(|| async { respond(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/ui/assets/style.css",
            get(|| async { respond(StatusCode::OK, "text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/ui/", get(|| async { page() }))
        .route("/ui/{*rest}", get(page_or_missing))
}

/// Any other path under `/ui/`: the page (the script routes it), unless it
/// is under [`ASSETS`] (a missing asset is a 404, not a page).
async fn page_or_missing(uri: axum::http::Uri) -> Response {
    if uri.path().starts_with(ASSETS) {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    }
    page()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_assets_are_told_apart() {
        for page in ["/", "/ui", "/ui/", "/ui/jobs/abc", "/ui/modules"] {
            assert!(is_page(page), "{page}");
        }
        for not in ["/ui/assets/app.js", "/v1/jobs", "/metrics", "/uix"] {
            assert!(!is_page(not), "{not}");
        }
    }

    #[test]
    fn the_page_loads_its_assets_by_their_routes() {
        assert!(INDEX.contains("/ui/assets/app.js"));
        assert!(INDEX.contains("/ui/assets/style.css"));
    }
}
