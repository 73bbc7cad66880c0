//! The double's sandbox network models the daemon's gateway: a
//! `network:true` guest reaches the host's 127.0.0.1 (any port) at one
//! gateway address, and nothing else on the host's loopback; its own
//! 127.0.0.1 is its own; its default route leaves through the gateway.
//! Where the host has no slirp4netns the double cannot model that, and the
//! test says so and skips.

mod common;

use code_runner_conformance::standin::engine::StandInEngine;
use code_runner_conformance::standin::sandbox_double::network::GATEWAY;
use code_runner_conformance::standin::sandbox_double::{
    PackageRoute, SandboxDouble, SandboxLimits,
};
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::IIIClient;
use serde_json::{json, Value};
use tokio::net::TcpListener;

async fn call(c: &IIIClient, function_id: &str, payload: Value) -> Value {
    c.trigger(TriggerRequest {
        function_id: function_id.into(),
        payload: payload.clone(),
        action: None,
        timeout_ms: Some(60_000),
    })
    .await
    .unwrap_or_else(|e| panic!("{function_id} {payload}: {e:?}"))
}

/// A stand-in engine, a daemon double with `limits` on it, and a client.
struct Net {
    engine: StandInEngine,
    double: SandboxDouble,
    c: IIIClient,
}

impl Net {
    async fn start(limits: SandboxLimits) -> Net {
        let engine = StandInEngine::start(0).await.expect("engine");
        let double = SandboxDouble::start(&engine.url(), limits)
            .await
            .expect("double");
        let c = common::client(&engine.url(), "network-test").await;
        Net { engine, double, c }
    }

    async fn stop(self) {
        self.c.shutdown_async().await;
        self.double.shutdown().await;
        self.engine.shutdown().await;
    }
}

/// A fresh `network:true` python sandbox: its id.
async fn network_sandbox(c: &IIIClient) -> String {
    call(
        c,
        "sandbox::create",
        json!({"image": "python", "network": true}),
    )
    .await["sandbox_id"]
        .as_str()
        .expect("a sandbox_id")
        .to_string()
}

/// `sandbox::exec` of `argv` in sandbox `id`: its answer.
async fn exec_in(c: &IIIClient, id: &str, argv: Value) -> Value {
    call(c, "sandbox::exec", json!({"sandbox_id": id, "argv": argv})).await
}

/// Python that tries each `(host, port)` and prints one word per target.
fn probe(targets: &[(&str, u16)]) -> String {
    let list: Vec<String> = targets
        .iter()
        .map(|(h, p)| format!("('{h}', {p})"))
        .collect();
    format!(
        "import socket\nfor t in [{}]:\n    try:\n        socket.create_connection(t, 3).close()\n        print('open')\n    except OSError:\n        print('closed')",
        list.join(", ")
    )
}

/// A listener on host-only 127.0.0.2 whose port number is held, bound but
/// not listening, on 127.0.0.1 too: so "gateway → that port" can only be
/// refused, whatever other tests listen on meanwhile.
async fn host_only_listener() -> (TcpListener, tokio::net::TcpSocket) {
    for _ in 0..50 {
        let l = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let hold = tokio::net::TcpSocket::new_v4().unwrap();
        if hold.bind(([127, 0, 0, 1], port).into()).is_ok() {
            return (l, hold);
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.1 in 50 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reaches_the_hosts_127_0_0_1_and_nothing_else() {
    if let Some(why) = code_runner_conformance::standin::sandbox_double::network::unmodelled() {
        eprintln!("skipped: {why}");
        return;
    }
    let net = Net::start(SandboxLimits::default()).await;
    let c = &net.c;
    // Two host services: one on 127.0.0.1 (what the gateway forwards to),
    // one on the host-only 127.0.0.2 (where a main listener belongs).
    let on_one = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (on_two, _held) = host_only_listener().await;
    let (p1, p2) = (
        on_one.local_addr().unwrap().port(),
        on_two.local_addr().unwrap().port(),
    );
    let id = call(
        c,
        "sandbox::create",
        json!({"image": "python", "network": true, "env": {"SVC": format!("ws://127.0.0.1:{p1}")}}),
    )
    .await["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    let code = probe(&[
        (GATEWAY, p1),
        ("127.0.0.1", p1),
        ("127.0.0.2", p2),
        (GATEWAY, p2),
    ]);
    let out = exec_in(c, &id, json!(["python3", "-c", code])).await;
    assert_eq!(
        out["stdout"], "open\nclosed\nclosed\nclosed\n",
        "gateway→host 127.0.0.1 open; guest's own loopback, host 127.0.0.2 closed: {out}"
    );

    // The create-time env points at the gateway, and the default route
    // (outbound traffic) leaves through it.
    let out = exec_in(
        c,
        &id,
        json!([
            "sh",
            "-c",
            "echo $SVC; grep -c '^tap0\t00000000\t0202000A' /proc/net/route"
        ]),
    )
    .await;
    assert_eq!(out["stdout"], format!("ws://{GATEWAY}:{p1}\n1\n"), "{out}");

    // Each sandbox has a network of its own, and two execs of one sandbox
    // share it (one network per VM): compare namespace identities.
    let other = network_sandbox(c).await;
    let ns_of = |sid: String| async move {
        call(
            c,
            "sandbox::exec",
            json!({"sandbox_id": sid, "argv": ["readlink", "/proc/self/ns/net"]}),
        )
        .await["stdout"]
            .as_str()
            .unwrap()
            .trim()
            .to_string()
    };
    let (a1, a2, b) = (
        ns_of(id.clone()).await,
        ns_of(id.clone()).await,
        ns_of(other).await,
    );
    let host = std::fs::read_link("/proc/self/ns/net")
        .unwrap()
        .display()
        .to_string();
    assert!(a1.starts_with("net:["), "{a1}");
    assert_eq!(a1, a2, "execs of one sandbox share its network");
    assert_ne!(a1, b, "two sandboxes share a network");
    assert_ne!(a1, host, "a sandbox uses the host's network");
    net.stop().await;
}

/// `package_route: unreachable`: the gateway (where the engine is) still
/// answers at once; a connection anywhere else fails only after a wait, as
/// behind a firewall that drops it, so a worker that fetches packages
/// while a caller waits shows it in the caller's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_package_route_keeps_the_gateway_and_drops_the_rest() {
    if let Some(why) = code_runner_conformance::standin::sandbox_double::network::unmodelled() {
        eprintln!("skipped: {why}");
        return;
    }
    let net = Net::start(SandboxLimits {
        package_route: PackageRoute::Unreachable,
        ..SandboxLimits::default()
    })
    .await;
    let c = &net.c;
    let on_one = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let p1 = on_one.local_addr().unwrap().port();
    let id = network_sandbox(c).await;
    // 192.0.2.1 (TEST-NET-1) stands for any address beyond the gateway.
    let code = format!(
        "import socket, time\n\
         socket.create_connection(('{GATEWAY}', {p1}), 3).close()\n\
         print('gateway open')\n\
         t = time.monotonic()\n\
         try:\n    socket.create_connection(('192.0.2.1', 443), 20).close()\n    print('beyond open')\n\
         except OSError:\n    print('beyond failed after', 'a wait' if time.monotonic() - t >= 1 else 'no wait')"
    );
    let out = exec_in(c, &id, json!(["python3", "-c", code])).await;
    assert_eq!(
        out["stdout"], "gateway open\nbeyond failed after a wait\n",
        "{out}"
    );
    // The default route leads to 10.0.2.99, not slirp's 10.0.2.2.
    let out = exec_in(c, &id, json!(["sh", "-c", "grep -c '^tap0\t00000000\t6302000A' /proc/net/route; grep -c '^tap0\t00000000\t0202000A' /proc/net/route"])).await;
    assert_eq!(out["stdout"], "1\n0\n", "{out}");
    call(c, "sandbox::stop", json!({"sandbox_id": id})).await;
    net.stop().await;
}
