//! Request extractors whose rejections are JSON [`ApiError`]s naming the field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

/// A JSON body deserialized field by field: a syntax error is a 400, a wrong or missing field a 422 naming
/// the field (`schemes[1].weights`), a body over the limit a 413. Top-level `M`, `N`, `K` (the seeds' spelling)
/// are accepted for `m`, `n`, `k`.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let status = e.status();
            let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "request body is larger than the server's limit".to_string()
            } else {
                e.body_text()
            };
            ApiError::status(status, message)
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses a JSON document into `T` with the error conventions of [`ApiJson`].
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::status(StatusCode::BAD_REQUEST, "empty request body; expected a JSON object"));
    }
    let mut value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::status(StatusCode::BAD_REQUEST, format!("request body is not valid JSON: {e}")))?;
    if let Value::Object(map) = &mut value {
        for (upper, lower) in [("M", "m"), ("N", "n"), ("K", "k")] {
            if let Some(v) = map.remove(upper) {
                if map.contains_key(lower) {
                    return Err(ApiError::invalid(lower, format!("both '{upper}' and '{lower}' given; use one")));
                }
                map.insert(lower.to_string(), v);
            }
        }
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde names a missing or unknown field in the message, not the path
        let named = if inner.starts_with("missing field") || inner.starts_with("unknown field") {
            field_in_message(&inner)
        } else {
            None
        };
        let field = match (path.as_str(), named) {
            ("." | "", named) => named.or_else(|| field_in_message(&inner)),
            (p, Some(name)) if !p.ends_with(name.as_str()) => Some(format!("{p}.{name}")),
            (p, _) => Some(p.to_string()),
        };
        ApiError { status: StatusCode::UNPROCESSABLE_ENTITY, field, message: inner }
    })
}

/// Pulls `x` out of serde's "missing field `x`" / "unknown field `x`".
fn field_in_message(msg: &str) -> Option<String> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    Some(msg[start..start + len].to_string())
}

/// A query string deserialized into `T`; errors are 422 JSON naming the parameter.
#[derive(Debug, Clone)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(e) => {
                let text = e.body_text();
                let field = field_in_message(&text).or_else(|| {
                    // "Failed to deserialize query string: m: invalid digit found in string"
                    text.rsplit_once(": ")
                        .and_then(|(head, _)| head.rsplit(": ").next())
                        .filter(|f| f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                        .map(str::to_string)
                });
                Err(ApiError { status: StatusCode::UNPROCESSABLE_ENTITY, field, message: text })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Shape {
        m: u64,
        n: u64,
        #[serde(default)]
        list: Vec<u64>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        inner: Shape,
    }

    #[test]
    fn names_fields() {
        let e = parse_json::<Shape>(br#"{"M": -1, "n": 2}"#).unwrap_err();
        assert_eq!((e.status, e.field.as_deref()), (StatusCode::UNPROCESSABLE_ENTITY, Some("m")));
        let e = parse_json::<Shape>(br#"{"m": 1}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("n"));
        let e = parse_json::<Shape>(br#"{"m": 1, "n": 1, "list": [1, "x"]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("list[1]"));
        let e = parse_json::<Shape>(br#"{"m": 1, "n": 1, "bogus": 3}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("bogus"));
        let e = parse_json::<Outer>(br#"{"inner": {"m": 1}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("inner.n"));
        let e = parse_json::<Outer>(br#"{"inner": {"m": 1, "n": 2, "zz": 3}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("inner.zz"));
        let e = parse_json::<Shape>(b"{nope").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(parse_json::<Shape>(br#"{"M": 1, "N": 2}"#).is_ok());
    }
}
