//! Docker: whether a daemon answers, and splitting an image reference, for
//! the engine-image environment.

use super::*;

pub(super) fn split_image(image: &str) -> (String, String) {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (
            image[..slash + i].to_string(),
            image[slash + i + 1..].to_string(),
        ),
        None => (image.to_string(), "latest".to_string()),
    }
}

/// Whether a Docker daemon answers `GET /_ping`; the reason when not.
pub(crate) fn docker_answers() -> Result<(), String> {
    use std::io::{Read, Write};
    let host =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let request = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";
    let mut answer = String::new();
    let timeout = Some(Duration::from_secs(3));
    if let Some(path) = host.strip_prefix("unix://") {
        let mut s = std::os::unix::net::UnixStream::connect(path)
            .map_err(|e| format!("no Docker daemon answers at {host} ({e})"))?;
        let _ = s.set_read_timeout(timeout);
        s.write_all(request)
            .and_then(|_| s.read_to_string(&mut answer))
            .map_err(|e| format!("the Docker daemon at {host} does not answer ({e})"))?;
    } else if let Some(addr) = host.strip_prefix("tcp://") {
        let mut s = std::net::TcpStream::connect(addr)
            .map_err(|e| format!("no Docker daemon answers at {host} ({e})"))?;
        let _ = s.set_read_timeout(timeout);
        s.write_all(request)
            .and_then(|_| s.read_to_string(&mut answer))
            .map_err(|e| format!("the Docker daemon at {host} does not answer ({e})"))?;
    } else {
        return Err(format!("DOCKER_HOST={host} is neither unix:// nor tcp://"));
    }
    if answer.contains(" 200 ") {
        Ok(())
    } else {
        Err(format!(
            "the Docker daemon at {host} answered /_ping with: {}",
            answer.lines().next().unwrap_or("nothing")
        ))
    }
}
