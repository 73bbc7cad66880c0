//! The isolation layer on the host: namespaces, the init, killing a whole
//! process tree, the guest skeleton.

use super::*;
use crate::standin::host::pids_with;

#[test]
fn read_capped_keeps_exactly_the_cap() {
    let data = vec![b'x'; OUTPUT_CAP + 12345];
    let kept = read_capped(std::io::Cursor::new(data));
    assert_eq!(kept.len(), OUTPUT_CAP);
}

#[test]
fn parent_of_self_is_our_parent() {
    let me = std::process::id() as libc::pid_t;
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    assert_eq!(parent_of(me), Some(ppid));
}

fn sh(script: &str) -> ExecSpec {
    ExecSpec {
        program: "/bin/sh".into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        workdir: "/".into(),
        stdin: Vec::new(),
        network: true,
    }
}

#[tokio::test]
async fn probe_passes_on_this_host() {
    let iso = Isolation::new().expect("isolation");
    assert_eq!(iso.probe().await, Ok(()));
}

#[tokio::test]
async fn files_persist_per_scratch_and_stay_private() {
    let iso = Isolation::new().expect("isolation");
    let a = iso.scratch("python", Uuid::new_v4()).expect("scratch a");
    let b = iso.scratch("python", Uuid::new_v4()).expect("scratch b");
    let write = "mkdir -p /node_modules/x /newdir && echo 1 > /tmp/f && echo 2 > /node_modules/x/y && echo 3 > /newdir/z";
    let o = iso
        .spawn(&a, &sh(write))
        .await
        .expect("spawn")
        .outcome()
        .await;
    assert_eq!(
        o.exit,
        ExitKind::Code(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let read = "cat /tmp/f /node_modules/x/y /newdir/z";
    let o = iso
        .spawn(&a, &sh(read))
        .await
        .expect("spawn")
        .outcome()
        .await;
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n2\n3\n");
    let o = iso
        .spawn(&b, &sh(read))
        .await
        .expect("spawn")
        .outcome()
        .await;
    assert_eq!(o.exit, ExitKind::Code(1));
    assert!(o.stdout.is_empty());
    let _ = a.remove();
    let _ = b.remove();
}

#[tokio::test]
async fn signals_map_to_128_plus_and_background_jobs_die_with_the_exec() {
    let iso = Isolation::new().expect("isolation");
    let s = iso.scratch("python", Uuid::new_v4()).expect("scratch");
    let o = iso
        .spawn(&s, &sh("kill -9 $$"))
        .await
        .expect("spawn")
        .outcome()
        .await;
    assert_eq!(o.exit, ExitKind::Code(137));
    let marker = format!(
        "{}.{}",
        4000 + rand::random::<u16>() % 1000,
        rand::random::<u32>()
    );
    let o = iso
        .spawn(&s, &sh(&format!("sleep {marker} & echo started")))
        .await
        .expect("spawn")
        .outcome()
        .await;
    assert_eq!(o.exit, ExitKind::Code(0));
    assert!(
        pids_with(&marker).is_empty(),
        "background job survived its exec"
    );
    let _ = s.remove();
}

#[tokio::test]
async fn kill_and_wait_leaves_no_process() {
    let iso = Isolation::new().expect("isolation");
    let s = iso.scratch("python", Uuid::new_v4()).expect("scratch");
    let marker = format!(
        "{}.{}",
        5000 + rand::random::<u16>() % 1000,
        rand::random::<u32>()
    );
    let script = format!("sh -c 'sleep {marker}' & sleep {marker}; echo never");
    let running = iso.spawn(&s, &sh(&script)).await.expect("spawn");
    let handle = running.handle.clone();
    assert!(
        crate::standin::wait::until(Duration::from_secs(10), || async {
            pids_with(&marker).len() >= 2
        })
        .await
    );
    assert!(handle.kill_and_wait(Duration::from_secs(5)).await);
    assert_eq!(pids_with(&marker), Vec::<String>::new());
    let o = running.outcome().await;
    assert!(o.stdout.is_empty());
    let _ = s.remove();
}

#[test]
fn layout_requires_usr_and_etc() {
    let layout = HostLayout::detect().expect("this host has /usr and /etc");
    assert!(layout.lowered.iter().any(|n| n == "usr"));
    assert!(layout.lowered.iter().any(|n| n == "etc"));
}
