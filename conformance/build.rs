//! Builds `scr-guest-init` (`guest-init/main.rs`), the sandbox double's
//! per-sandbox init, with the same `rustc`, into `OUT_DIR`; the library
//! embeds it (`sandbox_double/isolation/vm.rs`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "guest-init/main.rs";
    println!("cargo:rerun-if-changed={src}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("scr-guest-init");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition=2021",
        "--crate-name=scr_guest_init",
        "--crate-type=bin",
        "-Copt-level=2",
        "-Cpanic=abort",
        "-Cstrip=symbols",
        "-Cdebuginfo=0",
    ]);
    if let (Ok(target), Ok(host)) = (std::env::var("TARGET"), std::env::var("HOST")) {
        if target != host {
            cmd.arg(format!("--target={target}"));
        }
    }
    cmd.arg("-o").arg(&out).arg(src);
    let status = cmd.status().expect("rustc runs");
    assert!(status.success(), "building {src} failed");
}
