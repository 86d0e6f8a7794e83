//! JSON bodies, refused in one line naming the field and the rule: the
//! route's types deny unknown fields, and what serde says about a body
//! (the field, the expected type, the line and column) is the message.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::ApiError;

/// A JSON body of `T`, or the refusal [`ApiError::Body`]/[`ApiError::TooLarge`].
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(JsonBody(v)),
            Err(e) => Err(refusal(e)),
        }
    }
}

pub fn refusal(e: JsonRejection) -> ApiError {
    match e {
        JsonRejection::JsonDataError(e) => ApiError::Body(format!("the body does not fit this route: {}", inner(&e))),
        JsonRejection::JsonSyntaxError(e) => ApiError::Body(format!("the body is not JSON: {}", inner(&e))),
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::Body("the body must be JSON, sent with `Content-Type: application/json`".into())
        }
        JsonRejection::BytesRejection(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::TooLarge { limit: crate::MAX_JSON_BODY }
        }
        other => ApiError::Body(format!("cannot read the body: {}", other.body_text())),
    }
}

/// serde's own words (axum wraps them in its own).
fn inner(e: &dyn std::error::Error) -> String {
    let mut deepest = e.to_string();
    let mut at = e.source();
    while let Some(s) = at {
        deepest = s.to_string();
        at = s.source();
    }
    deepest
}
