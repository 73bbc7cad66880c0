//! The hermetic stack: the stand-in engine plus the iii-sandbox double, in
//! one process, as `serve` runs them and as tests embed them.

use std::path::PathBuf;

use crate::standin::config_double::ConfigDouble;
use crate::standin::engine::{
    EngineOptions, FunctionFilter, GuestListener, RbacConfig, StandInEngine,
};
use crate::standin::sandbox_double::{SandboxDouble, SandboxLimits};

/// The host-only address of the stand-in's main listener: the double's
/// sandbox gateway, like the real one, reaches only the host's 127.0.0.1.
pub(crate) const MAIN_HOST: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

/// The guest listener's auth function of a worker with function prefix
/// `prefix`, by the convention `sandbox-code-runner guest-listener-config`
/// prints: `<prefix>::guest-auth`.
pub(crate) fn guest_auth_function(prefix: &str) -> String {
    format!("{prefix}::guest-auth")
}

/// The guest listener's registration hook: `<prefix>::guest-register`.
pub(crate) fn guest_register_hook(prefix: &str) -> String {
    format!("{prefix}::guest-register")
}

/// The guest listener's middleware of a tenancy-enforcing worker:
/// `<prefix>::guest-middleware`.
pub(crate) fn guest_middleware_function(prefix: &str) -> String {
    format!("{prefix}::guest-middleware")
}

/// The guest listener's trigger-registration hook of a tenancy-enforcing
/// worker: `<prefix>::guest-trigger`.
pub(crate) fn guest_trigger_hook(prefix: &str) -> String {
    format!("{prefix}::guest-trigger")
}

/// The RBAC block of a guest listener gated by the worker with function
/// prefix `prefix`, as its `guest-listener-config` prints it.
pub(crate) fn guest_rbac(prefix: &str) -> RbacConfig {
    RbacConfig {
        auth_function_id: Some(guest_auth_function(prefix)),
        on_function_registration_function_id: Some(guest_register_hook(prefix)),
        expose_functions: vec![FunctionFilter::Match("*".into())],
        ..RbacConfig::default()
    }
}

/// The whole guest listener `gate` describes, on 127.0.0.1: its RBAC block
/// and, when the worker enforces tenancy, its middleware and trigger hook.
pub(crate) fn guest_listener(gate: &GuestGate) -> GuestListener {
    let mut rbac = guest_rbac(&gate.prefix);
    let mut middleware_function_id = None;
    if gate.tenancy {
        rbac.on_trigger_registration_function_id = Some(guest_trigger_hook(&gate.prefix));
        middleware_function_id = Some(guest_middleware_function(&gate.prefix));
    }
    GuestListener {
        host: std::net::Ipv4Addr::LOCALHOST,
        port: gate.port,
        middleware_function_id,
        rbac,
        hooks_when_published: gate.when_published,
    }
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct StackOptions {
    /// Stand-in engine port (0 = any). Ignored when `engine` is set.
    pub port: u16,
    /// A real engine to attach the daemon double to, instead of the stand-in.
    pub engine: Option<String>,
    pub limits: SandboxLimits,
    /// Start the configuration-worker double, persisting under this directory.
    pub configuration_dir: Option<PathBuf>,
    /// Start no daemon double (a suite case connects one later, or never).
    pub without_sandbox: bool,
}

/// Why the stack could not start.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error(
        "stand-in engine cannot bind its main port {port} or its 127.0.0.1 guest port: {source}"
    )]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("iii-sandbox double cannot start: {0}")]
    Sandbox(String),
    #[error("configuration double cannot start: {0}")]
    Configuration(String),
}

/// A running stack. Dropping it without `shutdown` leaves sandboxes to the
/// double's own drop; call `shutdown` to stop them deterministically.
pub struct Stack {
    engine: Option<StandInEngine>,
    url: String,
    sandbox: Option<SandboxDouble>,
    configuration: Option<ConfigDouble>,
}

/// What a [`Stack`] started, for a holder that tears each part down in its
/// own order (the suite's private environments).
pub(crate) struct StackParts {
    pub(crate) engine: Option<StandInEngine>,
    pub(crate) url: String,
    pub(crate) sandbox: Option<SandboxDouble>,
    pub(crate) configuration: Option<ConfigDouble>,
}

/// The `registration_namespace_grace_ms` of the engine config that
/// `guest-listener-config` prints (250 ms): guests may not name themselves
/// (`engine::workers::register` is forbidden them), so their registrations
/// wait this long for a name that never comes.
pub(crate) const GUARDED_NAME_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// Where the stand-in's listeners go. Public for the worker's benches,
/// which start stacks with and without the guest middleware side by side
/// ([`ListenerLayout::guarded`], [`Stack::start_with_layout`]).
#[derive(Debug, Clone)]
pub struct ListenerLayout {
    /// The main listener's host (its port is `StackOptions::port`).
    pub(crate) main_host: std::net::Ipv4Addr,
    /// The RBAC guest listener on 127.0.0.1, if any.
    pub(crate) guest: Option<GuestGate>,
}

/// A guest listener on 127.0.0.1, gated by a worker's auth function.
#[derive(Debug, Clone)]
pub(crate) struct GuestGate {
    /// Its port (0 = any).
    pub(crate) port: u16,
    /// The function prefix of the worker whose `guest-auth` gates it.
    pub(crate) prefix: String,
    /// Whether the worker also enforces tenancy on the listener: every guest
    /// call goes through its `guest-middleware`, every guest trigger binding
    /// through its `guest-trigger` hook.
    pub(crate) tenancy: bool,
    /// With `tenancy`: the middleware and trigger hook apply only while the
    /// worker has them registered (`serve`, which does not know which
    /// worker will connect).
    pub(crate) when_published: bool,
}

impl ListenerLayout {
    /// What `serve` lays out: main on `main_host`, guests on a 127.0.0.1
    /// listener gated by `prefix`'s auth function and registration hook,
    /// with its middleware and trigger hook whenever the worker that
    /// connects publishes them (as `guest-listener-config` lays them out for
    /// the real engine).
    pub(crate) fn served(
        prefix: &str,
        guest_port: u16,
        main_host: std::net::Ipv4Addr,
    ) -> ListenerLayout {
        ListenerLayout {
            main_host,
            guest: Some(GuestGate {
                port: guest_port,
                prefix: prefix.to_string(),
                tenancy: true,
                when_published: true,
            }),
        }
    }

    /// Main on the host-only 127.0.0.2, guests on a 127.0.0.1 listener
    /// gated by `prefix`'s auth function (and, with `tenancy`, its
    /// middleware and trigger hook): the layout
    /// `sandbox-code-runner guest-listener-config` recommends.
    pub fn guarded(prefix: &str, guest_port: u16, tenancy: bool) -> ListenerLayout {
        ListenerLayout {
            main_host: MAIN_HOST,
            guest: Some(GuestGate {
                port: guest_port,
                prefix: prefix.to_string(),
                tenancy,
                when_published: false,
            }),
        }
    }

    /// One main listener on 127.0.0.1, which guests reach through the
    /// sandbox gateway: the engine's default, for workers that do not gate
    /// their guests (their profile declares no `guest_listener`).
    pub(crate) fn open() -> ListenerLayout {
        ListenerLayout {
            main_host: std::net::Ipv4Addr::LOCALHOST,
            guest: None,
        }
    }
}

impl Default for ListenerLayout {
    /// [`ListenerLayout::guarded`] by this repository's worker.
    fn default() -> Self {
        ListenerLayout::guarded("sandbox-code-runner", 0, true)
    }
}

impl Stack {
    /// Starts with the default [`ListenerLayout`].
    pub async fn start(options: StackOptions) -> Result<Stack, StackError> {
        Stack::start_with_layout(options, ListenerLayout::default()).await
    }

    /// Starts with the stand-in's listeners where `layout` says (public for
    /// the worker's benches, which choose the guest listener's tenancy).
    pub async fn start_with_layout(
        options: StackOptions,
        layout: ListenerLayout,
    ) -> Result<Stack, StackError> {
        let (engine, url) = match options.engine {
            Some(url) => (None, url),
            None => {
                // Main listener host-only, guest listener on 127.0.0.1: the
                // layout the worker's `guest-listener-config` recommends.
                let engine = StandInEngine::start_with(EngineOptions {
                    host: layout.main_host,
                    port: options.port,
                    guest: layout.guest.as_ref().map(guest_listener),
                    name_grace: match layout.guest {
                        Some(_) => GUARDED_NAME_GRACE,
                        None => crate::standin::engine::NAME_GRACE,
                    },
                })
                .await
                .map_err(|source| StackError::Bind {
                    port: options.port,
                    source,
                })?;
                let url = engine.url();
                (Some(engine), url)
            }
        };
        let sandbox = if options.without_sandbox {
            None
        } else {
            match SandboxDouble::start(&url, options.limits).await {
                Ok(s) => Some(s),
                Err(e) => {
                    if let Some(engine) = engine {
                        engine.shutdown().await;
                    }
                    return Err(StackError::Sandbox(e.to_string()));
                }
            }
        };
        let configuration = match &options.configuration_dir {
            Some(dir) => match ConfigDouble::start(&url, dir).await {
                Ok(c) => Some(c),
                Err(e) => {
                    if let Some(s) = sandbox {
                        s.shutdown().await;
                    }
                    if let Some(engine) = engine {
                        engine.shutdown().await;
                    }
                    return Err(StackError::Configuration(e.to_string()));
                }
            },
            None => None,
        };
        Ok(Stack {
            engine,
            url,
            sandbox,
            configuration,
        })
    }

    /// The engine URL workers connect to.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The guest listener's URL (on 127.0.0.1), when this stack started the
    /// stand-in: what a worker's `guest_url` should be.
    pub fn guest_url(&self) -> Option<String> {
        self.engine.as_ref().and_then(StandInEngine::guest_url)
    }

    /// The stand-in engine, when this stack started one.
    pub fn engine(&self) -> Option<&StandInEngine> {
        self.engine.as_ref()
    }

    /// The daemon double, unless started `without_sandbox`.
    pub fn sandbox(&self) -> Option<&SandboxDouble> {
        self.sandbox.as_ref()
    }

    /// What was started, for a holder that stops each part itself.
    pub(crate) fn into_parts(self) -> StackParts {
        StackParts {
            engine: self.engine,
            url: self.url,
            sandbox: self.sandbox,
            configuration: self.configuration,
        }
    }

    /// Stops every sandbox, then the engine.
    pub async fn shutdown(self) {
        if let Some(c) = self.configuration {
            c.shutdown().await;
        }
        if let Some(s) = self.sandbox {
            s.shutdown().await;
        }
        if let Some(engine) = self.engine {
            engine.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(tenancy: bool) -> GuestGate {
        GuestGate {
            port: 7,
            prefix: "w".into(),
            tenancy,
            when_published: false,
        }
    }

    #[test]
    fn without_tenancy_the_guest_listener_has_no_middleware_or_trigger_hook() {
        let g = guest_listener(&gate(false));
        assert_eq!(g.middleware_function_id, None);
        assert_eq!(g.rbac.on_trigger_registration_function_id, None);
        assert_eq!(g.rbac.auth_function_id.as_deref(), Some("w::guest-auth"));
        assert_eq!(g.port, 7);
    }

    #[test]
    fn serve_lays_out_the_middleware_and_trigger_hook_for_a_worker_that_publishes_them() {
        let layout = ListenerLayout::served("w", 7, MAIN_HOST);
        let g = guest_listener(layout.guest.as_ref().unwrap());
        assert_eq!(
            g.middleware_function_id.as_deref(),
            Some("w::guest-middleware")
        );
        assert_eq!(
            g.rbac.on_trigger_registration_function_id.as_deref(),
            Some("w::guest-trigger")
        );
        assert!(g.hooks_when_published);
    }

    #[test]
    fn tenancy_lays_out_the_middleware_and_the_trigger_hook() {
        let g = guest_listener(&gate(true));
        assert_eq!(
            g.middleware_function_id.as_deref(),
            Some("w::guest-middleware")
        );
        assert_eq!(
            g.rbac.on_trigger_registration_function_id.as_deref(),
            Some("w::guest-trigger")
        );
        assert_eq!(g.rbac.on_trigger_type_registration_function_id, None);
        assert_eq!(
            g.rbac.on_function_registration_function_id.as_deref(),
            Some("w::guest-register")
        );
    }
}
