//! Installing what a test needs (a browser, an npm tree, a venv) once,
//! whichever test process asks first.
//!
//! nextest runs every test in a process of its own, so two tests may find
//! the same thing missing at the same moment; two `apt-get install`s then
//! fight over dpkg's lock and one fails, two `npm ci`s into one directory
//! tear each other's tree. [`install_once`] looks, takes an exclusive
//! `flock` on a lock file (under the target directory), looks again under
//! the lock, and only then installs: a caller that waited finds what the
//! other installed and leaves it be. The kernel releases the lock when its
//! holder dies, so a crashed install never leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// What [`install_once`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// It was there, at once or once another process had installed it.
    Present,
    /// This call ran the installer.
    ByThisCall,
}

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("installing {what} failed: {why}")]
    Installer { what: String, why: String },
    #[error("the installer of {what} succeeded, but {what} is still missing")]
    StillMissing { what: String },
}

/// Makes sure `what` is there: `present` says whether it is, `install`
/// installs it. The installer runs at most once at a time across every
/// process that names the same `lock` file, and only when `present` still
/// says no under that lock. Blocks while another process installs: its
/// installer's own deadline bounds the wait.
pub fn install_once(
    what: &str,
    lock: &Path,
    present: impl Fn() -> bool,
    install: impl FnOnce() -> Result<(), String>,
) -> Result<Installed, InstallError> {
    if present() {
        return Ok(Installed::Present);
    }
    let _held = exclusive(lock, what)?;
    if present() {
        return Ok(Installed::Present);
    }
    install().map_err(|why| InstallError::Installer {
        what: what.to_string(),
        why,
    })?;
    if !present() {
        return Err(InstallError::StillMissing {
            what: what.to_string(),
        });
    }
    Ok(Installed::ByThisCall)
}

/// An exclusive `flock` on `path` (created with its directory), held until
/// the file is dropped. Says so when another process holds it.
pub fn exclusive(path: &Path, what: &str) -> Result<File, InstallError> {
    let failed = |source| InstallError::Lock {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(failed)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            eprintln!(
                "waiting for another process installing {what} (it holds {})",
                path.display()
            );
            file.lock().map_err(failed)?;
        }
        Err(TryLockError::Error(e)) => return Err(failed(e)),
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standin::wait::until_blocking;
    use std::cell::Cell;
    use std::os::unix::fs::MetadataExt;
    use std::process::Command;
    use std::sync::Barrier;
    use std::time::Duration;

    /// Whether some process waits, blocked, for a `flock` on `path`'s inode
    /// (`/proc/locks` lists a blocked request after `->`).
    fn someone_waits_on(path: &Path) -> bool {
        let Ok(ino) = std::fs::metadata(path).map(|m| m.ino().to_string()) else {
            return false;
        };
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        // `7: -> FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF`
        locks.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&"->")
                && f.get(2) == Some(&"FLOCK")
                && f.get(6).and_then(|d| d.rsplit(':').next()) == Some(ino.as_str())
        })
    }

    /// A directory of this test's own under the temp dir (not created).
    fn scratch() -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "scr-install-once-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ))
    }

    /// Two callers find the tool missing at the same moment; one installs it
    /// while the other waits on the lock, and the other then finds it there.
    /// The fake installer appends one line per run to a log. Each caller
    /// opens the lock file itself, and `flock` locks belong to an open file,
    /// so two threads race exactly as two test processes do.
    #[test]
    fn two_concurrent_callers_run_the_installer_once() {
        let dir = scratch();
        std::fs::create_dir_all(&dir).unwrap();
        let lock = dir.join("tool.lock");
        let tool = dir.join("tool");
        let log = dir.join("installer-runs");
        let both_looked = Barrier::new(2);

        let call = || {
            let first_look = Cell::new(true);
            install_once(
                "the fake tool",
                &lock,
                || {
                    let there = tool.exists();
                    if first_look.replace(false) {
                        // Neither caller takes the lock before both have
                        // found the tool missing.
                        both_looked.wait();
                    }
                    there
                },
                || {
                    // Install only once the other caller is blocked on the
                    // lock: without a lock, or with a second install, this
                    // never happens and the test fails.
                    if !until_blocking(Duration::from_secs(20), Duration::from_millis(5), || {
                        someone_waits_on(&lock)
                    }) {
                        return Err("the other caller never waited on the lock".into());
                    }
                    let status = Command::new("sh")
                        .args(["-c", "echo ran >> \"$1\" && touch \"$2\"", "sh"])
                        .arg(&log)
                        .arg(&tool)
                        .status()
                        .map_err(|e| e.to_string())?;
                    status
                        .success()
                        .then_some(())
                        .ok_or_else(|| format!("the fake installer exited {status}"))
                },
            )
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(call);
            let b = s.spawn(call);
            (a.join().unwrap(), b.join().unwrap())
        });
        let runs = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let mut outcomes = [a.expect("first caller"), b.expect("second caller")];
        outcomes.sort_by_key(|o| *o == Installed::Present);
        assert_eq!(outcomes, [Installed::ByThisCall, Installed::Present]);
        assert_eq!(runs.lines().count(), 1, "installer runs: {runs:?}");
    }

    #[test]
    fn an_installer_that_installs_nothing_is_an_error_and_a_present_tool_is_left_be() {
        let dir = scratch();
        let lock = dir.join("tool.lock");
        let nothing = install_once("the fake tool", &lock, || false, || Ok(()));
        assert!(
            matches!(nothing, Err(InstallError::StillMissing { .. })),
            "{nothing:?}"
        );
        let failing = install_once("the fake tool", &lock, || false, || Err("exit 100".into()));
        assert!(
            failing
                .as_ref()
                .is_err_and(|e| e.to_string().contains("exit 100")),
            "{failing:?}"
        );
        let there = install_once(
            "the fake tool",
            &lock,
            || true,
            || panic!("must not install"),
        );
        assert_eq!(there.unwrap(), Installed::Present);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
