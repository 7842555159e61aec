//! One error type for the whole crate: a message meant for the person running the
//! suite. Every error says what failed, where (file, JSON path, command line) and,
//! where there is one, how to fix it.
//!
//! An error is a chain: each [`Context::context`] puts what was being done over
//! the error it keeps as its cause ([`std::error::Error::source`]), and an
//! `io::Error`, `serde_json::Error` or the like converts with `?` and stays the
//! chain's last link. The message is the chain's links joined with `: `,
//! outermost first, so `{}` alone says what failed and why (`anyhow` would
//! need `{:#}` at every place that prints one; this crate prints errors in many).

use std::fmt;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Error(Link);

#[derive(Debug, Clone)]
enum Link {
    /// Where the chain starts in this crate: a message of its own.
    Message(String),
    /// Where it starts outside: an error of std or of a dependency.
    Foreign(Arc<dyn std::error::Error + Send + Sync>),
    /// What was being done, over the error that stopped it.
    Context { what: String, cause: Box<Error> },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error(Link::Message(message.into()))
    }

    /// Puts what was being done when it failed over this error.
    pub(crate) fn context(self, what: impl fmt::Display) -> Self {
        Error(Link::Context { what: what.to_string(), cause: Box::new(self) })
    }

    fn foreign(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error(Link::Foreign(Arc::new(e)))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Link::Message(m) => f.write_str(m),
            Link::Foreign(e) => write!(f, "{e}"),
            Link::Context { what, cause } => write!(f, "{what}: {cause}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            Link::Message(_) => None,
            // Its message is the foreign error's own: what lies under it is the next link.
            Link::Foreign(e) => e.source(),
            Link::Context { cause, .. } => Some(cause.as_ref()),
        }
    }
}

/// Two errors are the same when they say the same.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Error {}

/// The errors of std and of dependencies that a `?` or a [`Context`] turns
/// into the chain's last link.
macro_rules! foreign {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::foreign(e)
            }
        }
    )*};
}

foreign!(
    std::io::Error,
    std::string::FromUtf8Error,
    std::num::ParseIntError,
    serde_json::Error,
    regex::Error,
    globset::Error,
    object::Error,
    gimli::Error,
    tempfile::PersistError,
    quick_junit::SerializeError,
);

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        Error::foreign(std::io::Error::from(e))
    }
}

/// What was being done, on any result whose error converts to [`Error`]:
/// the crate's own, `io::Error`, `serde_json::Error` and the others above.
pub(crate) trait Context<T> {
    /// The error, with `what` put over it.
    fn context(self, what: impl fmt::Display) -> Result<T>;
    /// The same, with `what` made only when it failed.
    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into().context(what))
    }

    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T> {
        self.map_err(|e| e.into().context(what()))
    }
}

/// `bail!("...")` returns an [`Error`] built like `format!`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::new(format!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    fn read(path: &str) -> Result<String> {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))
    }

    #[test]
    fn the_message_is_the_chain_and_the_cause_is_kept() {
        let e = read("/nonexistent/ccl-coverage").context("loading the config").unwrap_err();
        assert_eq!(
            e.to_string(),
            "loading the config: cannot read /nonexistent/ccl-coverage: No such file or directory (os error 2)"
        );
        let cause = e.source().expect("a cause");
        assert_eq!(cause.to_string(), "cannot read /nonexistent/ccl-coverage: No such file or directory (os error 2)");
        let io = cause.source().expect("the io error");
        assert_eq!(io.to_string(), "No such file or directory (os error 2)");
        assert!(Error::new("x").source().is_none());
    }
}
