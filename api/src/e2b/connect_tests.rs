//! Connect's framing as the E2B SDKs send it, and its refusals.

use axum::http::HeaderValue;
use serde_json::json;

use super::*;

fn streaming() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/connect+json"));
    h
}

#[test]
fn an_envelope_round_trips_and_the_end_is_flagged() {
    let m = json!({ "process": { "cmd": "ls" } });
    let framed = message(&m);
    assert_eq!(framed[0], 0);
    let got: Value = streamed(&streaming(), &framed).unwrap();
    assert_eq!(got, m);
    let end = end_ok();
    assert_eq!((end[0], &end[5..]), (END_STREAM, &b"{}"[..]));
    let err = RpcError::new("not_found", "gone").end_envelope();
    let body: Value = serde_json::from_slice(&err[5..]).unwrap();
    assert_eq!(body, json!({ "error": { "code": "not_found", "message": "gone" } }));
}

#[test]
fn a_bad_streamed_request_is_invalid_argument_naming_what() {
    let framed = message(&json!({}));
    let cases: Vec<(HeaderMap, Bytes, &str)> = vec![
        (HeaderMap::new(), framed.clone(), "content type"),
        (streaming(), Bytes::from_static(b"\x00\x00"), "no envelope"),
        (streaming(), Bytes::from_static(b"\x00\x00\x00\x00\x09{}"), "shorter"),
        (streaming(), Bytes::from_static(b"\x01\x00\x00\x00\x02{}"), "compressed"),
        (streaming(), Bytes::from_static(b"\x00\x00\x00\x00\x01{"), "does not fit"),
    ];
    for (headers, body, says) in cases {
        let e = streamed::<Value>(&headers, &body).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert!(e.message.contains(says), "{says}: {}", e.message);
    }
}

#[test]
fn codes_map_to_connect_s_statuses() {
    for (code, status) in
        [("invalid_argument", 400), ("not_found", 404), ("unauthenticated", 401), ("unimplemented", 501)]
    {
        assert_eq!(RpcError::new(code, "x").status().as_u16(), status, "{code}");
    }
    let e = RpcError::from(ApiError::NotMine("box-9".into()));
    assert_eq!(e.code, "not_found");
}

#[test]
fn the_timeout_header_is_read_in_milliseconds() {
    let mut h = HeaderMap::new();
    assert_eq!(timeout(&h), None);
    h.insert("connect-timeout-ms", HeaderValue::from_static("1500"));
    assert_eq!(timeout(&h), Some(std::time::Duration::from_millis(1500)));
}
