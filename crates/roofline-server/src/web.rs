//! The web page at `/`: plain HTML/CSS/JS embedded at build time (no CDN, works offline).

use axum::http::header;
use axum::response::{Html, IntoResponse};

/// `GET /`.
pub async fn index() -> Html<&'static str> {
    Html(include_str!("../web/index.html"))
}

/// `GET /app.js`.
pub async fn script() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("../web/app.js"))
}

/// `GET /app.css`.
pub async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("../web/app.css"))
}
