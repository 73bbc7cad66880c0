//! Validated identifiers. Below the function edge nothing holds an invalid
//! namespace, function id or language, and a runtime id cannot be printed by
//! accident.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The worker's own function prefix: never claimable by register_function.
pub(crate) const OWN_NAMESPACE: &str = "sandbox-code-runner";

/// Language of a runtime. A runtime is single-language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    Node,
    Python,
}

impl Lang {
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Node => "node",
            Lang::Python => "python",
        }
    }

    /// The iii-sandbox catalog image that runs this language.
    pub fn image(self) -> &'static str {
        self.as_str()
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A runtime id: `rt-` + a random UUID v4, never derived from the daemon's
/// sandbox id. It is a capability, so `Debug` and `Display` print a redacted
/// form; only [`RuntimeId::expose`] yields the value, for the one response
/// that hands it to its holder.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RuntimeId(String);

impl RuntimeId {
    pub fn generate() -> RuntimeId {
        RuntimeId(format!("rt-{}", uuid::Uuid::new_v4()))
    }

    /// Accepts what a caller passed in. Any string is a valid key to look up;
    /// an unknown one simply resolves to nothing.
    pub fn from_caller(s: &str) -> RuntimeId {
        RuntimeId(s.to_string())
    }

    /// The secret value, for the caller who holds it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RuntimeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RuntimeId(rt-<redacted>)")
    }
}

impl fmt::Display for RuntimeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rt-<redacted>")
    }
}

/// A register_function namespace in canonical form, without the `::`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

/// Why a namespace or function id was refused; the message names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("namespace must not be empty")]
    EmptyNamespace,
    #[error("namespace is longer than 64 bytes")]
    NamespaceTooLong,
    #[error("namespace may contain only a-z, 0-9, '.', '_' and '-' (got {0:?})")]
    NamespaceChars(String),
    #[error("namespace must not start with '.' or contain '..'")]
    NamespaceDots,
    #[error("namespace `{OWN_NAMESPACE}` belongs to this worker")]
    Reserved,
    #[error("function_id must look like `<namespace>::<name>`")]
    NoSeparator,
    #[error("function_id's name after `::` must not be empty")]
    EmptyName,
    #[error("function_id's name after `::` is longer than 256 bytes")]
    NameTooLong,
}

impl Namespace {
    /// Accepts `app` or `app::`.
    pub fn parse(raw: &str) -> Result<Namespace, IdError> {
        let ns = raw.strip_suffix("::").unwrap_or(raw);
        if ns.is_empty() {
            return Err(IdError::EmptyNamespace);
        }
        if ns.len() > 64 {
            return Err(IdError::NamespaceTooLong);
        }
        if !ns.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        }) {
            return Err(IdError::NamespaceChars(ns.chars().take(80).collect()));
        }
        if ns.starts_with('.') || ns.contains("..") {
            return Err(IdError::NamespaceDots);
        }
        if ns == OWN_NAMESPACE {
            return Err(IdError::Reserved);
        }
        Ok(Namespace(ns.to_string()))
    }

    /// `app::`, the form responses echo.
    pub fn canonical(&self) -> String {
        format!("{}::", self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A bus function id this worker may publish.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunctionId {
    full: String,
    namespace: Namespace,
}

impl FunctionId {
    pub fn parse(raw: &str) -> Result<FunctionId, IdError> {
        let (ns, name) = raw.split_once("::").ok_or(IdError::NoSeparator)?;
        let namespace = Namespace::parse(ns)?;
        if name.is_empty() {
            return Err(IdError::EmptyName);
        }
        if name.len() > 256 {
            return Err(IdError::NameTooLong);
        }
        Ok(FunctionId {
            full: raw.to_string(),
            namespace,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.full
    }

    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("app", "app::")]
    #[case("app::", "app::")]
    #[case("my-app.v2_x", "my-app.v2_x::")]
    fn namespaces_are_canonicalized(#[case] raw: &str, #[case] canonical: &str) {
        assert_eq!(Namespace::parse(raw).unwrap().canonical(), canonical);
    }

    #[rstest]
    #[case("", IdError::EmptyNamespace)]
    #[case("::", IdError::EmptyNamespace)]
    #[case("App", IdError::NamespaceChars("App".into()))]
    #[case("a b", IdError::NamespaceChars("a b".into()))]
    #[case("é", IdError::NamespaceChars("é".into()))]
    #[case(".hidden", IdError::NamespaceDots)]
    #[case("a..b", IdError::NamespaceDots)]
    #[case("sandbox-code-runner", IdError::Reserved)]
    fn bad_namespaces_are_refused(#[case] raw: &str, #[case] err: IdError) {
        assert_eq!(Namespace::parse(raw).unwrap_err(), err);
    }

    #[test]
    fn long_namespace_is_refused() {
        assert_eq!(
            Namespace::parse(&"a".repeat(65)).unwrap_err(),
            IdError::NamespaceTooLong
        );
        assert!(Namespace::parse(&"a".repeat(64)).is_ok());
    }

    #[rstest]
    #[case("nosep", IdError::NoSeparator)]
    #[case("app::", IdError::EmptyName)]
    #[case("sandbox-code-runner::run", IdError::Reserved)]
    fn bad_function_ids_are_refused(#[case] raw: &str, #[case] err: IdError) {
        assert_eq!(FunctionId::parse(raw).unwrap_err(), err);
    }

    #[test]
    fn function_id_keeps_its_namespace() {
        let f = FunctionId::parse("my-app::double").unwrap();
        assert_eq!(f.namespace().canonical(), "my-app::");
        assert_eq!(f.as_str(), "my-app::double");
        assert!(FunctionId::parse(&format!("a::{}", "x".repeat(257))).is_err());
    }

    #[test]
    fn runtime_ids_never_print() {
        let id = RuntimeId::generate();
        assert!(id.expose().starts_with("rt-"));
        assert_eq!(id.expose().len(), 3 + 36);
        assert!(!format!("{id:?}").contains(&id.expose()[3..]));
        assert!(!format!("{id}").contains(&id.expose()[3..]));
    }
}
