//! The data channels of `fs::write` (a body read from the caller's channel)
//! and `fs::read` (the file streamed into a fresh one), as the daemon uses
//! them through the SDK's `ChannelReader` and `ChannelWriter`.
//!
//! Failures are the daemon's: a channel that delivers nothing for 5 s
//! (stalled, or its writer never connected) is S218, retryable; one that
//! cannot be opened or breaks is S216 with the daemon's message chain. A
//! writer that goes away without a close still ends the channel cleanly on
//! the engine, so its bytes so far are written, as on the daemon.

use std::io::{Seek, SeekFrom};
use std::time::Duration;

use iii_sdk::channel::{ChannelReader, StreamChannelRef};
use iii_sdk::IIIClient;
use tokio::io::AsyncReadExt;

use super::DaemonError;

/// How long the daemon waits for the caller's next chunk before it gives up
/// on an upload.
const IDLE: Duration = Duration::from_secs(5);

/// The depth of the channel `fs::read` answers, as the daemon makes it.
const READ_CHANNEL_DEPTH: usize = 64;

/// The daemon's chunk size when it pumps a file into a channel.
const CHUNK: usize = 64 * 1024;

/// Reads the whole of the caller's channel `r` on the engine at `engine`.
pub(crate) async fn read_body(engine: &str, r: &StreamChannelRef) -> Result<Vec<u8>, DaemonError> {
    let reader = ChannelReader::new(engine, r);
    let mut bytes = Vec::new();
    loop {
        match tokio::time::timeout(IDLE, reader.next_binary()).await {
            Ok(Ok(Some(chunk))) => bytes.extend_from_slice(&chunk),
            Ok(Ok(None)) => return Ok(bytes),
            Ok(Err(e)) => {
                return Err(DaemonError::FsIo(format!(
                    "shell client error: io: read from caller: channel read error: {e}"
                )))
            }
            Err(_) => {
                return Err(DaemonError::FsChannelAborted(format!(
                    "no chunks from caller for {}s — channel stalled or aborted",
                    IDLE.as_secs()
                )))
            }
        }
    }
}

/// Opens a channel on `client`'s engine, answers its reader ref, and pumps
/// `file` (from its start) into it in the background. A failed read or
/// write ends the stream with a JSON `{"error": …}` text frame.
pub(crate) async fn serve_file(
    client: &IIIClient,
    mut file: std::fs::File,
) -> Result<StreamChannelRef, DaemonError> {
    let channel = iii_sdk::helpers::create_channel(client, Some(READ_CHANNEL_DEPTH))
        .await
        .map_err(|e| DaemonError::FsIo(format!("create_channel: {e}")))?;
    let reader_ref = channel.reader_ref.clone();
    let writer = channel.writer;
    let rewound = file.seek(SeekFrom::Start(0)).map(|_| file);
    tokio::spawn(async move {
        let failure = match rewound {
            Err(e) => Some(format!("read from supervisor failed: {e}")),
            Ok(file) => {
                let mut file = tokio::fs::File::from_std(file);
                let mut buf = vec![0u8; CHUNK];
                loop {
                    match file.read(&mut buf).await {
                        Ok(0) => break None,
                        Ok(n) => {
                            if let Err(e) = writer.write(&buf[..n]).await {
                                break Some(format!("write to channel failed: {e}"));
                            }
                        }
                        Err(e) => break Some(format!("read from supervisor failed: {e}")),
                    }
                }
            }
        };
        if let Some(error) = failure {
            let _ = writer
                .send_message(&serde_json::json!({ "error": error }).to_string())
                .await;
        }
        let _ = writer.close().await;
    });
    Ok(reader_ref)
}
