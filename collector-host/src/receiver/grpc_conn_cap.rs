//! A cap on open OTLP/gRPC connections: accepted connections beyond `max_connections` are
//! closed at once (as the HTTP listeners do), so a client opening connections without end
//! cannot exhaust file descriptors or per-connection buffers. Each admitted connection
//! carries a permit that is returned when tonic drops the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::{Stream, StreamExt};

use crate::server::{ListenerStats, OpenConnection};
use crate::telemetry::ReceiverCounters;

/// A connection holding one of the listener's connection permits.
#[derive(Debug)]
pub struct Capped<IO> {
    io: IO,
    _permit: Option<OwnedSemaphorePermit>,
    _open: OpenConnection,
}

/// Admit connections from `incoming` while fewer than `max` (0 = unlimited) are open; close
/// the others and count them (`ingero_fleet_rejected_requests_total{reason="max_connections"}`
/// and `ingero_fleet_connections_refused_total{reason="max_connections"}`).
pub fn cap<S, IO>(
    incoming: S,
    max: usize,
    counters: Arc<ReceiverCounters>,
    stats: Arc<ListenerStats>,
) -> impl Stream<Item = io::Result<Capped<IO>>>
where
    S: Stream<Item = io::Result<IO>>,
{
    let permits = (max > 0).then(|| Arc::new(Semaphore::new(max)));
    incoming.filter_map(move |r| match r {
        Err(e) => Some(Err(e)),
        Ok(io) => match &permits {
            None => Some(Ok(Capped {
                io,
                _permit: None,
                _open: OpenConnection::new(&stats),
            })),
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => Some(Ok(Capped {
                    io,
                    _permit: Some(p),
                    _open: OpenConnection::new(&stats),
                })),
                Err(_) => {
                    counters.reject("max_connections");
                    stats
                        .refused_over_cap
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    drop(io);
                    None
                }
            },
        },
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
