//! The console UI's own tests, run from cargo on the assets embedded in the
//! worker: the TypeScript check; vitest (every card rendered from
//! fixtures/ui/*.json through the console message path with no full runtime
//! id in the card or the raw-JSON pane, redaction properties, a DOM mount,
//! both scripts' setup(host) on React 19, and each built asset loaded with
//! import() and refused unless its default export is a function); and the
//! real-browser tests, where the built assets run through the console-host
//! stand-in (ui/harness) in headless Debian Chromium, which its setup
//! installs with apt-get when missing and root. Screenshots land in
//! target/ui-screenshots/, or in $SCR_UI_SCREENSHOT_DIR (docs/screenshots to
//! refresh the committed ones).
//!
//! npm packages are installed once per lockfile: `npm ci` into
//! `<target>/ui-npm/test-modules/`, stamped with a hash of ui/package.json and
//! ui/package-lock.json, under a lock file so parallel test processes install
//! once; ui/node_modules is then a symlink to it.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use code_runner_conformance::standin::wait::until_blocking;

mod common;

const NPM_DEADLINE: Duration = Duration::from_secs(600);
const VITEST_DEADLINE: Duration = Duration::from_secs(300);
const TSC_DEADLINE: Duration = Duration::from_secs(300);
/// Includes installing Chromium with apt-get on a fresh machine.
const BROWSER_DEADLINE: Duration = Duration::from_secs(1200);
/// A lock older than this whose holder is gone is taken over.
const LOCK_WAIT: Duration = Duration::from_secs(900);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ui_dir() -> PathBuf {
    repo().join("ui")
}

/// Cargo's target dir (marked with CACHEDIR.TAG), found from this test binary.
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|p| p.join("CACHEDIR.TAG").is_file())
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| repo().join("target"))
}

struct Output {
    status: Option<i32>,
    text: String,
    elapsed: Duration,
}

/// Runs `cmd` in its own process group with a deadline; on expiry the whole
/// group is killed. stdout and stderr are captured together.
fn run(cmd: &mut Command, deadline: Duration) -> Output {
    let log = std::env::temp_dir().join(format!(
        "scr-ui-test-{}-{:x}.log",
        std::process::id(),
        nanos()
    ));
    let file = fs::File::create(&log).expect("create the log file");
    let err = file.try_clone().expect("clone the log file");
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .env("NO_COLOR", "1")
        .env("FORCE_COLOR", "0")
        .env("NPM_CONFIG_UPDATE_NOTIFIER", "false")
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let mut exited = None;
    let finished = until_blocking(deadline, Duration::from_millis(100), || {
        exited = child
            .try_wait()
            .unwrap_or_else(|e| panic!("waiting for {:?}: {e}", cmd.get_program()));
        exited.is_some()
    });
    if !finished {
        let _ = Command::new("kill")
            // `--`: procps reads a bare `-<pid>` after the signal as `-1`,
            // every process.
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .status();
        let _ = child.kill();
        let _ = child.wait();
    }
    let status = exited.and_then(|s| s.code());
    let mut text = String::new();
    let _ = fs::File::open(&log).and_then(|mut f| f.read_to_string(&mut text));
    let _ = fs::remove_file(&log);
    Output {
        status,
        text,
        elapsed: start.elapsed(),
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn check(what: &str, out: &Output, deadline: Duration) {
    match out.status {
        Some(0) => eprintln!("{what}: ok in {:.1}s", out.elapsed.as_secs_f64()),
        Some(code) => panic!("{what} exited {code}:\n{}", out.text),
        None => panic!(
            "{what} did not finish within {}s and was killed:\n{}",
            deadline.as_secs(),
            out.text
        ),
    }
}

/// Holds `<target>/ui-npm/test.lock` while alive.
struct InstallLock(PathBuf);

impl InstallLock {
    fn acquire(path: PathBuf) -> InstallLock {
        let taken = until_blocking(LOCK_WAIT, Duration::from_millis(200), || {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    use std::io::Write;
                    let _ = write!(f, "{}", std::process::id());
                    true
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = fs::read_to_string(&path).unwrap_or_default();
                    let alive = holder
                        .trim()
                        .parse::<u32>()
                        .map(|pid| Path::new(&format!("/proc/{pid}")).exists())
                        .unwrap_or(true);
                    if !alive {
                        // Its holder is gone: the next look takes it over.
                        let _ = fs::remove_file(&path);
                    }
                    false
                }
                Err(e) => panic!("cannot create {}: {e}", path.display()),
            }
        });
        if !taken {
            // Held past LOCK_WAIT: a stale lock of a reused pid; take it over.
            let _ = fs::remove_file(&path);
            return InstallLock::acquire(path);
        }
        InstallLock(path)
    }
}

impl Drop for InstallLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Installs the UI's npm packages (once per lockfile) and points
/// ui/node_modules at them. Every test of this binary shares one call.
fn node_modules() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let ui = ui_dir();
        let package_json = fs::read(ui.join("package.json")).expect("ui/package.json");
        let lock = fs::read(ui.join("package-lock.json")).expect("ui/package-lock.json");
        let mut h = DefaultHasher::new();
        (&package_json, &lock).hash(&mut h);
        let stamp_value = format!("{:016x}", h.finish());

        let root = target_dir().join("ui-npm");
        fs::create_dir_all(&root).expect("create <target>/ui-npm");
        let cache = root.join("test-modules");
        let stamp = cache.join(".stamp");
        let _lock = InstallLock::acquire(root.join("test.lock"));

        if fs::read_to_string(&stamp).ok().as_deref() != Some(stamp_value.as_str()) {
            let work = root.join(format!("test-work-{}", std::process::id()));
            let _ = fs::remove_dir_all(&work);
            fs::create_dir_all(&work).expect("create the npm work dir");
            fs::write(work.join("package.json"), &package_json).unwrap();
            fs::write(work.join("package-lock.json"), &lock).unwrap();
            let out = run(
                Command::new("npm")
                    .args([
                        "ci",
                        "--no-audit",
                        "--no-fund",
                        "--ignore-scripts",
                        "--loglevel=error",
                    ])
                    .current_dir(&work),
                NPM_DEADLINE,
            );
            check("npm ci (ui)", &out, NPM_DEADLINE);
            let _ = fs::remove_dir_all(&cache);
            fs::rename(&work, &cache).expect("move the npm install into place");
            fs::write(&stamp, &stamp_value).unwrap();
        }

        // ui/node_modules -> the cache, replaced atomically when it differs.
        let link = ui.join("node_modules");
        let want = cache.join("node_modules");
        if fs::read_link(&link).ok().as_deref() != Some(want.as_path()) {
            let tmp = ui.join(format!(".node_modules-{}", std::process::id()));
            let _ = fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&want, &tmp).expect("symlink ui/node_modules");
            if link.is_dir() && fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir()) {
                // A real install left by hand: the cache replaces it.
                fs::remove_dir_all(&link).expect("remove ui/node_modules");
            }
            fs::rename(&tmp, &link).expect("place ui/node_modules");
        }
        want
    })
}

/// The browser loads exactly the assets embedded in the binary.
fn embedded_assets() -> PathBuf {
    let dist =
        target_dir()
            .join("ui-npm")
            .join(format!("embedded-{}-{:x}", std::process::id(), nanos()));
    fs::create_dir_all(&dist).unwrap();
    for (name, path) in [
        ("cards.js", sandbox_code_runner::ui::SCRIPT_PATH),
        ("cards.css", sandbox_code_runner::ui::STYLE_PATH),
        ("page.js", sandbox_code_runner::ui::PAGE_PATH),
    ] {
        let (content, _) = sandbox_code_runner::ui::asset(path).expect("embedded asset");
        fs::write(dist.join(name), content).unwrap();
    }
    dist
}

fn node_script(rel: &str) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(node_modules().join(rel)).current_dir(ui_dir());
    cmd
}

#[test]
fn typescript_checks() {
    let out = run(
        node_script("typescript/bin/tsc").args(["--noEmit", "-p", "."]),
        TSC_DEADLINE,
    );
    check("tsc --noEmit", &out, TSC_DEADLINE);
}

/// Whether `png` was written at or after `since` (an older one proves nothing).
fn written_since(png: &Path, since: std::time::SystemTime) -> bool {
    fs::metadata(png)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since)
}

/// Where the browser tests put their screenshots.
fn screenshot_dir() -> PathBuf {
    std::env::var_os("SCR_UI_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_relative() { repo().join(p) } else { p })
        .unwrap_or_else(|| target_dir().join("ui-screenshots"))
}

#[test]
fn vitest_renders_every_card_and_loads_every_asset_without_a_full_runtime_id() {
    let dist = embedded_assets();
    let out = run(
        node_script("vitest/vitest.mjs")
            .arg("run")
            .env("SCR_UI_DIST", &dist),
        VITEST_DEADLINE,
    );
    let _ = fs::remove_dir_all(&dist);
    check("vitest run", &out, VITEST_DEADLINE);
    assert!(
        out.text.contains("passed") && !out.text.contains("no tests"),
        "vitest ran no test:\n{}",
        out.text
    );
    eprintln!(
        "{}",
        out.text
            .lines()
            .filter(|l| l.contains("Tests"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The embedded assets in the console-host stand-in: imported, set up,
/// dispatched and disposed as a console does; every fixture rendered with no
/// full runtime id in the DOM, the raw-JSON pane or what it copies; a
/// screenshot of each kind of call.
#[test]
fn chromium_runs_the_embedded_assets_through_the_console_host_stand_in() {
    let dist = embedded_assets();
    let shots = screenshot_dir();
    let started = std::time::SystemTime::now();
    let out = run(
        node_script("vitest/vitest.mjs")
            .args([
                "run",
                "--config",
                "vitest.browser.config.ts",
                "browser/console.browser.test.ts",
            ])
            .env("SCR_UI_DIST", &dist)
            .env("SCR_UI_SCREENSHOT_DIR", &shots),
        BROWSER_DEADLINE,
    );
    let _ = fs::remove_dir_all(&dist);
    check("browser test", &out, BROWSER_DEADLINE);
    if let Some(line) = out.text.lines().find(|l| l.contains("SKIPPED")) {
        eprintln!("{line}");
        return;
    }
    for name in [
        "run-oneshot",
        "run-kept",
        "run-kept-raw-json",
        "run-failing-script",
        "run-infrastructure-error",
        "run-in-flight",
        "register-function",
        "teardown-runtime",
        "teardown-namespace",
        "list-runtimes",
    ] {
        let png = shots.join(format!("{name}.png"));
        assert!(
            written_since(&png, started),
            "no fresh screenshot at {}:\n{}",
            png.display(),
            out.text
        );
    }
    eprintln!("screenshots: {}", shots.display());
}

/// The runtimes page over a live worker's inventory: about 50 runtimes
/// (40 kept, 10 namespace runtimes in 5 namespaces), registered by page.js
/// in the console-host stand-in and rendered in Chromium, with a screenshot
/// (runtimes-page.png); teardown from the page and the 1,000-runtime paging
/// run against the same build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_renders_the_runtimes_page_from_a_live_inventory() {
    use serde_json::json;
    let limits = code_runner_conformance::standin::sandbox_double::SandboxLimits {
        max_concurrent_sandboxes: 64,
        ..common::test_limits()
    };
    let h = common::Harness::start_with("", limits).await;
    let mut runtime_ids = Vec::new();
    for i in 0..40 {
        let (lang, code) = if i % 4 == 0 {
            ("node", "console.log(1)")
        } else {
            ("python", "print(1)")
        };
        let out = h
            .run(json!({"lang": lang, "code": code, "keep": true}))
            .await
            .expect("kept run");
        runtime_ids.push(out["runtime_id"].as_str().unwrap().to_string());
    }
    for ns in ["billing", "etl", "ingest", "reports", "search"] {
        for (lang, name, source) in [
            ("python", "score", "def handler(p):\n    return p"),
            ("node", "shape", "export function handler(p) { return p }"),
        ] {
            h.call(
                "sandbox-code-runner::register_function",
                json!({"function_id": format!("{ns}::{name}"), "lang": lang, "source": source}),
            )
            .await
            .expect("registered");
        }
        for name in ["score", "shape"] {
            h.call(&format!("{ns}::{name}"), json!({"n": 1}))
                .await
                .expect("a handler call");
        }
    }
    let inventory = h
        .call("sandbox-code-runner::list_runtimes", json!({}))
        .await
        .expect("inventory");
    assert_eq!(inventory["runtimes"].as_array().map(Vec::len), Some(50));
    let text = inventory.to_string();
    for id in &runtime_ids {
        assert!(
            !text.contains(id.as_str()),
            "the inventory holds a runtime id"
        );
    }
    let dist = embedded_assets();
    let inventory_path = dist.join("inventory.json");
    fs::write(&inventory_path, text).unwrap();
    let shots = screenshot_dir();
    let screenshot = shots.join("runtimes-page.png");
    let started = std::time::SystemTime::now();
    let out = tokio::task::spawn_blocking(move || {
        run(
            node_script("vitest/vitest.mjs")
                .args([
                    "run",
                    "--config",
                    "vitest.browser.config.ts",
                    "browser/page.browser.test.ts",
                ])
                .env("SCR_UI_DIST", &dist)
                .env("SCR_UI_INVENTORY", &inventory_path)
                .env("SCR_UI_SCREENSHOT_DIR", &shots),
            BROWSER_DEADLINE,
        )
    })
    .await
    .unwrap();
    check("page browser test", &out, BROWSER_DEADLINE);
    for id in ["billing", "etl", "ingest", "reports", "search"] {
        h.call("sandbox-code-runner::teardown", json!({"namespace": id}))
            .await
            .expect("teardown");
    }
    for id in &runtime_ids {
        h.call("sandbox-code-runner::teardown", json!({"runtime_id": id}))
            .await
            .expect("teardown");
    }
    h.finish(0).await;
    if let Some(line) = out.text.lines().find(|l| l.contains("SKIPPED")) {
        eprintln!("{line}");
        return;
    }
    assert!(
        out.text.contains("passed") && written_since(&screenshot, started),
        "no page screenshot at {}:\n{}",
        screenshot.display(),
        out.text
    );
    eprintln!("page screenshot: {}", screenshot.display());
}
