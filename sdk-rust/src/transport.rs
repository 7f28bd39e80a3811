//! Dialling the broker: `unix:///abs/path` or `http://host:port`.

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::chain;
use crate::Error;

/// A channel to the broker at `addr`.
pub(crate) async fn connect(addr: &str) -> Result<Channel, Error> {
    let connect_err = |e: tonic::transport::Error| Error::Connect {
        addr: addr.to_string(),
        detail: chain(&e),
    };
    // `unix:///abs/path` (the broker's form) or `unix:/abs/path` (gRPC's short form).
    let unix_path = addr
        .strip_prefix("unix://")
        .or_else(|| addr.strip_prefix("unix:"));
    let channel = if let Some(path) = unix_path {
        if !path.starts_with('/') {
            return Err(Error::BadAddr { addr: addr.into() });
        }
        let path = path.to_string();
        // The URI is a placeholder: the connector ignores it. Its authority becomes
        // `:authority`, which h2 needs to be a plain host name.
        Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .map_err(connect_err)?
    } else if addr.starts_with("http://") {
        Endpoint::from_shared(addr.to_string())
            .map_err(|_| Error::BadAddr { addr: addr.into() })?
            .connect()
            .await
            .map_err(connect_err)?
    } else {
        return Err(Error::BadAddr { addr: addr.into() });
    };
    Ok(channel)
}
