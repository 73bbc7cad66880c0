//! TCP_NODELAY on this process's sockets to the engine. The SDK turns Nagle
//! off only when the engine advertises `x-iii-capabilities: tcp-nodelay`,
//! which the engine this worker is measured against (0.23.0-rc.4) does not.
//! With Nagle on, the worker's second small frame in a row (a call's
//! answer, then the next queued call's `sandbox::exec`) waits for the
//! engine's delayed ACK: ~45 ms between every two calls of a busy function,
//! measured on 64 callers of one runtime (4.5 ms with it off).

use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

/// How often the sockets are looked at again: the SDK reconnects on its
/// own, and opens data-channel sockets, without telling anyone.
const RECHECK: Duration = Duration::from_secs(1);

/// The addresses `url` (`ws://host:port/…`) resolves to.
pub fn engine_addrs(url: &str) -> BTreeSet<SocketAddr> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:49134")
    };
    with_port
        .to_socket_addrs()
        .map(|a| a.collect())
        .unwrap_or_default()
}

/// Sets TCP_NODELAY on every TCP socket of this process connected to one of
/// `peers` that lacks it; answers how many it set.
pub fn apply(peers: &BTreeSet<SocketAddr>) -> usize {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut set = 0;
    for entry in fds.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: only socket options are read and set on it. If another
        // thread closes (and reuses) the fd meanwhile, the calls fail with
        // EBADF or reach another socket, which the peer check then skips.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&fd);
        let to_engine = sock
            .peer_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .is_some_and(|a| peers.contains(&a));
        if to_engine && sock.tcp_nodelay().is_ok_and(|on| !on) && sock.set_tcp_nodelay(true).is_ok()
        {
            set += 1;
        }
    }
    set
}

/// Keeps Nagle off on this process's engine sockets for as long as the
/// runtime runs.
pub fn keep_off(url: &str) {
    let peers = engine_addrs(url);
    if peers.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RECHECK);
        loop {
            tick.tick().await;
            let set = apply(&peers);
            if set > 0 {
                tracing::debug!(sockets = set, "TCP_NODELAY set on engine sockets");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nagle_goes_off_on_sockets_to_the_engine_only() {
        let engine = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to_engine = std::net::TcpStream::connect(engine.local_addr().unwrap()).unwrap();
        let to_other = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!to_engine.nodelay().unwrap() && !to_other.nodelay().unwrap());
        let peers = engine_addrs(&format!("ws://{}/", engine.local_addr().unwrap()));
        assert!(apply(&peers) >= 1);
        assert!(to_engine.nodelay().unwrap(), "the engine socket");
        assert!(
            !to_other.nodelay().unwrap(),
            "any other socket is left alone"
        );
        assert_eq!(apply(&peers), 0, "nothing left to set");
    }

    #[test]
    fn engine_urls_resolve_with_the_default_port() {
        let a = engine_addrs("ws://127.0.0.2:40123?token=x");
        assert_eq!(a.into_iter().map(|a| a.port()).collect::<Vec<_>>(), [40123]);
        let d = engine_addrs("ws://127.0.0.1");
        assert_eq!(d.into_iter().map(|a| a.port()).collect::<Vec<_>>(), [49134]);
    }
}
