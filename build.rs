//! Bundles the npm `iii-sdk` (pinned in guest/node/sdk/) into one ES module,
//! `$OUT_DIR/iii-sdk.mjs`, which the worker embeds with `include_str!` and
//! plants in node runtimes at /node_modules/iii-sdk/dist/index.mjs.
//!
//! npm and esbuild run only when the pinned inputs change: the bundle is cached
//! under `<target>/guest-npm/<key>/`, keyed by a hash of package.json,
//! package-lock.json and the esbuild recipe below. A build with no npm at all
//! can point `SCR_III_SDK_BUNDLE` at a prebuilt bundle.
//!
//! It also builds the console cards (ui/) into `$OUT_DIR/ui-cards.js` and
//! `$OUT_DIR/ui-cards.css`, which src/ui.rs embeds, by the same rules: pinned
//! ui/package.json + ui/package-lock.json, `npm ci` into a cache under
//! `<target>/ui-npm/`, and `node ui/build.mjs` (the one esbuild recipe) only
//! when ui/src, the recipe or the pins change. `SCR_UI_DIST=<dir holding
//! cards.js and cards.css>` uses prebuilt assets instead.

use std::collections::hash_map::DefaultHasher;
use std::env;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

const SDK_DIR: &str = "guest/node/sdk";
const ENTRY: &str = "node_modules/iii-sdk/dist/index.mjs";
/// The bundled `ws` calls `require` for Node built-ins, which an ES module
/// lacks, so the banner defines one. It also gives the bundle its own
/// `console` writing to stderr with `debug` muted: the SDK's `[iii] …` and
/// `[OTel] …` chatter then never reaches a guest's stdout, while the user's
/// own global console is left untouched.
const BANNER: &str = concat!(
    r#"import{createRequire as __scrCreateRequire}from"node:module";"#,
    r#"import{Console as __scrConsole}from"node:console";"#,
    r#"const require=__scrCreateRequire(import.meta.url);"#,
    r#"const console=new __scrConsole({stdout:process.stderr,stderr:process.stderr});"#,
    r#"console.debug=()=>{};"#,
);
const ESBUILD_ARGS: &[&str] = &[
    "--bundle",
    "--platform=node",
    "--format=esm",
    "--minify",
    // Errors users see (InvocationError…) keep their class names.
    "--keep-names",
    // Node prints the whole source line of an uncaught error's origin; without
    // a limit, one minified line is most of the bundle.
    "--line-limit=160",
    "--log-level=warning",
];

fn main() {
    build_ui_assets();
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let out = out_dir.join("iii-sdk.mjs");
    let sdk = manifest.join(SDK_DIR);
    for f in ["package.json", "package-lock.json"] {
        println!("cargo:rerun-if-changed={SDK_DIR}/{f}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SCR_III_SDK_BUNDLE");

    if let Some(prebuilt) = env::var_os("SCR_III_SDK_BUNDLE") {
        let prebuilt = PathBuf::from(prebuilt);
        println!("cargo:rerun-if-changed={}", prebuilt.display());
        copy(&prebuilt, &out);
        return;
    }

    let package_json = read(&sdk.join("package.json"));
    let lock = read(&sdk.join("package-lock.json"));
    let mut h = DefaultHasher::new();
    (&package_json, &lock, BANNER, ESBUILD_ARGS).hash(&mut h);
    let cache_root = target_dir(&out_dir).join("guest-npm");
    let cached = cache_root
        .join(format!("{:016x}", h.finish()))
        .join("iii-sdk.mjs");
    if !cached.is_file() {
        build_bundle(&cache_root, &package_json, &lock, &cached);
    }
    copy(&cached, &out);
}

/// `npm ci` + esbuild in a private work dir, then an atomic rename into the
/// cache, so concurrent builds sharing a target dir never see half a bundle.
fn build_bundle(cache_root: &Path, package_json: &[u8], lock: &[u8], cached: &Path) {
    let work = work_dir(cache_root);
    let _cleanup = RemoveOnDrop(work.clone()); // also on a panic below
    npm_ci(&work, package_json, lock, &[], &GUEST_SDK);
    let bundle = work.join("iii-sdk.mjs");
    run(
        Command::new(work.join("node_modules/.bin/esbuild"))
            .arg(ENTRY)
            .args(ESBUILD_ARGS)
            .arg(format!("--banner:js={BANNER}"))
            .arg(format!("--outfile={}", bundle.display()))
            .current_dir(&work),
        "esbuild",
        &GUEST_SDK,
    );
    let text = fs::read_to_string(&bundle).unwrap_or_default();
    assert!(
        text.contains("registerWorker"),
        "build.rs: esbuild produced no usable iii-sdk bundle at {}",
        bundle.display()
    );
    // Bundles of older inputs are dead weight; keep only this one.
    for entry in fs::read_dir(cache_root).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("work-") {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    fs::create_dir_all(cached.parent().unwrap()).unwrap();
    fs::rename(&bundle, cached).unwrap_or_else(|e| {
        panic!(
            "build.rs: cannot move the bundle into {}: {e}",
            cached.display()
        )
    });
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What a build step serves, to name it when it fails.
struct Step {
    doing: &'static str,
    prebuilt: &'static str,
}

const GUEST_SDK: Step = Step {
    doing: "bundling the guest iii-sdk",
    prebuilt: "SCR_III_SDK_BUNDLE=<path to a prebuilt iii-sdk.mjs>",
};

const UI: Step = Step {
    doing: "building the console UI (ui/)",
    prebuilt: "SCR_UI_DIST=<dir holding prebuilt cards.js, cards.css and page.js>",
};

fn run(cmd: &mut Command, what: &str, step: &Step) {
    let Step { doing, prebuilt } = step;
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("build.rs: {what} failed ({s}) while {doing}; see the output above"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "build.rs: `{}` not found: {doing} needs Node.js and npm on PATH \
             (e.g. `apt-get install nodejs npm`), or {prebuilt}",
            cmd.get_program().to_string_lossy()
        ),
        Err(e) => panic!("build.rs: cannot run {what}: {e}"),
    }
}

/// `npm ci` of a pinned manifest in `work`. --ignore-scripts: nothing here
/// needs an install script (esbuild finds its platform binary through its
/// optional dependency).
fn npm_ci(work: &Path, package_json: &[u8], lock: &[u8], extra: &[&str], step: &Step) {
    fs::write(work.join("package.json"), package_json).unwrap();
    fs::write(work.join("package-lock.json"), lock).unwrap();
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    run(
        Command::new(npm)
            .arg("ci")
            .args(extra)
            .args([
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--loglevel=error",
            ])
            .env("NPM_CONFIG_UPDATE_NOTIFIER", "false")
            .current_dir(work),
        "npm ci",
        step,
    );
}

/// Cargo marks its target dir with CACHEDIR.TAG; sharing the cache there lets
/// every profile and a fresh OUT_DIR reuse one npm run.
fn target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|p| p.join("CACHEDIR.TAG").is_file())
        .unwrap_or(out_dir)
        .to_path_buf()
}

fn read(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap_or_else(|e| panic!("build.rs: cannot read {}: {e}", p.display()))
}

fn copy(from: &Path, to: &Path) {
    fs::copy(from, to).unwrap_or_else(|e| {
        panic!(
            "build.rs: cannot copy {} to {}: {e}",
            from.display(),
            to.display()
        )
    });
}

// ─── console UI assets ──────────────────────────────────────────────────────

const UI_DIR: &str = "ui";
/// The inputs of the UI build besides ui/src/**.
const UI_INPUTS: &[&str] = &["package.json", "package-lock.json", "build.mjs"];
/// The files ui/build.mjs produces, each embedded as `$OUT_DIR/ui-<name>`.
const UI_ASSETS: &[&str] = &["cards.js", "cards.css", "page.js"];
/// What the bundle must contain to be the cards: the renderer ids it
/// registers (`sandbox-code-runner/cards.js#run`, …).
const UI_MARKER: &str = "/cards.js#";

fn build_ui_assets() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let ui = manifest.join(UI_DIR);
    for f in UI_INPUTS {
        println!("cargo:rerun-if-changed={UI_DIR}/{f}");
    }
    println!("cargo:rerun-if-changed={UI_DIR}/src");
    println!("cargo:rerun-if-env-changed=SCR_UI_DIST");

    if let Some(prebuilt) = env::var_os("SCR_UI_DIST") {
        let prebuilt = PathBuf::from(prebuilt);
        for f in UI_ASSETS {
            println!("cargo:rerun-if-changed={}", prebuilt.join(f).display());
            copy(&prebuilt.join(f), &out_dir.join(format!("ui-{f}")));
        }
        return;
    }

    let package_json = read(&ui.join("package.json"));
    let lock = read(&ui.join("package-lock.json"));
    let mut deps_hash = DefaultHasher::new();
    (&package_json, &lock).hash(&mut deps_hash);
    let mut h = DefaultHasher::new();
    for f in UI_INPUTS {
        (f, read(&ui.join(f))).hash(&mut h);
    }
    for (rel, bytes) in tree_files(&ui.join("src")) {
        (rel, bytes).hash(&mut h);
    }
    let cache_root = target_dir(&out_dir).join("ui-npm");
    let deps = cache_root.join(format!("deps-{:016x}", deps_hash.finish()));
    let assets = cache_root.join(format!("assets-{:016x}", h.finish()));
    if !UI_ASSETS.iter().all(|f| assets.join(f).is_file()) {
        if !deps.join("node_modules").is_dir() {
            install_ui_deps(&cache_root, &package_json, &lock, &deps);
        }
        build_ui(&cache_root, &ui, &deps, &assets);
        // Outputs and installs of older inputs are dead weight.
        for entry in fs::read_dir(&cache_root).into_iter().flatten().flatten() {
            let p = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = (name.starts_with("assets-") && p != assets)
                || (name.starts_with("deps-") && p != deps);
            if stale {
                let _ = fs::remove_dir_all(p);
            }
        }
    }
    for f in UI_ASSETS {
        copy(&assets.join(f), &out_dir.join(format!("ui-{f}")));
    }
}

/// Every file under `dir` as (path relative to it, bytes), sorted by path.
fn tree_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("build.rs: cannot list {}: {e}", d.display()));
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, read(&p)));
            }
        }
    }
    out.sort();
    out
}

/// `npm ci --omit=dev` (esbuild only) in a private dir, renamed into place.
fn install_ui_deps(cache_root: &Path, package_json: &[u8], lock: &[u8], deps: &Path) {
    let work = work_dir(cache_root);
    let _cleanup = RemoveOnDrop(work.clone());
    npm_ci(&work, package_json, lock, &["--omit=dev"], &UI);
    // A concurrent build may have won the race: its install is as good.
    if fs::rename(&work, deps).is_err() && !deps.join("node_modules").is_dir() {
        panic!(
            "build.rs: cannot move the UI's npm install into {}",
            deps.display()
        );
    }
}

/// `node ui/build.mjs` into a private dir, checked, renamed into place.
fn build_ui(cache_root: &Path, ui: &Path, deps: &Path, assets: &Path) {
    let work = work_dir(cache_root);
    let _cleanup = RemoveOnDrop(work.clone());
    run(
        Command::new("node")
            .arg(ui.join("build.mjs"))
            .arg(format!("--outdir={}", work.display()))
            .arg(format!("--modules={}", deps.display()))
            .current_dir(ui),
        "node ui/build.mjs",
        &UI,
    );
    let js = fs::read_to_string(work.join("cards.js")).unwrap_or_default();
    let css = fs::read_to_string(work.join("cards.css")).unwrap_or_default();
    let page = fs::read_to_string(work.join("page.js")).unwrap_or_default();
    assert!(
        js.contains(UI_MARKER)
            && js.contains("export")
            && css.contains("data-iii-ui")
            && page.contains("list_runtimes"),
        "build.rs: ui/build.mjs produced no usable cards.js / cards.css in {}",
        work.display()
    );
    if fs::rename(&work, assets).is_err() && !assets.join("cards.js").is_file() {
        panic!(
            "build.rs: cannot move the UI assets into {}",
            assets.display()
        );
    }
}

fn work_dir(cache_root: &Path) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let work = cache_root.join(format!("work-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&work)
        .unwrap_or_else(|e| panic!("build.rs: cannot create {}: {e}", work.display()));
    work
}
