//! The engine protocol checks driven by the registry SDKs from Node and
//! Python, as real clients of the stand-in engine.
//!
//! The checks themselves live in `tests/sdk/node/protocol.mjs` (npm
//! `iii-sdk` 0.22.1) and `tests/sdk/python/protocol.py` (PyPI `iii-sdk`
//! 0.25.0). Each test here installs its SDK into a cache under the target
//! directory, starts a stand-in engine, runs the script against it with a
//! deadline, and fails with the script's output unless it exits 0.
//!
//! The SDK caches:
//! - `<target>/sdk-cache/node`: the committed `package.json` and
//!   `package-lock.json` copied in, then `npm ci` (`npm install` without a
//!   lock);
//! - `<target>/sdk-cache/python`: a `python3 -m venv` with the committed
//!   `requirements.txt` installed by pip.
//!
//! Each holds a `.stamp` with a hash of its inputs (the committed files and
//! the interpreter's version) and is rebuilt from scratch when the hash
//! differs. `<target>/sdk-cache/{node,python}.lock` serialise installs across
//! test processes (nextest runs each test in its own). `<target>` is
//! `CARGO_TARGET_DIR` (a relative one is taken from the workspace root) or
//! the workspace's `target/`.
//!
//! Fidelity: with `III_BIN=/path/to/iii`, each test also starts that real
//! engine (no arguments, in a scratch directory, listening on 49134 or
//! `III_PORT`) and runs the same script against it. Without it, the test
//! says that it skipped that part and why.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use code_runner_conformance::standin::engine::StandInEngine;
use common::sdk_cache::*;
use common::wait_for;

/// How long one run of a protocol script may take.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(120);
/// How long a real engine may take to accept connections.
const REAL_ENGINE_START: Duration = Duration::from_secs(30);

/// A protocol script and the SDK install it runs with.
enum Client {
    /// The cache directory holding `node_modules/iii-sdk`.
    Node(PathBuf),
    /// The venv holding `iii-sdk`.
    Python(PathBuf),
}

impl Client {
    fn name(&self) -> &'static str {
        match self {
            Client::Node(_) => "node",
            Client::Python(_) => "python",
        }
    }

    /// Installs the npm SDK into `<target>/sdk-cache/node` unless the stamp
    /// says the install there is current.
    async fn node() -> Client {
        let dir = cache_root().join("node");
        let _lock = exclusive_lock(cache_root().join("node.lock")).await;
        let src = sdk_sources("node");
        let package = std::fs::read(src.join("package.json")).expect("tests/sdk/node/package.json");
        let lock = std::fs::read(src.join("package-lock.json")).ok();
        let mut probe = command("node");
        probe.arg("--version");
        let node = run_ok(probe, Duration::from_secs(30), "node --version").await;
        let hash = content_hash(&[
            &package,
            lock.as_deref().unwrap_or_default(),
            node.trim().as_bytes(),
        ]);
        let stamp = format!("{hash}\n");
        let sentinel = dir
            .join("node_modules")
            .join("iii-sdk")
            .join("package.json");
        if stamp_matches(&dir, &stamp, &sentinel) {
            eprintln!("node SDK cache {}: current (stamp {hash})", dir.display());
            return Client::Node(dir);
        }
        let started = Instant::now();
        fresh_dir(&dir);
        std::fs::write(dir.join("package.json"), &package).expect("copy package.json");
        let mut npm = command("npm");
        match &lock {
            Some(lock) => {
                std::fs::write(dir.join("package-lock.json"), lock)
                    .expect("copy package-lock.json");
                npm.arg("ci");
            }
            None => {
                npm.arg("install");
            }
        }
        npm.args(["--ignore-scripts", "--no-audit", "--no-fund"])
            .env("npm_config_update_notifier", "false")
            .current_dir(&dir);
        run_ok(npm, INSTALL_DEADLINE, "installing the npm iii-sdk").await;
        assert!(
            sentinel.exists(),
            "npm left no node_modules/iii-sdk in {}",
            dir.display()
        );
        write_stamp(&dir, &stamp);
        eprintln!(
            "node SDK cache {}: installed in {:.1} s (stamp {hash})",
            dir.display(),
            started.elapsed().as_secs_f64()
        );
        Client::Node(dir)
    }

    /// The venv `<target>/sdk-cache/python` with the PyPI SDK.
    async fn python() -> Client {
        Client::Python(python_venv().await)
    }

    fn script_command(&self, url: &str) -> tokio::process::Command {
        match self {
            Client::Node(dir) => {
                let mut cmd = command("node");
                cmd.arg(sdk_sources("node").join("protocol.mjs"))
                    .arg(url)
                    .env("III_SDK_NODE_DIR", dir);
                cmd
            }
            Client::Python(venv) => {
                let mut cmd = command(venv.join("bin").join("python"));
                cmd.arg(sdk_sources("python").join("protocol.py"))
                    .arg(url)
                    .env("PYTHONUNBUFFERED", "1")
                    .env("PYTHONDONTWRITEBYTECODE", "1");
                cmd
            }
        }
    }

    /// Runs the protocol script against `url`; `Err` carries its output.
    async fn check(&self, url: &str, engine: &str) -> Result<(), String> {
        let what = format!(
            "the {} SDK protocol checks against the {engine} at {url}",
            self.name()
        );
        let started = Instant::now();
        let out = run(self.script_command(url), SCRIPT_DEADLINE, &what).await?;
        if !out.status.success() {
            return Err(format!("{what} failed ({}):\n{}", out.status, shown(&out)));
        }
        eprintln!(
            "{what}: passed in {:.2} s\n{}",
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stdout)
        );
        Ok(())
    }

    async fn against_stand_in(&self) {
        let engine = StandInEngine::start(0)
            .await
            .expect("the stand-in engine starts");
        let outcome = self.check(&engine.url(), "stand-in engine").await;
        engine.shutdown().await;
        if let Err(e) = outcome {
            panic!("{e}");
        }
    }

    /// The same script against a real engine, when `III_BIN` names one.
    async fn against_real_engine(&self) {
        let Some(bin) = std::env::var_os("III_BIN").filter(|b| !b.is_empty()) else {
            eprintln!(
                "SKIPPED {} SDK real-engine fidelity: set III_BIN=/path/to/iii (a real engine binary) \
                 to also run these protocol checks against a real engine",
                self.name()
            );
            return;
        };
        real_engine(
            bin,
            |url| async move { self.check(&url, "real engine").await },
        )
        .await;
    }
}

/// Starts the real engine at `bin` (no arguments, in a scratch directory so
/// its state files stay out of the tree), waits until it accepts
/// connections, and runs `body` against it. Real engines run one at a time:
/// they all listen on the same port.
async fn real_engine<F, Fut>(bin: OsString, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let port = std::env::var("III_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or(49134);
    let _one_at_a_time = exclusive_lock(cache_root().join("real-engine.lock")).await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "port {port} is already in use: stop whatever listens there (or set III_PORT) before \
         running the real-engine fidelity checks"
    );
    let scratch = std::env::temp_dir().join(format!("scr-sdk-real-engine-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let log_path = scratch.join("engine.log");
    let log = std::fs::File::create(&log_path).expect("engine log");
    let mut child = tokio::process::Command::new(&bin)
        .current_dir(&scratch)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("engine log"))
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start the real engine {}: {e}",
                Path::new(&bin).display()
            )
        });
    let url = format!("ws://127.0.0.1:{port}");
    let mut exited = None;
    let up = wait_for(REAL_ENGINE_START, || {
        if exited.is_none() {
            exited = child.try_wait().ok().flatten();
        }
        let gone = exited.is_some();
        async move {
            gone || tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        }
    })
    .await;
    let outcome = match exited {
        Some(status) => Err(format!(
            "the real engine exited before accepting connections ({status})"
        )),
        None if !up => Err(format!(
            "the real engine does not accept connections on {url}"
        )),
        None => body(url).await,
    };
    let _ = child.kill().await;
    let engine_log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&scratch);
    if let Err(e) = outcome {
        panic!("{e}\n--- real engine log ---\n{engine_log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_sdk_protocol() {
    let client = Client::node().await;
    client.against_stand_in().await;
    client.against_real_engine().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_protocol() {
    let client = Client::python().await;
    client.against_stand_in().await;
    client.against_real_engine().await;
}
