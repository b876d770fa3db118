//! The HTTP API's errors: every refusal is JSON `{error: {code, message}}` with a status
//! mapped from its `interface.md` §1 error code, including a request body that is too large or
//! not valid JSON (the [`JsonBody`] extractor).

use super::BODY_LIMIT;
use crate::error::{Error, ErrorCode};
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

/// The `error` member of an error response.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// An `interface.md` §1 error code, or for transport-level refusals one of `UNAUTHORIZED`,
    /// `FORBIDDEN`, `NOT_FOUND`, `METHOD_NOT_ALLOWED`, `PAYLOAD_TOO_LARGE`.
    pub code: String,
    pub message: String,
}

/// Every error response: `{error: {code, message}}`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// An error answer: a status and a JSON body.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    code: String,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            message: message.into(),
        }
    }

    pub(super) fn from_code(code: ErrorCode, message: String) -> Self {
        ApiError {
            status: status_for(code),
            code: code_str(code),
            message,
        }
    }

    pub(super) fn from_error(e: &Error) -> Self {
        Self::from_code(e.code(), e.message_with_hint())
    }

    fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.clone(),
                message: self.message.clone(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// The HTTP status for a request that never ran because of `code`.
fn status_for(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorCode::PolicyDenied | ErrorCode::SecurityBlocked | ErrorCode::SessionForbidden => {
            StatusCode::FORBIDDEN
        }
        ErrorCode::SessionNotFound => StatusCode::NOT_FOUND,
        ErrorCode::SessionLanguageMismatch => StatusCode::CONFLICT,
        ErrorCode::SessionLimit | ErrorCode::QueueFull => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::BackendUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::PackageInstallFailed | ErrorCode::SandboxError => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

fn code_str(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{code:?}"))
}

/// A JSON body extractor whose rejections are JSON errors (never axum's plain text).
pub(super) struct JsonBody<T>(pub(super) T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "PAYLOAD_TOO_LARGE",
                    format!("the request body is larger than {BODY_LIMIT} bytes"),
                )
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "INVALID_REQUEST",
                    format!("could not read the request body: {}", e.body_text()),
                )
            }
        })?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            // The schema's name as /openapi.json calls it (ExecRequest, Upload, Decision, ...).
            let schema = std::any::type_name::<T>().rsplit("::").next().unwrap_or("body");
            ApiError::from_code(
                ErrorCode::InvalidRequest,
                format!(
                    "invalid request: the body is not a valid JSON {schema} (see /openapi.json): {e}"
                ),
            )
        })
    }
}

/// The router's fallback: an unknown path.
pub(super) async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "no such route; see /openapi.json for the API",
    )
}

/// The router's fallback: a known path with a method it does not take.
pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "this route does not take that method; see /openapi.json for the API",
    )
}
