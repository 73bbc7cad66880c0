//! The image seal: before any code runs in a VM, every mount the VM does
//! not own becomes read-only (`guest/seal.sh` decides which, by mount
//! point). The daemon boots every VM of an image from one shared rootfs, so
//! without it a file guest code writes in the image user's home or
//! `/var/tmp` would be seen by the next tenant's VM.
//!
//! The seal travels in front of the VM's execs (`sh -c <seal> scr-seal
//! <argv>`, which then execs `<argv>` in place) until one of them came back
//! from a sealed VM, so it costs no sandbox call: a pooled VM is sealed by
//! its warm-up exec, off every caller's path. Every exec goes through a
//! [`VmLease`](crate::runtime), which applies it; nothing else can reach
//! the daemon's `exec`.

use crate::sandbox::{ExecOutput, ExecParams};

/// The seal script, sent inline.
const SEAL: &str = include_str!("../guest/seal.sh");

/// The `$0` a sealed exec's shell gets: how a sealed argv is told apart.
const TAG: &str = "scr-seal";

/// The exit status of an exec the seal stopped: a mount stayed writable,
/// so nothing ran.
pub const REFUSED: i32 = 125;

/// `p` run behind the seal.
pub(crate) fn sealed(mut p: ExecParams) -> ExecParams {
    let mut argv = Vec::with_capacity(p.argv.len() + 4);
    argv.extend(["sh", "-c", SEAL, TAG].map(String::from));
    argv.append(&mut p.argv);
    p.argv = argv;
    p
}

/// How the seal's refusal begins on stderr (`guest/seal.sh`).
const REFUSAL: &str = "sandbox-code-runner: cannot make the image read-only at";

/// Whether a sealed exec's answer shows the VM sealed: the seal let its
/// command start (any exit but the seal's refusal).
pub(crate) fn took(out: &ExecOutput) -> bool {
    out.exit_code.is_some_and(|c| c != REFUSED)
}

/// The seal's refusal, when a sealed exec's answer is one: the mounts
/// that stayed writable, said by the seal itself (nothing ran). Guest code
/// that prints the same and exits 125 only turns its own run into this
/// error.
pub(crate) fn refusal(out: &ExecOutput) -> Option<String> {
    (out.exit_code == Some(REFUSED))
        .then(|| out.stderr.trim_end())
        .filter(|e| e.starts_with(REFUSAL))
        .map(|e| e.trim_start_matches("sandbox-code-runner: ").to_string())
}

/// What a sealed argv runs once the VM is sealed (`None` when `argv` is
/// not sealed): for fakes of the daemon that interpret argv themselves.
pub fn unsealed(argv: &[String]) -> Option<&[String]> {
    match argv {
        [sh, c, script, tag, rest @ ..]
            if sh == "sh" && c == "-c" && script == SEAL && tag == TAG =>
        {
            Some(rest)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_argv_runs_the_same_command_after_the_seal() {
        let p = ExecParams {
            argv: vec!["python3".into(), "-Ic".into(), "print(1)".into()],
            ..ExecParams::default()
        };
        let s = sealed(p.clone());
        assert_eq!(&s.argv[..2], ["sh", "-c"]);
        assert!(
            s.argv[2].ends_with("exec \"$@\"\n"),
            "the seal ends by running its command"
        );
        assert_eq!(unsealed(&s.argv), Some(&p.argv[..]));
        assert_eq!(unsealed(&p.argv), None);
        assert_eq!(s.env, p.env);
        assert_eq!(s.stdin, p.stdin);
    }

    #[test]
    fn the_refusal_is_one_exit_status_on_both_sides() {
        assert!(SEAL.contains(&format!("exit {REFUSED}\n")));
        assert!(SEAL.contains(&format!("printf '{REFUSAL}%s; no code ran")));
        assert!(SEAL.contains(TAG), "the script says how it is called");
    }

    #[test]
    fn a_refusal_is_read_off_the_seals_own_words() {
        let out = |code, stderr: &str| ExecOutput {
            exit_code: Some(code),
            stderr: stderr.into(),
            ..ExecOutput::default()
        };
        let said =
            "sandbox-code-runner: cannot make the image read-only at /usr /home; no code ran\n";
        assert_eq!(
            refusal(&out(125, said)).as_deref(),
            Some("cannot make the image read-only at /usr /home; no code ran")
        );
        assert_eq!(refusal(&out(1, said)), None, "any other exit ran");
        assert_eq!(refusal(&out(125, "Traceback ...")), None, "code's own 125");
    }

    #[test]
    fn only_an_exec_the_seal_let_start_counts_as_sealed() {
        let exited = |code| ExecOutput {
            exit_code: code,
            ..ExecOutput::default()
        };
        assert!(took(&exited(Some(0))));
        assert!(took(&exited(Some(1))));
        // 125: the seal's own refusal (guest/seal.sh); no code: killed.
        assert!(!took(&exited(Some(125))));
        assert!(!took(&exited(None)));
    }
}
