//! One end of a driver connection: JSON-RPC 2.0, one message per line, in
//! both directions over a byte stream pair (a driver's stdin and stdout).
//!
//! Both ends can call and be called: core calls a driver's methods, and a
//! sandbox driver calls `host.run` back into core. jsonrpsee does the
//! JSON-RPC work on both sides — its client (over a line transport defined
//! here) correlates our outgoing calls, and an `RpcModule` dispatches the
//! peer's calls to us. This module only splits the incoming lines between
//! the two and turns a broken stream into one clear reason.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use jsonrpsee::RpcModule;
use jsonrpsee::core::client::{Client, ClientBuilder, ClientT, ReceivedMessage, TransportReceiverT, TransportSenderT};
use jsonrpsee::core::traits::ToRpcParams;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::protocol::{DriverError, ErrorCode};

/// The longest message accepted: bulk bytes never travel as JSON, so a larger
/// line means the peer is not speaking the protocol.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The peer answered with an error.
    #[error("{0}")]
    Remote(DriverError),
    /// The connection ended before an answer came: the peer closed it or
    /// the stream failed. Whether the peer process died is for the caller to find out.
    #[error("{0}")]
    Closed(String),
    /// The peer sent something that is not the protocol; the connection was dropped.
    #[error("{0}")]
    Violation(String),
    /// The answer did not have the shape the method promises.
    #[error("malformed answer to {method}: {detail}")]
    Malformed { method: String, detail: String },
}

/// Why a connection's incoming side ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// End of file, or the stream failed.
    Ended(String),
    /// The peer broke the protocol.
    Violation(String),
}

impl CloseReason {
    fn into_error(self) -> CallError {
        match self {
            CloseReason::Ended(r) => CallError::Closed(r),
            CloseReason::Violation(r) => CallError::Violation(r),
        }
    }

    fn text(&self) -> &str {
        match self {
            CloseReason::Ended(r) | CloseReason::Violation(r) => r,
        }
    }
}

/// Settings for one end.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// The first thing the other side must send is a response (core's side:
    /// the driver must answer the handshake before it asks anything).
    pub expect_response_first: bool,
}

/// A live connection.
#[derive(Clone)]
pub struct Peer {
    client: Arc<Client>,
    closed: Arc<Mutex<Option<CloseReason>>>,
    closed_rx: watch::Receiver<bool>,
    shutdown: Arc<watch::Sender<bool>>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct LineError(String);

struct LineSender(mpsc::Sender<String>);

impl TransportSenderT for LineSender {
    type Error = LineError;
    async fn send(&mut self, msg: String) -> Result<(), Self::Error> {
        self.0.send(msg).await.map_err(|_| LineError("connection closed".into()))
    }
}

struct LineReceiver(mpsc::Receiver<Result<String, String>>);

impl TransportReceiverT for LineReceiver {
    type Error = LineError;
    async fn receive(&mut self) -> Result<ReceivedMessage, Self::Error> {
        match self.0.recv().await {
            Some(Ok(line)) => Ok(ReceivedMessage::Text(line)),
            Some(Err(reason)) => Err(LineError(reason)),
            None => Err(LineError("connection closed".into())),
        }
    }
}

/// Serializes any `Serialize` as the call's (named) params object.
struct Params<P>(P);

impl<P: Serialize> ToRpcParams for Params<P> {
    fn to_rpc_params(self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        serde_json::value::to_raw_value(&self.0).map(Some)
    }
}

impl Peer {
    /// Starts both directions. `methods` answers the other side's calls.
    pub fn start<R, W, C>(reader: R, writer: W, methods: RpcModule<C>, options: PeerOptions) -> Peer
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
        C: Send + Sync + 'static,
    {
        let (out_tx, out_rx) = mpsc::channel::<String>(256);
        let (in_tx, in_rx) = mpsc::channel::<Result<String, String>>(256);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (closed_tx, closed_rx) = watch::channel(false);
        let closed = Arc::new(Mutex::new(None));

        tokio::spawn(write_lines(writer, out_rx, shutdown_rx));
        let client = ClientBuilder::default()
            // Commands run for as long as they run; callers bound what needs bounding.
            .request_timeout(Duration::from_secs(60 * 60 * 24 * 365))
            .max_concurrent_requests(1024)
            .build_with_tokio(LineSender(out_tx.clone()), LineReceiver(in_rx));
        tokio::spawn(read_lines(reader, in_tx, out_tx, Arc::new(methods), options, closed.clone(), closed_tx));
        Peer { client: Arc::new(client), closed, closed_rx, shutdown: Arc::new(shutdown_tx) }
    }

    /// Calls `method` with `params` as a named-params object.
    pub async fn call<P, T>(&self, method: &str, params: P) -> Result<T, CallError>
    where
        P: Serialize + Send,
        T: DeserializeOwned,
    {
        let raw: Result<Box<RawValue>, _> = self.client.request(method, Params(params)).await;
        match raw {
            Ok(value) => serde_json::from_str(value.get())
                .map_err(|e| CallError::Malformed { method: method.to_owned(), detail: e.to_string() }),
            Err(jsonrpsee::core::ClientError::Call(obj)) => {
                let code = ErrorCode::from_code(obj.code()).unwrap_or(ErrorCode::Failed);
                Err(CallError::Remote(DriverError::new(code, obj.message().to_owned())))
            }
            Err(jsonrpsee::core::ClientError::ParseError(e)) => {
                Err(CallError::Malformed { method: method.to_owned(), detail: e.to_string() })
            }
            Err(other) => {
                Err(self.close_reason().map(CloseReason::into_error).unwrap_or(CallError::Closed(other.to_string())))
            }
        }
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.closed.lock().expect("close reason lock").clone()
    }

    /// Resolves when the incoming side has closed.
    pub async fn closed(&self) {
        let mut rx = self.closed_rx.clone();
        while !*rx.borrow() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// A signal that turns true once the incoming side has closed, for a
    /// task that outlives this borrow (core's reverse routing watches a
    /// driver's session with it).
    pub fn closed_signal(&self) -> watch::Receiver<bool> {
        self.closed_rx.clone()
    }

    /// Stops writing: the other side reads end-of-file.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::Receiver<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let msg = tokio::select! {
            m = rx.recv() => m,
            _ = shutdown.changed() => None,
        };
        let Some(mut msg) = msg else { break };
        msg.push('\n');
        if writer.write_all(msg.as_bytes()).await.is_err() {
            break;
        }
        // Batch whatever else is already queued before flushing.
        while let Ok(mut more) = rx.try_recv() {
            more.push('\n');
            if writer.write_all(more.as_bytes()).await.is_err() {
                return;
            }
        }
        if writer.flush().await.is_err() {
            break;
        }
    }
    let _ = writer.shutdown().await;
}

/// The kinds of line a peer can send.
enum Incoming {
    Request { has_id: bool },
    Response,
}

fn classify(line: &str) -> Result<Incoming, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("sent a line that is not JSON ({e})"))?;
    let obj = value.as_object().ok_or("sent a JSON value that is not an object")?;
    if obj.contains_key("method") {
        Ok(Incoming::Request { has_id: obj.get("id").is_some_and(|id| !id.is_null()) })
    } else if obj.contains_key("id") && (obj.contains_key("result") || obj.contains_key("error")) {
        Ok(Incoming::Response)
    } else {
        Err("sent a JSON object that is neither a request nor a response".into())
    }
}

fn preview(line: &str) -> String {
    let mut p: String = line.chars().take(80).collect();
    if p.len() < line.len() {
        p.push('…');
    }
    p
}

async fn read_lines<R, C>(
    reader: R,
    to_client: mpsc::Sender<Result<String, String>>,
    out: mpsc::Sender<String>,
    methods: Arc<RpcModule<C>>,
    options: PeerOptions,
    closed: Arc<Mutex<Option<CloseReason>>>,
    closed_tx: watch::Sender<bool>,
) where
    R: AsyncRead + Unpin,
    C: Send + Sync + 'static,
{
    let mut lines = FramedRead::new(reader, LinesCodec::new_with_max_length(MAX_MESSAGE_BYTES));
    let mut seen_response = false;
    let reason = loop {
        let line = match lines.next().await {
            None => break CloseReason::Ended("closed its end of the connection".to_owned()),
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                break CloseReason::Violation(format!("sent a message longer than {MAX_MESSAGE_BYTES} bytes"));
            }
            Some(Err(LinesCodecError::Io(e))) if e.kind() == std::io::ErrorKind::InvalidData => {
                break CloseReason::Violation("sent bytes that are not UTF-8".to_owned());
            }
            Some(Err(LinesCodecError::Io(e))) => break CloseReason::Ended(format!("connection failed: {e}")),
            Some(Ok(line)) => line,
        };
        if line.trim().is_empty() {
            continue;
        }
        match classify(&line) {
            Err(what) => break CloseReason::Violation(format!("{what}: {:?}", preview(&line))),
            Ok(Incoming::Response) => {
                seen_response = true;
                if to_client.send(Ok(line)).await.is_err() {
                    break CloseReason::Ended("connection dropped".to_owned());
                }
            }
            Ok(Incoming::Request { .. }) if options.expect_response_first && !seen_response => {
                break CloseReason::Violation(format!(
                    "sent a request before answering the handshake: {:?}",
                    preview(&line)
                ));
            }
            Ok(Incoming::Request { has_id }) => {
                let methods = methods.clone();
                let out = out.clone();
                tokio::spawn(async move {
                    let answer = match methods.raw_json_request(&line, 1).await {
                        Ok((resp, _)) => resp.get().to_owned(),
                        Err(e) => invalid_request(&line, &e.to_string()),
                    };
                    if has_id {
                        let _ = out.send(answer).await;
                    }
                });
            }
        }
    };
    *closed.lock().expect("close reason lock") = Some(reason.clone());
    let _ = to_client.send(Err(reason.text().to_owned())).await;
    let _ = closed_tx.send(true);
}

/// The error response for a request jsonrpsee could not even parse.
fn invalid_request(line: &str, detail: &str) -> String {
    let id = serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": -32600, "message": format!("invalid request: {detail}") }
    })
    .to_string()
}
