//! The iii bus behind a small trait: call, publish, unpublish (and whether
//! an id is served already). Unit tests drive the manager with an in-memory
//! fake; production uses the SDK.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::runtime::FunctionRef;
use iii_sdk::{IIIClient, RegisterFunction};
use serde_json::Value;

use crate::error::WorkerError;
use crate::wire::ChannelRef;

/// A failed bus call, with the engine's or the callee's code kept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct BusError {
    pub code: String,
    pub message: String,
}

/// The code of a call that got no answer within its deadline.
pub const TIMEOUT: &str = "TIMEOUT";

impl BusError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> BusError {
        BusError {
            code: code.into(),
            message: message.into(),
        }
    }

    /// No answer came within the call's deadline: the callee may still
    /// have done the work (the engine can lose an answer, see
    /// `BusSandbox::call_idempotent`).
    pub fn is_timeout(&self) -> bool {
        self.code == TIMEOUT
    }
}

impl From<iii_sdk::Error> for BusError {
    fn from(e: iii_sdk::Error) -> BusError {
        match e {
            iii_sdk::Error::Remote { code, message, .. } => BusError { code, message },
            iii_sdk::Error::Timeout => BusError::new(TIMEOUT, "the bus call timed out"),
            iii_sdk::Error::NotConnected => {
                BusError::new("NOT_CONNECTED", "not connected to the iii engine")
            }
            other => BusError::new("SDK", other.to_string()),
        }
    }
}

pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, WorkerError>> + Send>>;
/// A published function's body.
pub type Handler = Arc<dyn Fn(Value) -> HandlerFuture + Send + Sync>;

/// What a published function shows in `engine::functions::info`.
#[derive(Debug, Clone, Default)]
pub struct FunctionSpec {
    pub id: String,
    pub description: Option<String>,
    pub request_format: Option<Value>,
    pub response_format: Option<Value>,
    pub metadata: Option<Value>,
}

/// A trigger binding this worker made, to undo later.
pub struct TriggerBinding {
    pub trigger_type: String,
    pub function_id: String,
    handle: Option<iii_sdk::trigger::Trigger>,
}

impl std::fmt::Debug for TriggerBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerBinding")
            .field("trigger_type", &self.trigger_type)
            .field("function_id", &self.function_id)
            .finish()
    }
}

impl TriggerBinding {
    /// A binding without an SDK handle (for in-memory buses).
    pub fn detached(trigger_type: &str, function_id: &str) -> TriggerBinding {
        TriggerBinding {
            trigger_type: trigger_type.into(),
            function_id: function_id.into(),
            handle: None,
        }
    }
}

/// How a forwarded call is routed: the guest's own `action`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routing {
    /// Request and response.
    Wait,
    /// Fire and forget: the answer is `null` at once.
    Void,
    /// Through a named queue.
    Enqueue { queue: String },
}

/// The bus as the worker uses it.
pub trait Bus: Send + Sync + 'static {
    /// A call made on someone else's behalf (the guest listener's
    /// middleware), routed as they asked, in their `namespace` (`None`:
    /// the default). Buses without routing support only plain calls.
    fn forward<'a>(
        &'a self,
        function_id: &'a str,
        payload: Value,
        routing: Routing,
        namespace: Option<&'a str>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + 'a>> {
        match (routing, namespace) {
            (Routing::Wait, None) => self.call(function_id, payload, timeout),
            _ => Box::pin(async {
                Err(BusError::new(
                    UNSUPPORTED,
                    "this bus forwards plain calls in the default namespace only",
                ))
            }),
        }
    }

    fn call<'a>(
        &'a self,
        function_id: &'a str,
        payload: Value,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + 'a>>;
    fn publish(&self, spec: FunctionSpec, handler: Handler);
    fn unpublish(&self, function_id: &str);
    /// Binds `function_id` to a trigger type (pending until its provider exists).
    fn bind(
        &self,
        trigger_type: &str,
        function_id: &str,
        config: Value,
    ) -> Result<TriggerBinding, BusError>;
    fn unbind(&self, binding: TriggerBinding);
    /// Streams `content` through a fresh data channel and answers the
    /// reader end's ref, for a callee that reads it (`sandbox::fs::write`
    /// takes one as `content`). A big file then travels as channel frames,
    /// not as a call payload the callee's SDK records on its span. Buses
    /// without channels answer `UNSUPPORTED`.
    fn upload(
        &self,
        content: Arc<str>,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + '_>> {
        drop(content);
        Box::pin(async { Err(BusError::new(UNSUPPORTED, "this bus has no data channels")) })
    }

    /// Reads a data channel whole, from the reader ref a callee answered
    /// (`sandbox::fs::read`'s `content`), at most `limit` bytes. Buses
    /// without channels answer `UNSUPPORTED`.
    fn download(
        &self,
        reader: Value,
        limit: usize,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, BusError>> + Send + '_>> {
        let _ = (reader, limit);
        Box::pin(async { Err(BusError::new(UNSUPPORTED, "this bus has no data channels")) })
    }

    /// The writer end of a data channel a caller made and handed over (a
    /// run's `output`, whose direction the edge checked). Nothing connects
    /// until the first frame is sent. Buses without channels answer
    /// `UNSUPPORTED`.
    fn open_writer(&self, channel: &ChannelRef) -> Result<Box<dyn FrameWriter>, BusError> {
        let _ = channel;
        Err(BusError::new(UNSUPPORTED, "this bus has no data channels"))
    }
}

/// A data channel's writer end: text frames, in order.
pub trait FrameWriter: Send + Sync + 'static {
    /// Reaches the reader's end ahead of the first frame (a writer that
    /// connects on its first frame would put its handshake there).
    fn open(&self) -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>> {
        Box::pin(async { Ok(()) })
    }
    fn send(&self, text: String)
        -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>>;
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

impl FrameWriter for iii_sdk::channel::ChannelWriter {
    fn open(&self) -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>> {
        // No bytes: the SDK's writer connects, and sends nothing.
        Box::pin(async move {
            self.write(&[])
                .await
                .map_err(|e| BusError::new("CHANNEL", e.to_string()))
        })
    }

    fn send(
        &self,
        text: String,
    ) -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>> {
        Box::pin(async move {
            self.send_message(&text)
                .await
                .map_err(|e| BusError::new("CHANNEL", e.to_string()))
        })
    }

    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let _ = iii_sdk::channel::ChannelWriter::close(self).await;
        })
    }
}

/// The code of a bus feature a bus does not have.
pub const UNSUPPORTED: &str = "UNSUPPORTED";

/// The frames the SDK's channel writer sends are at most this long; the
/// channel is made deep enough to hold a whole upload, so the writer never
/// waits on a reader that is slow to connect (or never does).
const CHANNEL_FRAME: usize = 64 * 1024;
/// The engine's cap on a channel's depth, in frames.
const MAX_CHANNEL_FRAMES: usize = 1024;
/// How long an upload's writer (or a download's reader) may take.
const UPLOAD_DEADLINE: Duration = Duration::from_secs(120);

/// Whether anyone on the bus serves `function_id` already, by the engine's
/// `engine::functions::info` (`NOT_FOUND` means free).
pub(crate) async fn is_served(bus: &dyn Bus, function_id: &str) -> Result<bool, BusError> {
    match bus
        .call(
            "engine::functions::info",
            serde_json::json!({ "function_id": function_id }),
            Duration::from_secs(10),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.code == "NOT_FOUND" => Ok(false),
        Err(e) => Err(e),
    }
}

/// The bus over the iii SDK client.
pub struct SdkBus {
    client: IIIClient,
    published: Mutex<HashMap<String, FunctionRef>>,
}

impl SdkBus {
    pub fn new(client: IIIClient) -> SdkBus {
        SdkBus {
            client,
            published: Mutex::new(HashMap::new()),
        }
    }

    pub fn client(&self) -> &IIIClient {
        &self.client
    }
}

impl Bus for SdkBus {
    fn call<'a>(
        &'a self,
        function_id: &'a str,
        payload: Value,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + 'a>> {
        Box::pin(async move {
            self.client
                .trigger(TriggerRequest {
                    function_id: function_id.to_string(),
                    payload,
                    action: None,
                    timeout_ms: Some(timeout.as_millis().min(u64::MAX as u128) as u64),
                })
                .await
                .map_err(BusError::from)
        })
    }

    fn forward<'a>(
        &'a self,
        function_id: &'a str,
        payload: Value,
        routing: Routing,
        namespace: Option<&'a str>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + 'a>> {
        Box::pin(async move {
            let action = match routing {
                Routing::Wait => None,
                Routing::Void => Some(iii_sdk::protocol::TriggerAction::Void),
                Routing::Enqueue { queue } => {
                    Some(iii_sdk::protocol::TriggerAction::Enqueue { queue })
                }
            };
            let request = TriggerRequest {
                function_id: function_id.to_string(),
                payload,
                action,
                timeout_ms: Some(timeout.as_millis().min(u64::MAX as u128) as u64),
            };
            let answer = match namespace {
                Some(ns) => self.client.trigger(request.namespace(ns)).await,
                None => self.client.trigger(request).await,
            };
            answer.map_err(BusError::from)
        })
    }

    fn publish(&self, spec: FunctionSpec, handler: Handler) {
        let mut reg = RegisterFunction::new_async(move |input: Value| {
            let handler = handler.clone();
            async move { handler(input).await.map_err(WorkerError::into_sdk) }
        });
        if let Some(d) = spec.description {
            reg = reg.description(d);
        }
        if let Some(r) = spec.request_format {
            reg = reg.request_format(r);
        }
        if let Some(r) = spec.response_format {
            reg = reg.response_format(r);
        }
        if let Some(m) = spec.metadata {
            reg = reg.metadata(m);
        }
        let fref = self.client.register_function(spec.id.clone(), reg);
        let previous = self
            .published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(spec.id, fref);
        if let Some(p) = previous {
            drop(p);
        }
    }

    fn bind(
        &self,
        trigger_type: &str,
        function_id: &str,
        config: Value,
    ) -> Result<TriggerBinding, BusError> {
        // The engine this worker is measured against binds through trigger
        // frames; observe is an 0.25-engine feature it does not advertise.
        #[allow(deprecated)]
        let handle = self
            .client
            .register_trigger(iii_sdk::protocol::RegisterTriggerInput {
                trigger_type: trigger_type.into(),
                function_id: function_id.into(),
                config,
                metadata: None,
                namespace: None,
                trigger_namespace: None,
            })
            .map_err(BusError::from)?;
        Ok(TriggerBinding {
            trigger_type: trigger_type.into(),
            function_id: function_id.into(),
            handle: Some(handle),
        })
    }

    fn unbind(&self, binding: TriggerBinding) {
        if let Some(h) = binding.handle {
            h.unregister();
        }
    }

    fn upload(
        &self,
        content: Arc<str>,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + '_>> {
        Box::pin(async move {
            let frames = content.len().div_ceil(CHANNEL_FRAME) + 1;
            if frames > MAX_CHANNEL_FRAMES {
                return Err(BusError::new(
                    UNSUPPORTED,
                    format!("{} bytes do not fit one data channel", content.len()),
                ));
            }
            let channel = iii_sdk::helpers::create_channel(&self.client, Some(frames)).await?;
            let reader = serde_json::to_value(&channel.reader_ref)
                .map_err(|e| BusError::new("SDK", e.to_string()))?;
            let writer = channel.writer;
            tokio::spawn(async move {
                let wrote = tokio::time::timeout(UPLOAD_DEADLINE, async {
                    writer.write(content.as_bytes()).await?;
                    writer.close().await
                })
                .await;
                match wrote {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "writing an upload's data channel failed")
                    }
                    Err(_) => tracing::warn!("writing an upload's data channel timed out"),
                }
            });
            Ok(reader)
        })
    }

    fn download(
        &self,
        reader: Value,
        limit: usize,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, BusError>> + Send + '_>> {
        Box::pin(async move {
            let reader: iii_sdk::channel::StreamChannelRef = serde_json::from_value(reader)
                .map_err(|e| BusError::new("BAD_RESPONSE", format!("not a channel ref: {e}")))?;
            let channel = iii_sdk::channel::ChannelReader::new(self.client.address(), &reader);
            let read = async {
                let mut bytes = Vec::new();
                while let Some(chunk) = channel.next_binary().await? {
                    bytes.extend_from_slice(&chunk);
                    if bytes.len() > limit {
                        return Err(BusError::new(
                            "TOO_LARGE",
                            format!("the channel carried over {limit} bytes"),
                        ));
                    }
                }
                Ok(bytes)
            };
            match tokio::time::timeout(UPLOAD_DEADLINE, read).await {
                Ok(r) => r,
                Err(_) => Err(BusError::new("TIMEOUT", "reading a data channel timed out")),
            }
        })
    }

    fn open_writer(&self, channel: &ChannelRef) -> Result<Box<dyn FrameWriter>, BusError> {
        // A writer ref: `functions::run` refused any other direction.
        let r = iii_sdk::channel::StreamChannelRef {
            channel_id: channel.channel_id.clone(),
            access_key: channel.access_key.clone(),
            direction: iii_sdk::channels::ChannelDirection::Write,
        };
        Ok(Box::new(iii_sdk::channel::ChannelWriter::new(
            self.client.address(),
            &r,
        )))
    }

    fn unpublish(&self, function_id: &str) {
        let fref = self
            .published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(function_id);
        if let Some(f) = fref {
            f.unregister();
        }
    }
}
