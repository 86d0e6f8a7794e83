//! The rules for running one command, as a front end asks: how long it may
//! run, what its input is, the terminal it gets. The CLI maps its flags
//! onto [`ExecOptions`] (its stdin is a stream, never a field), the bus
//! maps its parameters field by field, and [`ExecOptions::plan`] checks
//! them, so both refuse the same things in the same words.

use std::collections::BTreeMap;
use std::time::Duration;

use tinybox_sdk::model::{ExecRequest, TtySize};

use super::RequestError;
use crate::engine::Target;
use crate::error::Result;

/// The shortest time a command may be given: a millisecond. Zero would stop
/// it before it started; anything shorter is below what a timer measures.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// A command's input as it was given: text, or bytes spelt base64 (decoding
/// the spelling is the front end's, as parsing its JSON is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdinGiven {
    Text(String),
    Base64(String),
}

/// Everything a caller may say about one command in a box. Unset fields
/// mean "the default": no input, no timeout, plain streams, the workspace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecOptions {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// Input as text.
    pub stdin: Option<String>,
    /// Input as bytes, base64.
    pub stdin_base64: Option<String>,
    /// Seconds before the command is stopped; may be fractional.
    pub timeout_secs: Option<f64>,
    /// A terminal of this size made for the command in the box.
    pub tty: Option<TtySize>,
    /// Run on the box's runner placement instead of its workspace.
    pub runner: bool,
}

/// [`ExecOptions`] with every rule checked: what to run, where, with what
/// input and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecPlan {
    pub request: ExecRequest,
    pub target: Target,
    pub stdin: Option<StdinGiven>,
    pub timeout: Option<Duration>,
}

impl ExecOptions {
    /// Checks every rule a command must meet before any box is read.
    pub fn plan(self) -> Result<ExecPlan> {
        let mut request = ExecRequest::new(self.argv);
        request.env = self.env;
        request.cwd = self.cwd;
        request.tty = self.tty.map(check_tty).transpose()?;
        request.validate()?;
        let stdin = match (self.stdin, self.stdin_base64) {
            (Some(_), Some(_)) => return Err(RequestError::StdinTwice.into()),
            (Some(text), None) => Some(StdinGiven::Text(text)),
            (None, Some(b64)) => Some(StdinGiven::Base64(b64)),
            (None, None) => None,
        };
        Ok(ExecPlan {
            request,
            target: if self.runner { Target::Runner } else { Target::Workspace },
            stdin,
            timeout: self.timeout_secs.map(check_timeout).transpose()?,
        })
    }
}

/// A timeout in seconds: at least [`MIN_TIMEOUT`], and one a clock can count.
pub fn check_timeout(secs: f64) -> Result<Duration, RequestError> {
    if secs.is_nan() || secs < MIN_TIMEOUT.as_secs_f64() {
        return Err(RequestError::TimeoutTooShort { secs });
    }
    Duration::try_from_secs_f64(secs).map_err(|_| RequestError::TimeoutTooLong { secs })
}

/// A terminal's size: at least one row and one column.
pub fn check_tty(size: TtySize) -> Result<TtySize, RequestError> {
    if size.rows == 0 || size.cols == 0 {
        return Err(RequestError::NoTerminal { rows: size.rows, cols: size.cols });
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn options(argv: &[&str]) -> ExecOptions {
        ExecOptions { argv: argv.iter().map(|a| (*a).to_owned()).collect(), ..ExecOptions::default() }
    }

    fn refusal(o: ExecOptions) -> RequestError {
        match o.plan() {
            Err(Error::Request(e)) => e,
            other => panic!("expected a RequestError, got {other:?}"),
        }
    }

    #[test]
    fn a_timeout_is_at_least_a_millisecond_and_may_be_fractional() {
        assert_eq!(check_timeout(0.5), Ok(Duration::from_millis(500)));
        assert_eq!(check_timeout(0.001), Ok(MIN_TIMEOUT));
        assert_eq!(check_timeout(90.0), Ok(Duration::from_secs(90)));
        for short in [0.0, 0.0009, -1.0, f64::NAN] {
            assert!(matches!(check_timeout(short), Err(RequestError::TimeoutTooShort { .. })), "{short}");
        }
        assert!(matches!(check_timeout(f64::INFINITY), Err(RequestError::TimeoutTooLong { .. })));
        assert!(matches!(check_timeout(1e30), Err(RequestError::TimeoutTooLong { .. })));
        assert_eq!(
            RequestError::TimeoutTooShort { secs: 0.0 }.to_string(),
            "timeout 0s is not positive; use at least 0.001s (a millisecond)"
        );
    }

    #[test]
    fn stdin_is_text_or_base64_never_both() {
        let both = ExecOptions { stdin: Some("a".into()), stdin_base64: Some("YQ==".into()), ..options(&["cat"]) };
        assert_eq!(refusal(both), RequestError::StdinTwice);
        let text = ExecOptions { stdin: Some("a".into()), ..options(&["cat"]) };
        assert_eq!(text.plan().unwrap().stdin, Some(StdinGiven::Text("a".into())));
        let bytes = ExecOptions { stdin_base64: Some("AP8=".into()), ..options(&["cat"]) };
        assert_eq!(bytes.plan().unwrap().stdin, Some(StdinGiven::Base64("AP8=".into())));
        assert_eq!(options(&["cat"]).plan().unwrap().stdin, None);
    }

    #[test]
    fn a_terminal_has_at_least_one_row_and_one_column() {
        for (rows, cols) in [(0, 80), (24, 0), (0, 0)] {
            let o = ExecOptions { tty: Some(TtySize { rows, cols }), ..options(&["sh"]) };
            assert_eq!(refusal(o), RequestError::NoTerminal { rows, cols });
        }
        let o = ExecOptions { tty: Some(TtySize { rows: 24, cols: 80 }), ..options(&["sh"]) };
        assert_eq!(o.plan().unwrap().request.tty, Some(TtySize { rows: 24, cols: 80 }));
    }

    #[test]
    fn the_plan_carries_the_command_its_target_and_its_timeout() {
        let mut env = BTreeMap::new();
        env.insert("K".to_owned(), "v".to_owned());
        let o = ExecOptions {
            env: env.clone(),
            cwd: Some("/tmp".into()),
            timeout_secs: Some(2.5),
            runner: true,
            ..options(&["make", "test"])
        };
        let plan = o.plan().unwrap();
        assert_eq!(plan.request.argv, ["make", "test"]);
        assert_eq!((plan.request.env, plan.request.cwd.as_deref()), (env, Some("/tmp")));
        assert_eq!((plan.target, plan.timeout), (Target::Runner, Some(Duration::from_millis(2500))));
        assert_eq!(options(&["true"]).plan().unwrap().target, Target::Workspace);
    }

    #[test]
    fn the_command_itself_is_checked_too() {
        assert!(matches!(options(&[]).plan(), Err(Error::Exec(_))));
    }
}
