//! The hermetic bench: the stand-in engine plus the iii-sandbox double, in
//! one process, as `serve` runs them and as tests embed them.

use std::path::PathBuf;

use crate::config_double::ConfigDouble;
use crate::engine::StandInEngine;
use crate::sandbox_double::{SandboxDouble, SandboxLimits};

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct BenchOptions {
    /// Stand-in engine port (0 = any). Ignored when `engine` is set.
    pub port: u16,
    /// A real engine to attach the daemon double to, instead of the stand-in.
    pub engine: Option<String>,
    pub limits: SandboxLimits,
    /// Start the configuration-worker double, persisting under this directory.
    pub configuration_dir: Option<PathBuf>,
}

/// Why the bench could not start.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("stand-in engine cannot bind 127.0.0.1:{port}: {source}")]
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

/// A running bench. Dropping it without `shutdown` leaves sandboxes to the
/// double's own drop; call `shutdown` to stop them deterministically.
pub struct Bench {
    engine: Option<StandInEngine>,
    url: String,
    sandbox: SandboxDouble,
    configuration: Option<ConfigDouble>,
}

impl Bench {
    pub async fn start(options: BenchOptions) -> Result<Bench, BenchError> {
        let (engine, url) = match options.engine {
            Some(url) => (None, url),
            None => {
                let engine = StandInEngine::start(options.port).await.map_err(|source| {
                    BenchError::Bind {
                        port: options.port,
                        source,
                    }
                })?;
                let url = engine.url();
                (Some(engine), url)
            }
        };
        let sandbox = SandboxDouble::start(&url, options.limits)
            .await
            .map_err(|e| BenchError::Sandbox(e.to_string()))?;
        let configuration = match &options.configuration_dir {
            Some(dir) => Some(
                ConfigDouble::start(&url, dir)
                    .await
                    .map_err(|e| BenchError::Configuration(e.to_string()))?,
            ),
            None => None,
        };
        Ok(Bench {
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

    /// The stand-in engine, when this bench started one.
    pub fn engine(&self) -> Option<&StandInEngine> {
        self.engine.as_ref()
    }

    /// The daemon double.
    pub fn sandbox(&self) -> &SandboxDouble {
        &self.sandbox
    }

    /// Stops every sandbox, then the engine.
    pub async fn shutdown(self) {
        if let Some(c) = self.configuration {
            c.shutdown().await;
        }
        self.sandbox.shutdown().await;
        if let Some(engine) = self.engine {
            engine.shutdown().await;
        }
    }
}
