//! The decision log: one JSON line per client connection, written when the
//! connection ends, and the reader that parses it back.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How the client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    /// A `CONNECT` tunnel.
    #[serde(rename = "CONNECT")]
    Connect,
    /// Anything else: a plain HTTP request (or one too broken to tell).
    #[serde(rename = "HTTP")]
    Http,
}

/// What was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The connection went through.
    Allowed,
    /// It did not, or was cut (a wrong SNI).
    Refused,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// When the connection ended, Unix time in milliseconds.
    pub time_ms: u64,
    /// How the client asked.
    pub method: Method,
    /// The name (or address literal) asked for, when the request got that far.
    pub name: Option<String>,
    /// The port asked for, when the request got that far.
    pub port: Option<u16>,
    /// The upstream address connected to, if any.
    pub address: Option<SocketAddr>,
    /// Allowed or refused.
    pub decision: Verdict,
    /// Why, one line: the entry that allowed it, or the rule that refused it.
    pub reason: String,
    /// Bytes sent from the client to the upstream.
    pub bytes_up: u64,
    /// Bytes sent from the upstream to the client.
    pub bytes_down: u64,
    /// On an audit line (ADR 0032): the secret whose value the proxy put
    /// in a request to `name` (never the value itself). One line per
    /// injection, besides the connection's own line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Now, Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Where decisions go. Cloning shares the sink; each line is written whole
/// under a lock and flushed.
#[derive(Clone)]
pub struct DecisionLog {
    sink: Option<Arc<Mutex<Box<dyn Write + Send>>>>,
}

impl std::fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionLog").field("enabled", &self.sink.is_some()).finish()
    }
}

impl DecisionLog {
    /// Writes lines to `writer`.
    pub fn to_writer(writer: impl Write + Send + 'static) -> Self {
        Self { sink: Some(Arc::new(Mutex::new(Box::new(writer)))) }
    }

    /// Appends lines to the file at `path`, creating it (mode 0600).
    pub fn append_to(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        Ok(Self::to_writer(file))
    }

    /// Keeps nothing.
    pub fn discard() -> Self {
        Self { sink: None }
    }

    /// Appends one decision. A failing sink is reported through `tracing`
    /// and does not stop the proxy.
    pub fn record(&self, decision: &Decision) {
        let Some(sink) = &self.sink else { return };
        let mut line = match serde_json::to_vec(decision) {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!("egress log: cannot encode a decision: {e}");
                return;
            }
        };
        line.push(b'\n');
        let mut sink = sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(e) = sink.write_all(&line).and_then(|()| sink.flush()) {
            tracing::warn!("egress log: cannot write a decision: {e}");
        }
    }
}

/// A line of the log that is not a decision.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The log could not be read.
    #[error("egress log: {0}")]
    Io(#[from] io::Error),
    /// A line is not a decision.
    #[error("egress log line {line}: not a decision: {message}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What the parser said.
        message: String,
    },
}

/// Parses a log. A last line without its newline that does not parse is a
/// write cut short (the proxy was killed) and is skipped; any other bad line
/// is an error naming its number. Blank lines are skipped.
pub fn read_decisions(reader: impl BufRead) -> Result<Vec<Decision>, LogError> {
    let mut out = Vec::new();
    let mut reader = reader;
    let mut buf = String::new();
    let mut number = 0;
    loop {
        buf.clear();
        if reader.read_line(&mut buf)? == 0 {
            return Ok(out);
        }
        number += 1;
        let complete = buf.ends_with('\n');
        let text = buf.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str(text) {
            Ok(d) => out.push(d),
            Err(_) if !complete => return Ok(out),
            Err(e) => return Err(LogError::Malformed { line: number, message: e.to_string() }),
        }
    }
}

/// Parses the log file at `path`; a missing file is an empty log.
pub fn read_decisions_file(path: &Path) -> Result<Vec<Decision>, LogError> {
    match File::open(path) {
        Ok(f) => read_decisions(BufReader::new(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str) -> Decision {
        Decision {
            time_ms: 1,
            method: Method::Connect,
            name: Some(name.to_owned()),
            port: Some(443),
            address: Some("127.0.0.1:443".parse().unwrap()),
            decision: Verdict::Allowed,
            reason: "allowed by a.test".to_owned(),
            bytes_up: 10,
            bytes_down: 20,
            secret: None,
        }
    }

    #[test]
    fn a_file_log_reads_back_line_for_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("egress.log");
        let log = DecisionLog::append_to(&path).unwrap();
        log.record(&sample("a.test"));
        log.clone().record(&sample("b.test"));
        let back = read_decisions_file(&path).unwrap();
        assert_eq!(back, vec![sample("a.test"), sample("b.test")]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""method":"CONNECT""#), "{text}");
        assert!(text.contains(r#""decision":"allowed""#), "{text}");
    }

    #[test]
    fn a_cut_last_line_is_skipped_and_a_bad_middle_line_is_named() {
        let good = serde_json::to_string(&sample("a.test")).unwrap();
        let cut = format!("{good}\n{}", &good[..20]);
        assert_eq!(read_decisions(cut.as_bytes()).unwrap(), vec![sample("a.test")]);
        let bad = format!("{good}\nnot json\n{good}\n");
        let err = read_decisions(bad.as_bytes()).unwrap_err().to_string();
        assert!(err.starts_with("egress log line 2: not a decision"), "{err}");
    }

    #[test]
    fn a_missing_file_is_an_empty_log() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_decisions_file(&dir.path().join("none")).unwrap().is_empty());
    }
}
