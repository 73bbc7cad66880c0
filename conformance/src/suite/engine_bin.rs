//! A real iii engine binary as the engine of an environment (`run
//! --engine-bin PATH`): started with a minimal config on a loopback port,
//! in a scratch directory of its own, stopped with the environment.
//!
//! The config holds one `iii-worker-manager` listener; the engine injects
//! its mandatory workers (the configuration worker among them) by itself.
//! `IIIWORKER_DISABLE_BUILTIN_DAEMONS` keeps it from spawning external
//! daemons, `--no-update-check` and `III_TELEMETRY_ENABLED=false` from
//! reaching the network.

use crate::standin::stack::GuestGate;
use crate::standin::wait::Deadline;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use iii_sdk::protocol::TriggerRequest;
use serde_json::json;

use super::env::EnvError;

/// How long the engine may take to accept workers.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long a SIGTERMed engine may take to exit before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// The engine config: one worker listener on `127.0.0.1:port`; with a guest
/// gate, the main listener on the host-only `127.0.0.2:port` and an RBAC
/// guest listener on `127.0.0.1:guest_port` (with a tenancy gate, its
/// `middleware_function_id` and `on_trigger_registration_function_id` too).
pub(crate) fn config_yaml(port: u16, guest: Option<(&GuestGate, u16)>) -> String {
    let mut yaml = String::from("# Written by code-runner-conformance for one environment.\n");
    if guest.is_some() {
        // Guests never name themselves (the layout guest-listener-config
        // prints): their registrations wait this long for the name.
        yaml.push_str(&format!(
            "registration_namespace_grace_ms: {}\n",
            crate::standin::stack::GUARDED_NAME_GRACE.as_millis()
        ));
    }
    yaml.push_str("workers:\n");
    match guest {
        None => yaml.push_str(&format!(
            "  - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {port}\n"
        )),
        Some((gate, guest_port)) => {
            let listener = crate::standin::stack::guest_listener(gate);
            let rbac = listener.rbac;
            yaml.push_str(&format!(
                "  - name: iii-worker-manager\n    config:\n      host: {main}\n      port: {port}\n\
                 \x20 - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {guest_port}\n",
                main = crate::standin::stack::MAIN_HOST,
            ));
            if let Some(mw) = &listener.middleware_function_id {
                yaml.push_str(&format!("      middleware_function_id: {mw}\n"));
            }
            yaml.push_str(&format!(
                "      rbac:\n        auth_function_id: {auth}\n        on_function_registration_function_id: {hook}\n",
                auth = rbac.auth_function_id.unwrap_or_default(),
                hook = rbac.on_function_registration_function_id.unwrap_or_default(),
            ));
            if let Some(hook) = &rbac.on_trigger_registration_function_id {
                yaml.push_str(&format!(
                    "        on_trigger_registration_function_id: {hook}\n"
                ));
            }
            yaml.push_str("        expose_functions:\n          - match(\"*\")\n");
        }
    }
    yaml
}

/// A free loopback port (bound, read, released).
pub(crate) fn free_port() -> Result<u16, EnvError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| EnvError::Failed(format!("no free loopback port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| EnvError::Failed(format!("no free loopback port: {e}")))
}

/// A running engine binary.
pub(crate) struct EngineProcess {
    url: String,
    guest_url: Option<String>,
    host: std::net::Ipv4Addr,
    port: u16,
    dir: PathBuf,
    child: Option<tokio::process::Child>,
}

impl EngineProcess {
    /// Starts `bin` on `port` (0: a free one) and waits until it answers
    /// `engine::functions::list` to a connected worker; with the gated layout when `guest` is
    /// given: main listener on the host-only 127.0.0.2, an RBAC guest
    /// listener on a free 127.0.0.1 port.
    pub(crate) async fn start_with(
        bin: &Path,
        port: u16,
        guest: Option<&GuestGate>,
    ) -> Result<EngineProcess, EnvError> {
        let port = if port == 0 { free_port()? } else { port };
        let guest_port = match guest {
            Some(_) => Some(free_port()?),
            None => None,
        };
        let main_host = match guest {
            Some(_) => crate::standin::stack::MAIN_HOST,
            None => std::net::Ipv4Addr::LOCALHOST,
        };
        let dir = std::env::temp_dir().join(format!(
            "code-runner-conformance-engine-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| EnvError::Failed(format!("cannot create {}: {e}", dir.display())))?;
        let config = dir.join("config.yaml");
        std::fs::write(&config, config_yaml(port, guest.zip(guest_port)))
            .map_err(|e| EnvError::Failed(format!("cannot write {}: {e}", config.display())))?;
        let log = std::fs::File::create(dir.join("engine.log"))
            .map_err(|e| EnvError::Failed(format!("cannot open the engine log: {e}")))?;
        let log_err = log
            .try_clone()
            .map_err(|e| EnvError::Failed(format!("cannot open the engine log: {e}")))?;
        let child = tokio::process::Command::new(bin)
            .arg("--config")
            .arg(&config)
            .arg("--no-update-check")
            .current_dir(&dir)
            .env("IIIWORKER_DISABLE_BUILTIN_DAEMONS", "1")
            // Its anonymous usage telemetry would leave loopback.
            .env("III_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                EnvError::Failed(format!("cannot start the engine `{}`: {e}", bin.display()))
            })?;
        let mut engine = EngineProcess {
            url: format!("ws://{main_host}:{port}"),
            guest_url: guest_port.map(|p| format!("ws://127.0.0.1:{p}")),
            host: main_host,
            port,
            dir,
            child: Some(child),
        };
        engine.wait_ready().await?;
        Ok(engine)
    }

    pub(crate) fn url(&self) -> String {
        self.url.clone()
    }

    /// The RBAC guest listener, when started with one.
    pub(crate) fn guest_url(&self) -> Option<String> {
        self.guest_url.clone()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("engine.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Whether a worker connecting now gets `engine::functions::list` answered.
    async fn answers(&self) -> bool {
        let Ok(client) =
            crate::standin::client::connect(&self.url, "code-runner-conformance-probe").await
        else {
            return false;
        };
        let answer = client
            .trigger(TriggerRequest {
                function_id: "engine::functions::list".into(),
                payload: json!({}),
                action: None,
                timeout_ms: Some(2_000),
            })
            .await;
        client.shutdown_async().await;
        answer.is_ok()
    }

    async fn wait_ready(&mut self) -> Result<(), EnvError> {
        let deadline = Deadline::after(START_DEADLINE, Duration::from_millis(100));
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(EnvError::Failed(format!(
                    "the engine exited ({status}) before accepting workers; log tail:\n{}",
                    self.log_tail()
                )));
            }
            // A plain TCP connect first: it fails at once while the engine
            // is not listening, where an SDK client would keep retrying.
            let listening = tokio::net::TcpStream::connect((self.host, self.port))
                .await
                .is_ok();
            if listening && self.answers().await {
                return Ok(());
            }
            if !deadline.tick().await {
                return Err(EnvError::Failed(format!(
                    "the engine at {} did not accept workers within {START_DEADLINE:?}; log tail:\n{}",
                    self.url,
                    self.log_tail()
                )));
            }
        }
    }

    /// SIGTERM, wait, kill after a deadline; the scratch directory goes.
    pub(crate) async fn shutdown(mut self) {
        if let Some(child) = self.child.take() {
            super::child::stop(child, STOP_DEADLINE).await;
        }
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_opens_one_loopback_listener_on_the_port() {
        let v: serde_json::Value = serde_yaml::from_str(&config_yaml(40123, None)).unwrap();
        assert_eq!(
            v,
            json!({"workers": [{"name": "iii-worker-manager", "config": {"host": "127.0.0.1", "port": 40123}}]})
        );
    }

    #[test]
    fn a_guest_gate_moves_main_host_only_and_adds_an_rbac_listener() {
        let gate = GuestGate {
            port: 0,
            prefix: "w".into(),
            tenancy: false,
            when_published: false,
        };
        let v: serde_json::Value =
            serde_yaml::from_str(&config_yaml(40123, Some((&gate, 40124)))).unwrap();
        assert_eq!(
            v,
            json!({"registration_namespace_grace_ms": 250, "workers": [
                {"name": "iii-worker-manager", "config": {"host": "127.0.0.2", "port": 40123}},
                {"name": "iii-worker-manager", "config": {"host": "127.0.0.1", "port": 40124, "rbac": {
                    "auth_function_id": "w::guest-auth",
                    "on_function_registration_function_id": "w::guest-register",
                    "expose_functions": ["match(\"*\")"]
                }}}
            ]})
        );
    }

    #[test]
    fn a_tenancy_gate_adds_the_middleware_and_the_trigger_hook() {
        let gate = GuestGate {
            port: 0,
            prefix: "w".into(),
            tenancy: true,
            when_published: false,
        };
        let v: serde_json::Value =
            serde_yaml::from_str(&config_yaml(40123, Some((&gate, 40124)))).unwrap();
        assert_eq!(
            v["workers"][1],
            json!({"name": "iii-worker-manager", "config": {
                "host": "127.0.0.1",
                "port": 40124,
                "middleware_function_id": "w::guest-middleware",
                "rbac": {
                    "auth_function_id": "w::guest-auth",
                    "on_function_registration_function_id": "w::guest-register",
                    "on_trigger_registration_function_id": "w::guest-trigger",
                    "expose_functions": ["match(\"*\")"]
                }
            }})
        );
        assert_eq!(
            v["workers"][0],
            json!({"name": "iii-worker-manager", "config": {"host": "127.0.0.2", "port": 40123}})
        );
    }

    #[tokio::test]
    async fn an_engine_that_exits_is_reported_with_its_log() {
        let e = EngineProcess::start_with(Path::new("/bin/false"), 0, None)
            .await
            .err()
            .expect("a binary that exits is no engine");
        assert!(e.to_string().contains("the engine exited"), "{e}");
    }
}
