//! RBAC listeners of the stand-in engine: a second `iii-worker-manager`
//! listener whose connections are authenticated by a function and whose
//! calls are gated (`docs/engine.md`, "Listeners with RBAC", measured on
//! engine 0.23.0-rc.4).
//!
//! Modelled: the AuthInput shape, the AuthResult fields that gate calls and
//! registrations, the decision order with its infrastructure carve-out, the
//! two `FORBIDDEN` messages, `function_registration_prefix`, the three
//! registration hooks (functions, triggers, trigger types; see [`super::admit`]),
//! the listener's `middleware_function_id` (see [`super::middleware`]), and the
//! refusal of a connection whose auth call throws (an `AUTH_ERROR` error frame,
//! then a close). Not modelled: scoped namespaces (`AuthResult.namespaces`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Functions an RBAC listener always allows, whatever the operator's
/// filters say (the engine's public contract, additive within a major).
pub const CARVE_OUT: &[&str] = &[
    "engine::channels::create",
    "engine::workers::register",
    "engine::log::info",
    "engine::log::warn",
    "engine::log::error",
    "engine::log::debug",
    "engine::log::trace",
    "engine::baggage::get",
    "engine::baggage::set",
    "engine::baggage::get_all",
];

/// One `expose_functions` entry.
#[derive(Debug, Clone, PartialEq)]
pub enum FunctionFilter {
    /// `match("pattern")`: `*` matches any run of characters, anchored.
    Match(String),
    /// `metadata: {key: value | match("...")}`: every key must match.
    Metadata(Map<String, Value>),
}

impl FunctionFilter {
    /// Parses the YAML/JSON form: a `match("…")` string or a `metadata` map.
    #[cfg(test)]
    pub(crate) fn parse(v: &Value) -> Option<FunctionFilter> {
        match v {
            Value::String(s) => match_pattern(s).map(FunctionFilter::Match),
            Value::Object(m) => m
                .get("metadata")
                .and_then(Value::as_object)
                .map(|m| FunctionFilter::Metadata(m.clone())),
            _ => None,
        }
    }
    fn matches(&self, function_id: &str, metadata: Option<&Value>) -> bool {
        match self {
            FunctionFilter::Match(p) => wildcard_match(p, function_id),
            FunctionFilter::Metadata(want) => {
                let Some(have) = metadata.and_then(Value::as_object) else {
                    return false;
                };
                want.iter().all(|(k, w)| match (have.get(k), w) {
                    (Some(Value::String(h)), Value::String(ws)) => match match_pattern(ws) {
                        Some(p) => wildcard_match(&p, h),
                        None => h == ws,
                    },
                    (Some(h), w) => h == w,
                    (None, _) => false,
                })
            }
        }
    }
}

/// The pattern inside `match("…")` or `match('…')`.
fn match_pattern(s: &str) -> Option<String> {
    let t = s.trim();
    let inner = t
        .strip_prefix("match(\"")
        .and_then(|r| r.strip_suffix("\")"))
        .or_else(|| t.strip_prefix("match('").and_then(|r| r.strip_suffix("')")))?;
    Some(inner.to_string())
}

/// `*` matches any (possibly empty) run of characters; anchored both ends.
pub(crate) fn wildcard_match(pattern: &str, value: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == value;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !value.starts_with(first) || value.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &value[first.len()..];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The `rbac` block of a listener.
#[derive(Debug, Clone, Default)]
pub struct RbacConfig {
    /// Called once per WebSocket upgrade with AuthInput; unset allows all.
    pub auth_function_id: Option<String>,
    /// Called before each `registerfunction`; throwing (or returning a
    /// non-object) drops the registration silently, as the engine does.
    pub on_function_registration_function_id: Option<String>,
    /// Called before each `registertrigger`; may map its id, type, target
    /// and config; throwing (or a non-object) drops it silently.
    pub on_trigger_registration_function_id: Option<String>,
    /// Called before each `registertriggertype` the session may make; may
    /// map its id and description; throwing drops it silently.
    pub on_trigger_type_registration_function_id: Option<String>,
    /// A function is exposed when any filter matches.
    pub expose_functions: Vec<FunctionFilter>,
}

/// An RBAC listener: where it binds and how it gates.
#[derive(Debug, Clone)]
pub struct GuestListener {
    /// Host address to bind (loopback only in this stand-in).
    pub host: std::net::Ipv4Addr,
    /// Port (0 picks a free one).
    pub port: u16,
    /// Listener-level (next to `rbac`, not inside it): every call through
    /// this listener that passes RBAC goes to this function instead of its
    /// target, the engine's own `engine::*` builtins excepted.
    pub middleware_function_id: Option<String>,
    pub rbac: RbacConfig,
    /// Stand-in only (what `serve` lays out): the middleware and the
    /// trigger-registration hook apply only while a worker has them
    /// registered, so one stand-in serves a worker that publishes them
    /// exactly as the real engine configured by `guest-listener-config`
    /// would, and one that does not as the plain RBAC listener would.
    pub hooks_when_published: bool,
}

impl Default for GuestListener {
    /// 127.0.0.1 on a free port, no middleware, an empty `rbac` block.
    fn default() -> Self {
        GuestListener {
            host: std::net::Ipv4Addr::LOCALHOST,
            port: 0,
            middleware_function_id: None,
            rbac: RbacConfig::default(),
            hooks_when_published: false,
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_context() -> Value {
    json!({})
}

/// What the auth function returned, as the engine reads it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct AuthResult {
    #[serde(default)]
    pub(crate) allowed_functions: Vec<String>,
    #[serde(default)]
    pub(crate) forbidden_functions: Vec<String>,
    #[serde(default = "default_true")]
    pub(crate) allow_function_registration: bool,
    #[serde(default)]
    pub(crate) function_registration_prefix: Option<String>,
    /// Absent: every trigger type may be bound.
    #[serde(default)]
    pub(crate) allowed_trigger_types: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) allow_trigger_type_registration: bool,
    /// Forwarded to the middleware and the hooks; `{}` when absent (an
    /// explicit `null` stays `null`, as the engine's serde default has it).
    #[serde(default = "default_context")]
    pub(crate) context: Value,
}

impl AuthResult {
    /// A listener without `auth_function_id` lets every connection in, and
    /// (unlike an auth function's default) lets it declare trigger types.
    pub(crate) fn open() -> AuthResult {
        AuthResult {
            allowed_functions: Vec::new(),
            forbidden_functions: Vec::new(),
            allow_function_registration: true,
            function_registration_prefix: None,
            allowed_trigger_types: None,
            allow_trigger_type_registration: true,
            context: default_context(),
        }
    }
}

/// One authenticated connection on an RBAC listener.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) listener: std::sync::Arc<GuestListener>,
    pub(crate) auth: AuthResult,
}

impl Session {
    /// The decision for one call, in the engine's order: forbidden, allowed,
    /// carve-out, exposed, else denied. `Err` is the `FORBIDDEN` message.
    pub(crate) fn decide(&self, function_id: &str, metadata: Option<&Value>) -> Result<(), String> {
        if self
            .auth
            .forbidden_functions
            .iter()
            .any(|f| f == function_id)
        {
            return Err(format!(
                "function '{function_id}' not allowed (remove from rbac.forbidden_functions)"
            ));
        }
        if self.auth.allowed_functions.iter().any(|f| f == function_id)
            || CARVE_OUT.contains(&function_id)
            || self
                .rbac()
                .expose_functions
                .iter()
                .any(|f| f.matches(function_id, metadata))
        {
            return Ok(());
        }
        Err(format!(
            "function '{function_id}' not allowed (add to rbac.expose_functions)"
        ))
    }

    /// The id a registration of `id` gets on the bus.
    pub(crate) fn registered_id(&self, id: &str) -> String {
        match &self.auth.function_registration_prefix {
            Some(p) => format!("{p}::{id}"),
            None => id.to_string(),
        }
    }

    /// The id the connection's SDK knows a bus id by (the prefix stripped).
    pub(crate) fn local_id<'a>(&self, id: &'a str) -> &'a str {
        match &self.auth.function_registration_prefix {
            Some(p) => id
                .strip_prefix(p.as_str())
                .and_then(|r| r.strip_prefix("::"))
                .unwrap_or(id),
            None => id,
        }
    }

    /// The context forwarded to the middleware and the hooks.
    pub(crate) fn context(&self) -> Value {
        self.auth.context.clone()
    }

    /// The listener's `rbac` block.
    pub(crate) fn rbac(&self) -> &RbacConfig {
        &self.listener.rbac
    }

    /// The listener's middleware, if it has one.
    pub(crate) fn middleware(&self) -> Option<&str> {
        self.listener.middleware_function_id.as_deref()
    }

    /// Whether the listener's hooks apply only while they are registered.
    pub(crate) fn hooks_when_published(&self) -> bool {
        self.listener.hooks_when_published
    }

    /// Whether the session may bind triggers of `trigger_type`.
    pub(crate) fn may_bind(&self, trigger_type: &str) -> bool {
        self.auth
            .allowed_trigger_types
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|t| t == trigger_type))
    }
}

/// The AuthInput of one upgrade: headers, every query parameter as a list of
/// values (repeated keys kept), and the peer's IP.
pub(crate) fn auth_input(
    headers: &BTreeMap<String, String>,
    query: Option<&str>,
    peer: SocketAddr,
) -> Value {
    let mut params: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(q) = query {
        for (k, v) in form_urlencoded::parse(q.as_bytes()) {
            params
                .entry(k.into_owned())
                .or_default()
                .push(v.into_owned());
        }
    }
    json!({
        "headers": headers,
        "ip_address": peer.ip().to_string(),
        "query_params": params,
    })
}

/// The frame a refused connection receives before the close.
pub(crate) fn auth_error_frame(message: &str) -> String {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        code: &'a str,
        message: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Frame<'a> {
        r#type: &'a str,
        error: Body<'a>,
    }
    serde_json::to_string(&Frame {
        r#type: "error",
        error: Body {
            code: "AUTH_ERROR",
            message,
        },
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::sync::Arc;

    #[rstest]
    #[case("pub::*", "pub::x", true)]
    #[case("pub::*", "pub", false)]
    #[case("*::public", "a::b::public", true)]
    #[case("api::*::read", "api::users::read", true)]
    #[case("api::*::read", "api::users::write", false)]
    #[case("*", "", true)]
    #[case("exact", "exact", true)]
    #[case("exact", "exactly", false)]
    fn wildcards_are_anchored(#[case] p: &str, #[case] v: &str, #[case] want: bool) {
        assert_eq!(wildcard_match(p, v), want);
    }

    fn session(forbidden: &[&str], allowed: &[&str], expose: &[&str]) -> Session {
        Session {
            listener: Arc::new(GuestListener {
                rbac: RbacConfig {
                    expose_functions: expose
                        .iter()
                        .map(|e| FunctionFilter::parse(&json!(e)).unwrap())
                        .collect(),
                    ..RbacConfig::default()
                },
                ..GuestListener::default()
            }),
            auth: AuthResult {
                forbidden_functions: forbidden.iter().map(|s| s.to_string()).collect(),
                allowed_functions: allowed.iter().map(|s| s.to_string()).collect(),
                ..AuthResult::open()
            },
        }
    }

    #[test]
    fn forbidden_beats_allowed_carve_out_and_exposure() {
        let s = session(
            &["pub::secret", "engine::log::info"],
            &["pub::secret"],
            &["match(\"*\")"],
        );
        let msg = s.decide("pub::secret", None).unwrap_err();
        assert_eq!(
            msg,
            "function 'pub::secret' not allowed (remove from rbac.forbidden_functions)"
        );
        assert!(s.decide("engine::log::info", None).is_err());
    }

    #[test]
    fn carve_out_and_exposure_allow_the_rest_denies() {
        let s = session(&[], &["other::granted"], &["match(\"pub::*\")"]);
        assert!(s.decide("engine::workers::register", None).is_ok());
        assert!(s.decide("pub::a", None).is_ok());
        assert!(s.decide("other::granted", None).is_ok());
        assert_eq!(
            s.decide("other::x", None).unwrap_err(),
            "function 'other::x' not allowed (add to rbac.expose_functions)"
        );
        assert!(s.decide("engine::functions::list", None).is_err());
    }

    #[test]
    fn metadata_filters_match_every_key() {
        let f = FunctionFilter::parse(
            &json!({"metadata": {"public": true, "name": "match(\"*pub*\")"}}),
        )
        .unwrap();
        assert!(f.matches("x", Some(&json!({"public": true, "name": "a-pub-b"}))));
        assert!(!f.matches("x", Some(&json!({"public": true, "name": "private"}))));
        assert!(!f.matches("x", None));
    }

    #[test]
    fn query_params_keep_repeated_keys() {
        let v = auth_input(
            &BTreeMap::new(),
            Some("token=a&token=b&x=%20y"),
            "127.0.0.1:5".parse().unwrap(),
        );
        assert_eq!(v["query_params"]["token"], json!(["a", "b"]));
        assert_eq!(v["query_params"]["x"], json!([" y"]));
        assert_eq!(v["ip_address"], "127.0.0.1");
    }

    #[test]
    fn auth_defaults_deny_trigger_types_and_give_an_empty_context() {
        let auth: AuthResult = serde_json::from_value(json!({})).unwrap();
        assert!(!auth.allow_trigger_type_registration);
        assert!(auth.allow_function_registration);
        assert_eq!(auth.allowed_trigger_types, None);
        assert_eq!(auth.context, json!({}));
        let auth: AuthResult = serde_json::from_value(json!({"context": null})).unwrap();
        assert_eq!(auth.context, Value::Null, "an explicit null is kept");
        assert!(AuthResult::open().allow_trigger_type_registration);
    }

    #[test]
    fn allowed_trigger_types_gate_bindings_only_when_given() {
        let mut s = session(&[], &[], &[]);
        assert!(s.may_bind("anything"));
        s.auth.allowed_trigger_types = Some(vec!["cron".into()]);
        assert!(s.may_bind("cron"));
        assert!(!s.may_bind("http"));
    }

    #[test]
    fn prefix_is_added_and_stripped() {
        let mut s = session(&[], &[], &[]);
        s.auth.function_registration_prefix = Some("g1".into());
        assert_eq!(s.registered_id("mine"), "g1::mine");
        assert_eq!(s.local_id("g1::mine"), "mine");
        assert_eq!(s.local_id("g2::mine"), "g2::mine");
    }
}
