//! The console UI's own tests, run from cargo on the assets embedded in the
//! worker: the TypeScript check; vitest (every card rendered from
//! fixtures/ui/*.json through the console message path with no full runtime
//! id in the card or the raw-JSON pane, redaction properties, a DOM mount,
//! both scripts' setup(host) on React 19, and each built asset loaded with
//! import() and refused unless its default export is a function); and the
//! real-browser tests, where the built assets run through the console-host
//! stand-in (ui/harness) in headless Debian Chromium, which these tests
//! install with apt-get when it is missing and they run as root.
//! Screenshots land in target/ui-screenshots/, or in $SCR_UI_SCREENSHOT_DIR
//! (docs/screenshots to refresh the committed ones).
//!
//! What these tests install, they install once, whichever test process asks
//! first (`install_once`: an flock under `<target>/ui-npm/`, and a second
//! look under it): npm packages once per lockfile, `npm ci` into
//! `<target>/ui-npm/test-modules/`, stamped with a hash of ui/package.json
//! and ui/package-lock.json (ui/node_modules is then a symlink to it); and
//! Chromium, which two browser tests would otherwise each find missing and
//! each `apt-get install`, the second losing dpkg's lock.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use code_runner_conformance::standin::install::install_once;
use code_runner_conformance::standin::wait::until_blocking;

mod common;

const NPM_DEADLINE: Duration = Duration::from_secs(600);
const VITEST_DEADLINE: Duration = Duration::from_secs(300);
const TSC_DEADLINE: Duration = Duration::from_secs(300);
/// One browser test file (Chromium is installed before it starts).
const BROWSER_DEADLINE: Duration = Duration::from_secs(600);
/// Each apt-get step of installing Chromium on a fresh machine.
const APT_DEADLINE: Duration = Duration::from_secs(900);
/// The browser the browser tests drive unless `SCR_CHROMIUM` names another
/// (ui/browser/setup.ts reads the same).
const CHROMIUM: &str = "/usr/bin/chromium";

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
    checked(what, out, deadline).unwrap_or_else(|e| panic!("{e}"));
}

/// Whether `out` is a success; `Err` says how it was not.
fn checked(what: &str, out: &Output, deadline: Duration) -> Result<(), String> {
    match out.status {
        Some(0) => {
            eprintln!("{what}: ok in {:.1}s", out.elapsed.as_secs_f64());
            Ok(())
        }
        Some(code) => Err(format!("{what} exited {code}:\n{}", out.text)),
        None => Err(format!(
            "{what} did not finish within {}s and was killed:\n{}",
            deadline.as_secs(),
            out.text
        )),
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
        let current = || fs::read_to_string(&stamp).ok().as_deref() == Some(stamp_value.as_str());
        install_once(
            "the UI's npm packages",
            &root.join("test.lock"),
            current,
            || {
                let work = root.join(format!("test-work-{}", std::process::id()));
                let _ = fs::remove_dir_all(&work);
                fs::create_dir_all(&work).map_err(|e| format!("create {work:?}: {e}"))?;
                fs::write(work.join("package.json"), &package_json).map_err(|e| e.to_string())?;
                fs::write(work.join("package-lock.json"), &lock).map_err(|e| e.to_string())?;
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
                checked("npm ci (ui)", &out, NPM_DEADLINE)?;
                let _ = fs::remove_dir_all(&cache);
                fs::rename(&work, &cache)
                    .map_err(|e| format!("move the npm install into place: {e}"))?;
                fs::write(&stamp, &stamp_value).map_err(|e| e.to_string())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));

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

/// Whether this process runs as root (the owner of `/proc/self`).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Debian's Chromium for the browser tests: installed with apt-get when
/// [`CHROMIUM`] is missing and this runs as root, once across every test
/// process (each browser test runs in a process of its own, and two
/// `apt-get install`s at once fight over dpkg's lock; apt also waits for a
/// lock some other apt holds instead of failing). With `SCR_CHROMIUM`, or
/// without root, nothing is installed, and the browser test's setup
/// (ui/browser/setup.ts) says why it skips.
fn chromium() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if std::env::var_os("SCR_CHROMIUM").is_some() || !running_as_root() {
            return;
        }
        let apt = |args: &[&str]| {
            run(
                Command::new("apt-get")
                    .args(["-o", "DPkg::Lock::Timeout=600", "-y", "-qq"])
                    .args(args)
                    .env("DEBIAN_FRONTEND", "noninteractive"),
                APT_DEADLINE,
            )
        };
        let installed = install_once(
            "Debian's chromium",
            &target_dir().join("ui-npm").join("chromium.lock"),
            || Path::new(CHROMIUM).exists(),
            || {
                eprintln!("browser tests: {CHROMIUM} is missing; installing Debian's chromium with apt-get");
                if checked("apt-get install chromium", &apt(&["install", "chromium"]), APT_DEADLINE)
                    .is_ok()
                {
                    return Ok(());
                }
                // A fresh machine's package lists may be missing or stale.
                checked("apt-get update", &apt(&["update"]), APT_DEADLINE)?;
                checked("apt-get install chromium", &apt(&["install", "chromium"]), APT_DEADLINE)
            },
        );
        if let Err(e) = installed {
            panic!("{e}");
        }
    });
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
    chromium();
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
        "run-live-output",
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
    tokio::task::spawn_blocking(chromium)
        .await
        .expect("installing Chromium");
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
