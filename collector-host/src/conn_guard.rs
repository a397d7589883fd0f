//! Connection lifecycle limits shared by every listener (HTTP, gRPC, plaintext or TLS), so
//! that silent or slow clients cannot hold the connection slots other clients need:
//!
//! - a deadline for the first request byte: a connection that sends nothing within
//!   `first_byte_timeout` of accept (or of the end of its TLS handshake, which has its own
//!   `tls.handshake_timeout`) is closed;
//! - an idle limit: a connection that has sent no byte for `idle_timeout` while none of its
//!   requests is being served is closed;
//! - a cap per client address: a client IP with `max_connections_per_client` connections
//!   open (TLS handshakes in progress included) has further ones closed at accept.
//!
//! Closures and refusals are counted in the listener's [`ListenerStats`]
//! (`ingero_fleet_connections_closed_total{reason}`, `..._refused_total{reason}`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::server::ListenerStats;

pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1024;

/// The lifecycle limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle {
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    /// 0 = unlimited.
    pub max_connections_per_client: usize,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

/// Open connections per client address of one listener.
#[derive(Debug)]
pub struct PerClient {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerClient {
    pub fn new(max: usize) -> Arc<PerClient> {
        Arc::new(PerClient {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more connection from `ip`, or `None` (counted as
    /// `max_connections_per_client`) when that address already has `max` open.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, stats: &ListenerStats) -> Option<ClientSlot> {
        if self.max == 0 {
            return Some(ClientSlot(None));
        }
        let ip = ip.to_canonical();
        let mut open = self.open.lock();
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            drop(open);
            stats.refused_per_client.fetch_add(1, Relaxed);
            return None;
        }
        *n += 1;
        Some(ClientSlot(Some((self.clone(), ip))))
    }

    /// Connections open from `ip` now.
    pub fn open(&self, ip: IpAddr) -> usize {
        self.open
            .lock()
            .get(&ip.to_canonical())
            .copied()
            .unwrap_or(0)
    }
}

/// One connection's place in its address's count, given back when dropped.
#[derive(Debug)]
pub struct ClientSlot(Option<(Arc<PerClient>, IpAddr)>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Some((pc, ip)) = self.0.take() {
            let mut open = pc.open.lock();
            if let Some(n) = open.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&ip);
                }
            }
        }
    }
}

/// Requests of one connection being served; the idle limit does not close a connection
/// while this is above zero.
#[derive(Debug, Default, Clone)]
pub struct Busy(Arc<AtomicUsize>);

impl Busy {
    /// Mark one request in service until the guard is dropped.
    pub fn enter(&self) -> BusyGuard {
        self.0.fetch_add(1, Relaxed);
        BusyGuard(self.0.clone())
    }

    fn is_busy(&self) -> bool {
        self.0.load(Relaxed) > 0
    }
}

#[derive(Debug)]
pub struct BusyGuard(Arc<AtomicUsize>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// A connection under the first-byte and idle deadlines. The deadlines are checked while
/// the server waits to read from the client: a read that would wait past one fails with
/// `TimedOut`, and the server closes the connection.
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    timer: Pin<Box<Sleep>>,
    /// When the last byte was read (or written); `None` until the first byte is read.
    last_activity: Option<Instant>,
    limits: Lifecycle,
    busy: Busy,
    stats: Arc<ListenerStats>,
    timed_out: bool,
    _slot: Option<ClientSlot>,
}

impl<IO> Guarded<IO> {
    /// Start the first-byte deadline now.
    pub fn new(
        io: IO,
        limits: Lifecycle,
        busy: Busy,
        stats: Arc<ListenerStats>,
        slot: Option<ClientSlot>,
    ) -> Self {
        Guarded {
            io,
            timer: Box::pin(tokio::time::sleep(limits.first_byte_timeout)),
            last_activity: None,
            limits,
            busy,
            stats,
            timed_out: false,
            _slot: slot,
        }
    }

    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// Pending until a deadline passes; then `TimedOut` (counted once).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let reason = match self.last_activity {
                None => "first byte",
                Some(last) => {
                    let due = last + self.limits.idle_timeout;
                    if due > now {
                        self.timer.as_mut().reset(due);
                        continue;
                    }
                    if self.busy.is_busy() {
                        self.timer.as_mut().reset(now + self.limits.idle_timeout);
                        continue;
                    }
                    "idle"
                }
            };
            if !self.timed_out {
                self.timed_out = true;
                let c = if self.last_activity.is_none() {
                    &self.stats.closed_first_byte_timeout
                } else {
                    &self.stats.closed_idle_timeout
                };
                c.fetch_add(1, Relaxed);
                tracing::debug!(listener = %self.stats.listener, reason, "closing connection: deadline passed");
            }
            return Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no {reason} from the client in time"),
            ));
        }
    }

    fn touch(&mut self) {
        let first = self.last_activity.is_none();
        let now = Instant::now();
        self.last_activity = Some(now);
        if first {
            self.timer.as_mut().reset(now + self.limits.idle_timeout);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_deadline(cx).map(Err),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        // Response bytes count as activity once the client has spoken (a long scrape page
        // is being read), never before: the server's own greeting (HTTP/2 SETTINGS) does
        // not extend the first-byte deadline.
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) && this.last_activity.is_some() {
            this.last_activity = Some(Instant::now());
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) && this.last_activity.is_some() {
            this.last_activity = Some(Instant::now());
        }
        r
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

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Guarded<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// Accept plaintext connections on `listener` for tonic: refused beyond the per-client cap,
/// the others under the first-byte and idle deadlines. Stops at `shutdown`.
pub fn grpc_plain_incoming(
    listener: tokio::net::TcpListener,
    limits: Lifecycle,
    stats: Arc<ListenerStats>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Guarded<tokio::net::TcpStream>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let per_client = PerClient::new(limits.max_connections_per_client);
    tokio::spawn(async move {
        while let Some((stream, peer)) =
            crate::server::accept(&listener, &mut shutdown, &stats.listener).await
        {
            let Some(slot) = per_client.admit(peer.ip(), &stats) else {
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let g = Guarded::new(stream, limits, Busy::default(), stats.clone(), Some(slot));
            if tx.send(Ok(g)).await.is_err() {
                break;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn stats() -> Arc<ListenerStats> {
        Arc::new(ListenerStats {
            listener: "t".into(),
            ..ListenerStats::default()
        })
    }

    #[test]
    fn per_client_cap_refuses_the_excess_and_frees_on_drop() {
        let s = stats();
        let pc = PerClient::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = pc.admit(a, &s).unwrap();
        let _s2 = pc.admit(mapped, &s).unwrap();
        assert!(pc.admit(a, &s).is_none(), "third from one address admitted");
        assert_eq!(s.refused_per_client.load(Relaxed), 1);
        assert!(pc.admit(b, &s).is_some(), "another address is not limited");
        drop(s1);
        assert_eq!(pc.open(a), 1);
        assert!(pc.admit(a, &s).is_some(), "slot not freed");
        let unlimited = PerClient::new(0);
        for _ in 0..10 {
            std::mem::forget(unlimited.admit(a, &s).unwrap());
        }
        assert_eq!(s.refused_per_client.load(Relaxed), 1);
    }

    fn limits(first_ms: u64, idle_ms: u64) -> Lifecycle {
        Lifecycle {
            first_byte_timeout: Duration::from_millis(first_ms),
            idle_timeout: Duration::from_millis(idle_ms),
            max_connections_per_client: 0,
        }
    }

    #[tokio::test]
    async fn a_silent_connection_fails_its_read_at_the_first_byte_deadline() {
        let (client, server) = tokio::io::duplex(64);
        let s = stats();
        let mut g = Guarded::new(
            server,
            limits(100, 60_000),
            Busy::default(),
            s.clone(),
            None,
        );
        let mut buf = [0u8; 8];
        let e = g.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(s.closed_first_byte_timeout.load(Relaxed), 1);
        assert_eq!(s.closed_idle_timeout.load(Relaxed), 0);
        // Later reads keep failing; the count does not grow.
        assert!(g.read(&mut buf).await.is_err());
        assert_eq!(s.closed_first_byte_timeout.load(Relaxed), 1);
        drop(client);
    }

    #[tokio::test]
    async fn a_connection_that_spoke_is_closed_only_when_idle_and_not_busy() {
        let (mut client, server) = tokio::io::duplex(64);
        let s = stats();
        let busy = Busy::default();
        let mut g = Guarded::new(server, limits(60_000, 100), busy.clone(), s.clone(), None);
        let mut buf = [0u8; 8];
        client.write_all(b"a").await.unwrap();
        assert_eq!(g.read(&mut buf).await.unwrap(), 1);
        // A request in service keeps the connection well past the idle limit.
        let guard = busy.enter();
        let read = tokio::time::timeout(Duration::from_millis(500), g.read(&mut buf)).await;
        assert!(read.is_err(), "closed while busy: {read:?}");
        assert_eq!(s.closed_idle_timeout.load(Relaxed), 0);
        drop(guard);
        // Idle and not busy: closed.
        let e = g.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(s.closed_idle_timeout.load(Relaxed), 1);
        assert_eq!(s.closed_first_byte_timeout.load(Relaxed), 0);
    }
}
