//! Why golden data (cases, schemas, error tables, expectations) could not be
//! loaded: the one error type every loader returns.

/// A golden file that could not be read, or that was read and is invalid.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}
