//! The sockets: accepting a connection, the handshake (data-channel
//! sockets are handed to [`super::channels`]), and one worker's read/write
//! loop until it disconnects.

use super::*;

// ---- sockets ----

#[allow(clippy::result_large_err)] // the handshake callback's signature is tungstenite's
pub(super) async fn serve_socket(
    stream: TcpStream,
    peer: SocketAddr,
    state: Shared,
    rbac: Option<Arc<GuestListener>>,
) {
    let mut path = String::from("/");
    let mut query: Option<String> = None;
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    let mut channel = None;
    let ws = tokio_tungstenite::accept_hdr_async(stream, |req: &Request, resp: Response| {
        path = req.uri().path().to_string();
        query = req.uri().query().map(str::to_string);
        for (k, v) in req.headers() {
            if let Ok(v) = v.to_str() {
                headers.insert(k.as_str().to_string(), v.to_string());
            }
        }
        // Channel sockets are checked (and refused) before the upgrade, and
        // never authenticated: their access key is the capability.
        if let Some(admitted) = channels::admit(&state, &path, query.as_deref()) {
            channel = Some(admitted?);
        }
        Ok(resp)
    })
    .await;
    let Ok(mut ws) = ws else { return };
    if let Some(socket) = channel {
        channels::serve(ws, state, socket).await;
        return;
    }
    // An RBAC listener authenticates every worker and `/otel` connection
    // once, after the upgrade; a refusal is one error frame, then a close.
    let session = match rbac {
        None => None,
        Some(listener) => {
            let auth = match &listener.rbac.auth_function_id {
                None => Ok(AuthResult::open()),
                Some(fid) => {
                    let input = rbac::auth_input(&headers, query.as_deref(), peer);
                    match engine_call(&state, fid, input).await {
                        Ok(Value::Null) => Err("auth function returned no result".to_string()),
                        Ok(v) => serde_json::from_value::<AuthResult>(v).map_err(|e| e.to_string()),
                        Err(e) => Err(e.message),
                    }
                }
            };
            match auth {
                Ok(auth) => Some(Arc::new(Session { listener, auth })),
                Err(message) => {
                    let frame = rbac::auth_error_frame(&message);
                    let _ = ws.send(WsMessage::Text(frame.into())).await;
                    let _ = ws.close(None).await;
                    return;
                }
            }
        }
    };
    if path.starts_with("/otel") {
        // SDKs open `/otel` by default. Nothing here analyses telemetry; it
        // is kept, bounded, for tests that look for leaked secrets in it.
        keep_telemetry(ws, state).await;
        return;
    }
    serve_worker(ws, state, session).await;
}

pub(super) async fn keep_telemetry(
    ws: tokio_tungstenite::WebSocketStream<TcpStream>,
    state: Shared,
) {
    let (_sink, mut source) = ws.split();
    while let Some(Ok(frame)) = source.next().await {
        let text = match frame {
            WsMessage::Text(t) => t.to_string(),
            WsMessage::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => continue,
        };
        let mut st = lock(&state);
        st.telemetry_bytes += text.len();
        st.telemetry.push_back(text);
        while st.telemetry_bytes > TELEMETRY_KEEP_BYTES {
            match st.telemetry.pop_front() {
                Some(old) => st.telemetry_bytes -= old.len(),
                None => break,
            }
        }
    }
}

pub(super) async fn serve_worker(
    ws: tokio_tungstenite::WebSocketStream<TcpStream>,
    state: Shared,
    session: Option<Arc<Session>>,
) {
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Outbound>();
    let worker_id = Uuid::new_v4();
    let reattach = Uuid::new_v4();
    let greeting = encode(&WorkerRegisteredFrame {
        r#type: "workerregistered",
        worker_id: &worker_id.to_string(),
        reattach_token: &reattach.to_string(),
    });
    let _ = tx.send(Outbound::Frame(greeting));
    lock(&state).workers.insert(
        worker_id,
        Worker {
            tx: tx.clone(),
            name: None,
            namespace: DEFAULT_NAMESPACE.to_string(),
            named: false,
            held: Vec::new(),
            metadata: Value::Null,
            connected_at_ms: now_ms(),
            session: session.clone(),
        },
    );

    let writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            match out {
                Outbound::Frame(text) => {
                    if sink.send(WsMessage::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Outbound::Close => {
                    let _ = sink.close().await;
                    break;
                }
            }
        }
    });

    // The grace after which held registrations become visible even if the
    // worker never names itself.
    let grace_state = state.clone();
    let name_grace = lock(&state).name_grace;
    let grace = tokio::spawn(async move {
        tokio::time::sleep(name_grace).await;
        let mut st = lock(&grace_state);
        flush_held(&mut st, worker_id);
    });

    while let Some(frame) = source.next().await {
        let text = match frame {
            Ok(WsMessage::Text(t)) => t.to_string(),
            Ok(WsMessage::Binary(b)) => String::from_utf8_lossy(&b).into_owned(),
            Ok(WsMessage::Close(_)) | Err(_) => break,
            Ok(_) => continue, // pings are answered by tungstenite itself
        };
        let Ok(Value::Object(mut msg)) = serde_json::from_str::<Value>(&text) else {
            tracing::debug!("ignoring an undecodable frame");
            continue;
        };
        if let Some(session) = &session {
            // Registrations through an RBAC listener pass its gate first;
            // frames of one connection stay in order, as on the engine.
            let admitted = match str_field(&msg, "type") {
                Some("registerfunction") => admit_registration(&state, session, &mut msg).await,
                Some("registertrigger") => {
                    admit_trigger(&state, session, worker_id, &mut msg).await
                }
                Some("registertriggertype") => admit_trigger_type(&state, session, &mut msg).await,
                _ => true,
            };
            if !admitted {
                continue;
            }
        }
        handle_frame(&state, worker_id, msg);
    }

    grace.abort();
    disconnect(&state, worker_id);
    let _ = tx.send(Outbound::Close);
    let _ = writer.await;
}
