//! Known failures of a target (`golden/expectations/<target>.yaml`).
//!
//! - A listed case that fails is an expected failure: the run passes.
//! - An unlisted case that fails fails the run.
//! - A listed case that now passes fails the run as **stale**: remove the
//!   entry, the target got better.
//! - An entry naming no known case is stale too.

use super::load_error::LoadError;
use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// One known failure.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    pub case: String,
    pub reason: String,
}

/// A target's expectations file.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    #[serde(default)]
    pub target: String,
    #[serde(default)]
    pub expected_failures: Vec<Expected>,
}

/// The verdict of one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// Failed, and listed as a known failure.
    ExpectedFail,
    /// Passed, but listed as a known failure.
    Stale,
    Skip,
}

impl Verdict {
    /// Whether this verdict fails the run.
    pub fn unexpected(self) -> bool {
        matches!(self, Verdict::Fail | Verdict::Stale)
    }

    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::ExpectedFail => "XFAIL",
            Verdict::Stale => "STALE",
            Verdict::Skip => "SKIP",
        }
    }
}

impl Expectations {
    /// Loads a file; a missing file means "no known failures".
    pub fn load(path: &Path) -> Result<Expectations, LoadError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Expectations::default())
            }
            Err(source) => {
                return Err(LoadError::Read {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        if text.trim().is_empty() {
            return Ok(Expectations::default());
        }
        let e: Expectations = serde_yaml::from_str(&text).map_err(|e| LoadError::Invalid {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let mut seen = BTreeMap::new();
        for x in &e.expected_failures {
            if x.reason.trim().is_empty() {
                return Err(LoadError::Invalid {
                    path: path.display().to_string(),
                    message: format!("entry `{}` needs a reason", x.case),
                });
            }
            if seen.insert(x.case.clone(), ()).is_some() {
                return Err(LoadError::Invalid {
                    path: path.display().to_string(),
                    message: format!("entry `{}` is listed twice", x.case),
                });
            }
        }
        Ok(e)
    }

    /// The listed case ids, in file order.
    pub fn cases(&self) -> Vec<&str> {
        self.expected_failures
            .iter()
            .map(|e| e.case.as_str())
            .collect()
    }

    /// The reason a case is listed, if it is.
    pub(crate) fn reason(&self, case: &str) -> Option<&str> {
        self.expected_failures
            .iter()
            .find(|e| e.case == case)
            .map(|e| e.reason.as_str())
    }

    /// Reconciles a raw outcome (`passed`) with the list.
    pub fn verdict(&self, case: &str, passed: bool) -> Verdict {
        match (self.reason(case).is_some(), passed) {
            (false, true) => Verdict::Pass,
            (false, false) => Verdict::Fail,
            (true, false) => Verdict::ExpectedFail,
            (true, true) => Verdict::Stale,
        }
    }

    /// Entries that name none of `known` case ids.
    pub(crate) fn unknown_entries<'a>(&'a self, known: &[&str]) -> Vec<&'a Expected> {
        self.expected_failures
            .iter()
            .filter(|e| !known.contains(&e.case.as_str()))
            .collect()
    }
}
