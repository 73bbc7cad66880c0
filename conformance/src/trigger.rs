//! `trigger`: call one function the way `iii trigger` does, so seed examples
//! run verbatim with only the command name changed.

use std::process::ExitCode;

use iii_sdk::protocol::TriggerRequest;
use serde_json::{Map, Value};

#[derive(clap::Args, Debug)]
pub struct TriggerArgs {
    /// The function to call, e.g. `sandbox-code-runner::run`.
    pub(crate) function_id: String,
    /// Payload fields as `key=value`; a value that parses as JSON (numbers,
    /// booleans, null, objects) is taken as JSON, anything else as a string.
    pub(crate) fields: Vec<String>,
    /// The whole payload as one JSON document (instead of `key=value`).
    #[arg(long, conflicts_with = "fields")]
    pub(crate) json: Option<String>,
    /// Engine URL.
    #[arg(long, env = "III_URL", default_value = "ws://127.0.0.1:49134")]
    pub(crate) url: String,
    /// Client-side deadline in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    pub(crate) timeout_ms: u64,
}

/// Why a payload could not be built from the arguments.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum PayloadError {
    #[error("`{0}` is not key=value")]
    NotKeyValue(String),
    #[error("--json is not valid JSON: {0}")]
    BadJson(String),
}

/// Builds the payload from `k=v` pairs or `--json`.
pub(crate) fn payload(fields: &[String], json: Option<&str>) -> Result<Value, PayloadError> {
    if let Some(doc) = json {
        return serde_json::from_str(doc).map_err(|e| PayloadError::BadJson(e.to_string()));
    }
    let mut map = Map::new();
    for field in fields {
        let Some((k, v)) = field.split_once('=') else {
            return Err(PayloadError::NotKeyValue(field.clone()));
        };
        if k.is_empty() {
            return Err(PayloadError::NotKeyValue(field.clone()));
        }
        let value = serde_json::from_str::<Value>(v).unwrap_or_else(|_| Value::String(v.into()));
        map.insert(k.to_string(), value);
    }
    Ok(Value::Object(map))
}

pub(crate) async fn run(args: TriggerArgs) -> ExitCode {
    let payload = match payload(&args.fields, args.json.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let client =
        crate::standin::client::connect(&args.url, "code-runner-conformance:trigger").await;
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = client
        .trigger(TriggerRequest {
            function_id: args.function_id.clone(),
            payload,
            action: None,
            timeout_ms: Some(args.timeout_ms),
        })
        .await;
    client.shutdown_async().await;
    match outcome {
        Ok(v) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
            );
            ExitCode::SUCCESS
        }
        Err(iii_sdk::Error::Remote { code, message, .. }) => {
            println!("error: {code}: {message}");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_values_follow_iii_trigger() {
        let p = payload(
            &[
                "lang=python".into(),
                "code=print(2+2)".into(),
                "keep=true".into(),
                "n=21".into(),
            ],
            None,
        )
        .unwrap();
        assert_eq!(
            p,
            json!({"lang":"python","code":"print(2+2)","keep":true,"n":21})
        );
    }

    #[test]
    fn json_wins_and_bad_input_is_named() {
        assert_eq!(payload(&[], Some(r#"{"a":1}"#)).unwrap(), json!({"a":1}));
        assert!(matches!(
            payload(&[], Some("{")),
            Err(PayloadError::BadJson(_))
        ));
        assert_eq!(
            payload(&["novalue".into()], None),
            Err(PayloadError::NotKeyValue("novalue".into()))
        );
    }
}
