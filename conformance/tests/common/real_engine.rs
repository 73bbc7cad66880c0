//! A real iii engine binary (`III_BIN`) started for one test with a config
//! of two listeners on free loopback ports, in a scratch directory of its
//! own; without `III_BIN` the test says why it skips.

use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpStream;

pub struct RealEngine {
    child: tokio::process::Child,
    dir: PathBuf,
    pub main: u16,
    pub guest: u16,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl RealEngine {
    /// The engine at `III_BIN` with `config(main, guest)`, once both
    /// listeners accept; `None` (after printing why `test` skips, and what
    /// it would check) without `III_BIN`.
    pub async fn start(
        test: &str,
        checks: &str,
        config: impl Fn(u16, u16) -> String,
    ) -> Option<RealEngine> {
        let Some(bin) = std::env::var_os("III_BIN").filter(|b| !b.is_empty()) else {
            eprintln!(
                "SKIPPED {test}: set III_BIN=/path/to/iii (a real engine binary) to run {checks} \
                 against a real engine as well"
            );
            return None;
        };
        let (main, guest) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!("scr-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        std::fs::write(dir.join("config.yaml"), config(main, guest)).expect("config written");
        let child = tokio::process::Command::new(bin)
            .arg("--config")
            .arg(dir.join("config.yaml"))
            .arg("--no-update-check")
            .current_dir(&dir)
            .env("IIIWORKER_DISABLE_BUILTIN_DAEMONS", "1")
            // Its anonymous usage telemetry would leave loopback.
            .env("III_TELEMETRY_ENABLED", "false")
            .kill_on_drop(true)
            .spawn()
            .expect("real engine starts");
        let up = super::wait_for(Duration::from_secs(30), || async {
            TcpStream::connect(("127.0.0.1", guest)).await.is_ok()
                && TcpStream::connect(("127.0.0.1", main)).await.is_ok()
        })
        .await;
        assert!(up, "the real engine opens both listeners");
        Some(RealEngine {
            child,
            dir,
            main,
            guest,
        })
    }

    pub fn main_url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.main)
    }

    pub fn guest_url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.guest)
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
