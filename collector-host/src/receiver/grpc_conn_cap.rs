//! Counting of open OTLP/gRPC connections: each connection tonic serves carries an
//! [`OpenConnection`] (`<prefix>connections_open`) until tonic drops it. The caps
//! themselves (`max_connections`, `max_connections_per_client`, with eviction of idle
//! connections) are applied at accept by [`crate::conn_guard::ConnTable`].

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_stream::{Stream, StreamExt};

use crate::server::{ListenerStats, OpenConnection};

/// A connection counted as open.
#[derive(Debug)]
pub struct Capped<IO> {
    io: IO,
    _open: OpenConnection,
}

/// Count every connection from `incoming` as open until it is dropped.
pub fn cap<S, IO>(
    incoming: S,
    stats: Arc<ListenerStats>,
) -> impl Stream<Item = io::Result<Capped<IO>>>
where
    S: Stream<Item = io::Result<IO>>,
{
    incoming.map(move |r| {
        r.map(|io| Capped {
            io,
            _open: OpenConnection::new(&stats),
        })
    })
}

impl<IO: AsyncRead + Unpin> AsyncRead for Capped<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Capped<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Capped<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}
