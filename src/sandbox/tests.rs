//! The sandbox client's own rules: S-codes into outcomes, and which calls
//! are made again when an answer is lost.
use super::*;

#[test]
fn daemon_envelope_is_parsed_into_its_s_code() {
    let e = BusError::new(
        "invocation_failed",
        r#"handler error: {"code":"S002","docs_url":"x#S002","fix":null,"fix_note":"the sandbox is gone; call sandbox::create first","message":"sandbox not found: 6c1f","retryable":false,"type":"validation"}"#,
    );
    let s = SandboxError::from_bus(e);
    assert_eq!(s.s_code(), Some("S002"));
    assert!(
        matches!(s, SandboxError::Daemon { ref message, retryable: false, .. } if message == "sandbox not found: 6c1f")
    );
}

#[test]
fn missing_daemon_and_other_bus_errors_are_told_apart() {
    let nf = BusError::new(
        "function_not_found",
        "Function sandbox::create not found in namespace default.",
    );
    assert_eq!(SandboxError::from_bus(nf), SandboxError::NotInstalled);
    let ser = BusError::new(
        "invocation_failed",
        "serialization error: missing field `image`",
    );
    assert!(matches!(SandboxError::from_bus(ser), SandboxError::Bus(_)));
    let junk = BusError::new("invocation_failed", "handler error: {not json");
    assert!(matches!(SandboxError::from_bus(junk), SandboxError::Bus(_)));
}

fn daemon(code: &str) -> SandboxError {
    SandboxError::Daemon {
        code: code.into(),
        message: "m".into(),
        retryable: false,
    }
}

#[test]
fn s_codes_become_typed_outcomes() {
    assert!(daemon("S002").is_gone());
    assert!(daemon("S004").is_gone());
    assert!(daemon("S400").is_capacity());
    assert!(daemon("S003").is_exec_cap());
    assert!(daemon("S300").shows_vm_gone());
    assert!(daemon("S002").shows_vm_gone());
    assert!(!daemon("S100").shows_vm_gone() && !daemon("S100").is_exec_cap());
    assert_eq!(daemon("S200").outcome(), Outcome::Timeout);
    assert_eq!(
        daemon("S100").outcome(),
        Outcome::Refused {
            code: "S100",
            message: "m"
        }
    );
    assert_eq!(SandboxError::NotInstalled.outcome(), Outcome::NotInstalled);
    assert!(!SandboxError::NotInstalled.is_gone());
}

/// A bus whose first answer to each call is lost: the attempt runs
/// into its deadline, as the SDK's does when the engine drops a result.
#[derive(Default)]
struct LosesFirstAnswer {
    calls: std::sync::Mutex<Vec<(String, Duration)>>,
}

impl Bus for LosesFirstAnswer {
    fn call<'a>(
        &'a self,
        function_id: &'a str,
        _payload: Value,
        timeout: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, BusError>> + Send + 'a>>
    {
        let first = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((function_id.to_string(), timeout));
            calls.iter().filter(|(f, _)| f == function_id).count() == 1
        };
        Box::pin(async move {
            if first {
                tokio::time::sleep(timeout).await;
                return Err(BusError::new(crate::bus::TIMEOUT, "no answer"));
            }
            Ok(json!({"exit_code": 0, "sandboxes": []}))
        })
    }
    fn publish(&self, _spec: crate::bus::FunctionSpec, _handler: crate::bus::Handler) {}
    fn unpublish(&self, _function_id: &str) {}
    fn bind(
        &self,
        trigger_type: &str,
        function_id: &str,
        _config: Value,
    ) -> Result<crate::bus::TriggerBinding, BusError> {
        Ok(crate::bus::TriggerBinding::detached(
            trigger_type,
            function_id,
        ))
    }
    fn unbind(&self, _binding: crate::bus::TriggerBinding) {}
}

/// A lost answer costs an idempotent call one attempt's deadline, not
/// the caller's whole wait; an exec, which must not run twice, is never
/// made again.
#[tokio::test(start_paused = true)]
async fn idempotent_calls_are_made_again_after_a_lost_answer_and_execs_never() {
    let bus = Arc::new(LosesFirstAnswer::default());
    let sandbox = BusSandbox::new(bus.clone());
    let started = tokio::time::Instant::now();
    sandbox
        .write_file("vm", "/tmp/f.py", "x = 1")
        .await
        .unwrap();
    assert_eq!(started.elapsed(), ATTEMPT_TIMEOUT, "one attempt's deadline");
    sandbox.list().await.unwrap();
    let exec = sandbox
        .exec(
            "vm",
            ExecParams {
                argv: vec!["true".into()],
                timeout_ms: 1_000,
                ..ExecParams::default()
            },
        )
        .await;
    assert!(exec.is_err(), "the exec's lost answer is its failure");
    let calls: Vec<_> = bus
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(f, _)| f.clone())
        .collect();
    assert_eq!(
        calls,
        [
            "sandbox::fs::write",
            "sandbox::fs::write",
            "sandbox::list",
            "sandbox::list",
            "sandbox::exec",
        ]
    );
    assert!(bus.calls.lock().unwrap()[..4]
        .iter()
        .all(|(_, t)| *t <= ATTEMPT_TIMEOUT));
}

#[test]
fn a_bus_failure_keeps_its_cause() {
    use std::error::Error as _;
    let e = SandboxError::Bus(BusError::new("timeout", "no answer"));
    assert!(e.source().is_some());
}
