//! The isolation layer on the host: a sandbox's namespaces and init, its
//! execs' process groups, what outlives an exec, the shared image layer
//! seen from long-lived mounts, the guest skeleton.

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
    }
}

fn marker(base: u16) -> String {
    format!(
        "{}.{}",
        base + rand::random::<u16>() % 1000,
        rand::random::<u32>()
    )
}

async fn run(vm: &GuestVm, script: &str) -> Outcome {
    vm.spawn(&sh(script)).expect("spawn").outcome().await
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
    let (va, vb) = (
        iso.boot(&a, false, None).await.expect("boot a"),
        iso.boot(&b, false, None).await.expect("boot b"),
    );
    let write = "mkdir -p /node_modules/x /newdir && echo 1 > /tmp/f && echo 2 > /node_modules/x/y && echo 3 > /newdir/z";
    let o = run(&va, write).await;
    assert_eq!(
        o.exit,
        ExitKind::Code(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let read = "cat /tmp/f /node_modules/x/y /newdir/z";
    let o = run(&va, read).await;
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n2\n3\n");
    let o = run(&vb, read).await;
    assert_eq!(o.exit, ExitKind::Code(1));
    assert!(o.stdout.is_empty());
    assert!(va.kill_and_wait(Duration::from_secs(5)).await);
    assert!(vb.kill_and_wait(Duration::from_secs(5)).await);
    let _ = a.remove();
    let _ = b.remove();
}

/// As on the daemon: the exec's own process group is its own; what it
/// leaves running in the background lives on in the sandbox (the next exec
/// sees it) until the sandbox stops.
#[tokio::test]
async fn signals_map_to_128_plus_and_background_jobs_live_until_the_sandbox_stops() {
    let iso = Isolation::new().expect("isolation");
    let s = iso.scratch("python", Uuid::new_v4()).expect("scratch");
    let vm = iso.boot(&s, false, None).await.expect("boot");
    let o = run(&vm, "kill -9 $$").await;
    assert_eq!(o.exit, ExitKind::Code(137));
    let (m1, m2) = (marker(4000), marker(4000));
    let o = run(
        &vm,
        &format!("sleep {m1} >/dev/null 2>&1 & setsid sleep {m2} >/dev/null 2>&1 & echo started; echo $$ $(cut -d' ' -f5 /proc/self/stat)"),
    )
    .await;
    assert_eq!(o.exit, ExitKind::Code(0));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let ids: Vec<&str> = out.lines().nth(1).unwrap_or_default().split(' ').collect();
    assert_eq!(ids.len(), 2, "{out}");
    assert_eq!(
        ids[0], ids[1],
        "the exec leads its own process group: {out}"
    );
    assert_eq!(
        pids_with(&m1).len(),
        1,
        "a background job outlives its exec"
    );
    assert_eq!(pids_with(&m2).len(), 1, "a setsid job outlives its exec");
    let o = run(&vm, &format!("grep -l {m1} /proc/[0-9]*/cmdline")).await;
    assert!(!o.stdout.is_empty(), "the next exec sees it");
    assert!(vm.kill_and_wait(Duration::from_secs(5)).await);
    assert!(pids_with(&m1).is_empty() && pids_with(&m2).is_empty());
    let _ = s.remove();
}

/// The deadline's kill: the exec's process group, to its last process, and
/// nothing that left the group.
#[tokio::test]
async fn kill_and_wait_kills_the_exec_group_only() {
    let iso = Isolation::new().expect("isolation");
    let s = iso.scratch("python", Uuid::new_v4()).expect("scratch");
    let vm = iso.boot(&s, false, None).await.expect("boot");
    let (m, away) = (marker(5000), marker(5000));
    let script =
        format!("setsid sleep {away} >/dev/null 2>&1 & sh -c 'sleep {m}' & sleep {m}; echo never");
    let running = vm.spawn(&sh(&script)).expect("spawn");
    let handle = running.handle.clone();
    assert!(
        crate::standin::wait::until(Duration::from_secs(10), || async {
            pids_with(&m).len() >= 3 && !pids_with(&away).is_empty()
        })
        .await
    );
    assert!(handle.kill_and_wait(Duration::from_secs(5)).await);
    assert_eq!(pids_with(&m), Vec::<String>::new());
    assert_eq!(pids_with(&away).len(), 1, "setsid left the group");
    let o = running.outcome().await;
    assert!(o.stdout.is_empty());
    assert!(vm.kill_and_wait(Duration::from_secs(5)).await);
    assert!(pids_with(&away).is_empty(), "stop kills everything");
    let _ = s.remove();
}

/// One sandbox's long-lived overlays still see what another sandbox's exec
/// or a host-side write put into the shared image layer after they had
/// looked the directory up.
#[tokio::test]
async fn image_writes_reach_a_sandbox_that_looked_before() {
    let iso = Isolation::new().expect("isolation");
    let a = iso.scratch("python", Uuid::new_v4()).expect("scratch a");
    let b = iso.scratch("python", Uuid::new_v4()).expect("scratch b");
    let (va, vb) = (
        iso.boot(&a, false, None).await.expect("boot a"),
        iso.boot(&b, false, None).await.expect("boot b"),
    );
    let tag = Uuid::new_v4().simple().to_string();
    let probe = format!("ls /usr/share/scr-{tag}; ls /usr/lib/scr-{tag}; cat /usr/share/scr-{tag}/f /usr/lib/scr-{tag}");
    let o = run(&vb, &probe).await;
    assert_ne!(o.exit, ExitKind::Code(0), "nothing there yet");
    let o = run(
        &va,
        &format!("mkdir /usr/share/scr-{tag} && echo a > /usr/share/scr-{tag}/f"),
    )
    .await;
    assert_eq!(o.exit, ExitKind::Code(0));
    let layer = a.view().shared_layer();
    let (dir, _) = layer.split(Path::new("/usr/lib")).expect("in the layer");
    std::fs::create_dir_all(dir.upper.join("lib")).expect("upper lib");
    std::fs::write(dir.upper.join(format!("lib/scr-{tag}")), "host\n").expect("host write");
    let o = run(
        &vb,
        &format!("cat /usr/share/scr-{tag}/f /usr/lib/scr-{tag}"),
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&o.stdout), "a\nhost\n", "{o:?}");
    assert!(va.kill_and_wait(Duration::from_secs(5)).await);
    assert!(vb.kill_and_wait(Duration::from_secs(5)).await);
    let _ = a.remove();
    let _ = b.remove();
    iso.discard_state();
}

#[test]
fn layout_requires_usr_and_etc() {
    let layout = HostLayout::detect().expect("this host has /usr and /etc");
    assert!(layout.lowered.iter().any(|n| n == "usr"));
    assert!(layout.lowered.iter().any(|n| n == "etc"));
}

/// As in the daemon's VMs, guest root can become the preset image's user
/// (uid 1000, no way back), who cannot write the shared image but can use
/// the sandbox's private /tmp and /dev/shm; guest root still writes the
/// image. Host-side, the user's files belong to the id block, not to any
/// host account.
#[tokio::test]
async fn guest_root_becomes_the_images_user_who_cannot_write_the_image() {
    let iso = Isolation::new().expect("isolation");
    iso.probe().await.expect("probe");
    if let Some(why) = super::super::users::unmodelled() {
        eprintln!("skipped: {why}");
        return;
    }
    let s = iso.scratch("python", Uuid::new_v4()).expect("scratch");
    let vm = iso.boot(&s, false, None).await.expect("boot");
    let tag = Uuid::new_v4().simple().to_string();
    let script = format!(
        r#"import os
open('/usr/share/scr-root-{tag}', 'w').write('r')
os.setgroups([]); os.setgid(100); os.setuid(1000)
print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
for p in ['/usr/share/scr-user-{tag}', '/etc/scr-user-{tag}', '/usr/lib/python3/dist-packages/scr-{tag}.pth']:
    try:
        open(p, 'w')
        print('wrote', p)
    except PermissionError:
        print('denied')
open('/tmp/scr-user-{tag}', 'w').write('u')
open('/dev/shm/scr-user-{tag}', 'w').write('u')
try:
    os.setuid(0)
    print('root again')
except PermissionError:
    print('stays')
"#
    );
    let spec = ExecSpec {
        program: "/usr/bin/python3".into(),
        argv: vec!["python3".into(), "-c".into(), script],
        ..sh("")
    };
    let o = vm.spawn(&spec).expect("spawn").outcome().await;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "1000 1000 100 []\ndenied\ndenied\ndenied\nstays\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    use std::os::unix::fs::MetadataExt;
    let mine = std::fs::metadata(s.path().join(format!("tmp/scr-user-{tag}"))).expect("written");
    assert_eq!(mine.uid(), super::super::users::HOST_ID_BASE + 1000);
    let o = run(&vm, &format!("cat /usr/share/scr-root-{tag}")).await;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "r",
        "guest root wrote the image"
    );
    assert!(vm.kill_and_wait(Duration::from_secs(5)).await);
    let _ = s.remove();
    iso.discard_state();
}

/// As in a VM, guest root may make its own view of the image read-only
/// (the worker's seal does): every later exec, an image overlay refreshed
/// after another sandbox wrote the image, and `fs::write` (the daemon's
/// in-VM file ops) all find it so; the private tree stays writable.
#[tokio::test]
async fn a_sandbox_that_seals_its_image_view_keeps_it_sealed() {
    let iso = Isolation::new().expect("isolation");
    let (a, b) = (
        iso.scratch("python", Uuid::new_v4()).expect("scratch a"),
        iso.scratch("python", Uuid::new_v4()).expect("scratch b"),
    );
    let va = iso.boot(&a, false, None).await.expect("boot a");
    let vb = iso.boot(&b, false, None).await.expect("boot b");
    let seal = "set -e; while read -r _ _ _ _ mp opts _; do case $mp in /usr|/home|/var) \
                mount -o \"remount,bind,ro${opts#rw}\" \"$mp\";; esac; done < /proc/self/mountinfo";
    let o = run(&va, seal).await;
    assert_eq!(
        o.exit,
        ExitKind::Code(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let tag = marker(100);
    // Another sandbox of the image writes /usr: a's next exec gets a
    // fresh overlay of it, which must stay read-only.
    let o = run(
        &vb,
        &format!("mkdir -p /usr/share/scr && echo {tag} > /usr/share/scr/{tag}"),
    )
    .await;
    assert_eq!(
        o.exit,
        ExitKind::Code(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let probe = format!(
        "cat /usr/share/scr/{tag}; for d in /usr/share/scr /home /var; do touch $d/{tag}.a 2>/dev/null && echo wrote $d; done; \
         touch /tmp/{tag} /new-{tag} && echo private ok"
    );
    let o = run(&va, &probe).await;
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{tag}\nprivate ok\n"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let refused =
        super::super::fs_ops::write_file(a.view(), &format!("/home/{tag}"), "0644", false, b"x");
    let e = refused.expect_err("fs::write into a read-only /home");
    assert!(e.to_string().contains("Read-only file system"), "{e}");
    assert_eq!(e.code().as_str(), "S216", "{e}");
    assert!(super::super::fs_ops::write_file(
        b.view(),
        &format!("/home/{tag}"),
        "0644",
        false,
        b"x"
    )
    .is_ok());
    assert!(va.kill_and_wait(Duration::from_secs(5)).await);
    assert!(vb.kill_and_wait(Duration::from_secs(5)).await);
    let _ = a.remove();
    let _ = b.remove();
}
