//! The sockets: accepting a connection, the handshake, and one worker's
//! read/write loop until it disconnects.

use super::*;

// ---- sockets ----

#[allow(clippy::result_large_err)] // the handshake callback's signature is tungstenite's
pub(super) async fn serve_socket(
    stream: TcpStream,
    peer: SocketAddr,
    state: Shared,
    rbac: Option<Arc<RbacConfig>>,
) {
    let mut path = String::from("/");
    let mut query: Option<String> = None;
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    let ws = tokio_tungstenite::accept_hdr_async(stream, |req: &Request, resp: Response| {
        path = req.uri().path().to_string();
        query = req.uri().query().map(str::to_string);
        for (k, v) in req.headers() {
            if let Ok(v) = v.to_str() {
                headers.insert(k.as_str().to_string(), v.to_string());
            }
        }
        Ok(resp)
    })
    .await;
    let Ok(mut ws) = ws else { return };
    if path.starts_with("/ws/channels") {
        drain(ws).await;
        return;
    }
    // An RBAC listener authenticates every worker and `/otel` connection
    // once, after the upgrade; a refusal is one error frame, then a close.
    let session = match rbac {
        None => None,
        Some(config) => {
            let auth = match &config.auth_function_id {
                None => Ok(AuthResult::open()),
                Some(fid) => {
                    let input = rbac::auth_input(&headers, query.as_deref(), peer);
                    match engine_call(&state, fid, input).await {
                        Ok(Value::Null) => Err("auth function returned no result".to_string()),
                        Ok(v) => serde_json::from_value::<AuthResult>(v).map_err(|e| e.to_string()),
                        Err((_code, message)) => Err(message),
                    }
                }
            };
            match auth {
                Ok(auth) => Some(Arc::new(Session { config, auth })),
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

/// Calls `function_id` as the engine itself (no caller worker), and waits
/// for its answer: `Err((code, message))` when it is missing, fails, or
/// times out.
pub(super) async fn engine_call(
    state: &Shared,
    function_id: &str,
    data: Value,
) -> Result<Value, (String, String)> {
    let invocation_id = Uuid::new_v4().to_string();
    let (tx, rx) = oneshot::channel();
    {
        let mut st = lock(state);
        let Some(callee) = st
            .functions
            .get(&(DEFAULT_NAMESPACE.to_string(), function_id.to_string()))
            .map(|f| f.owner)
        else {
            return Err((
                "function_not_found".into(),
                format!("Function {function_id} not found in namespace {DEFAULT_NAMESPACE}."),
            ));
        };
        let local = st
            .workers
            .get(&callee)
            .and_then(|w| w.session.as_ref())
            .map(|s| s.local_id(function_id).to_string())
            .unwrap_or_else(|| function_id.to_string());
        st.engine_calls.insert(invocation_id.clone(), tx);
        let frame = encode(&ForwardFrame {
            r#type: "invokefunction",
            invocation_id: Some(&invocation_id),
            function_id: &local,
            data: &data,
            metadata: None,
            traceparent: None,
            baggage: None,
        });
        send(&st, callee, frame);
    }
    match tokio::time::timeout(ENGINE_CALL_TIMEOUT, rx).await {
        Ok(Ok(answer)) => answer,
        _ => {
            lock(state).engine_calls.remove(&invocation_id);
            Err(("timeout".into(), format!("{function_id} did not answer")))
        }
    }
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

pub(super) async fn drain(ws: tokio_tungstenite::WebSocketStream<TcpStream>) {
    let (_sink, mut source) = ws.split();
    while let Some(Ok(_)) = source.next().await {}
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
    let grace = tokio::spawn(async move {
        tokio::time::sleep(NAME_GRACE).await;
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
            if str_field(&msg, "type") == Some("registerfunction")
                && !admit_registration(&state, session, &mut msg).await
            {
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

/// Applies an RBAC session to one `registerfunction`: refused when the
/// session may not register, or the hook throws or answers no object; the
/// hook may map the id, description and metadata; the prefix comes last.
pub(super) async fn admit_registration(
    state: &Shared,
    session: &Session,
    msg: &mut Map<String, Value>,
) -> bool {
    if !session.auth.allow_function_registration {
        return false;
    }
    let Some(id) = str_field(msg, "id").map(str::to_string) else {
        return false;
    };
    let mut id = id;
    if let Some(hook) = &session.config.on_function_registration_function_id {
        let input = json!({
            "function_id": id,
            "description": msg.get("description"),
            "metadata": msg.get("metadata"),
            "namespace": DEFAULT_NAMESPACE,
            "context": session.context(),
        });
        match engine_call(state, hook, input).await {
            Ok(Value::Object(mapped)) => {
                if let Some(s) = mapped.get("function_id").and_then(Value::as_str) {
                    id = s.to_string();
                }
                for key in ["description", "metadata"] {
                    if let Some(v) = mapped.get(key) {
                        msg.insert(key.into(), v.clone());
                    }
                }
            }
            other => {
                tracing::debug!(function_id = %id, answered = other.is_ok(), "registration denied by hook");
                return false;
            }
        }
    }
    msg.insert("id".into(), Value::String(session.registered_id(&id)));
    true
}
