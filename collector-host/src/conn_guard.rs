//! Connection lifecycle limits shared by every listener (HTTP, gRPC, plaintext or TLS), so
//! that silent, slow or idle clients cannot hold the connection slots other clients need:
//!
//! - a deadline for the first request byte: a connection that sends nothing within
//!   `first_byte_timeout` of accept (or of the end of its TLS handshake, which has its own
//!   `tls.handshake_timeout`) is closed;
//! - an idle limit: a connection that has had no request in service for `idle_timeout`
//!   is closed. Only requests count: bytes that carry none (HTTP/2 PING and its ACK,
//!   SETTINGS, WINDOW_UPDATE) do not, so a gRPC client that answers keepalive pings but
//!   never calls is closed like any other idle one;
//! - caps on open connections, per listener (`max_connections`) and per client address
//!   (`max_connections_per_client`, TLS handshakes in progress included). A new connection
//!   that finds a cap full evicts an idle connection (no request in service) instead of
//!   being refused: at the per-address cap, the least recently used idle connection of
//!   that address; at the listener's cap, that of the address holding the most
//!   connections. Only when every candidate has a request in service is the new one
//!   refused.
//!
//! Closures, evictions and refusals are counted in the listener's [`ListenerStats`]
//! (`<prefix>connections_closed_total{reason}`, `..._refused_total{reason}`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::server::ListenerStats;
use crate::telemetry::ReceiverCounters;

pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = component::listen_addr::DEFAULT_FIRST_BYTE_TIMEOUT;
pub const DEFAULT_IDLE_TIMEOUT: Duration = component::listen_addr::DEFAULT_IDLE_TIMEOUT;
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

/// Nanoseconds since a process-wide origin (never 0 for a real time).
fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(|| Instant::now() - Duration::from_secs(1));
    u64::try_from(Instant::now().duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
}

fn instant_of(ns: u64) -> Instant {
    let now = now_ns();
    Instant::now() - Duration::from_nanos(now.saturating_sub(ns))
}

/// What one connection shares with its listener's [`ConnTable`] and its request handlers.
#[derive(Debug)]
struct ConnShared {
    /// Requests in service.
    in_flight: AtomicUsize,
    /// When a request last started or ended ([`now_ns`]); the accept time before any.
    last_request: AtomicU64,
    /// Set when the table evicted the connection; its next read fails.
    evicted: AtomicBool,
    /// The task reading the connection, woken on eviction.
    waker: Mutex<Option<Waker>>,
}

/// One connection's request activity: requests in service (the idle limit and eviction
/// leave a connection alone while one is) and when one last started or ended.
#[derive(Debug, Clone)]
pub struct Busy(Arc<ConnShared>);

impl Default for Busy {
    fn default() -> Self {
        Busy(Arc::new(ConnShared {
            in_flight: AtomicUsize::new(0),
            last_request: AtomicU64::new(now_ns()),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        }))
    }
}

impl Busy {
    /// Mark one request in service until the guard is dropped.
    pub fn enter(&self) -> BusyGuard {
        self.0.in_flight.fetch_add(1, Relaxed);
        self.0.last_request.store(now_ns(), Relaxed);
        BusyGuard(self.0.clone())
    }

    fn is_busy(&self) -> bool {
        self.0.in_flight.load(Relaxed) > 0
    }

    /// When the connection became idle ([`now_ns`]), or `None` while a request is in
    /// service.
    fn idle_since(&self) -> Option<u64> {
        (!self.is_busy()).then(|| self.0.last_request.load(Relaxed))
    }

    fn is_evicted(&self) -> bool {
        self.0.evicted.load(Relaxed)
    }

    fn evict(&self) {
        self.0.evicted.store(true, Relaxed);
        if let Some(w) = self.0.waker.lock().take() {
            w.wake();
        }
    }

    fn register(&self, cx: &Context<'_>) {
        let mut w = self.0.waker.lock();
        match &*w {
            Some(old) if old.will_wake(cx.waker()) => {}
            _ => *w = Some(cx.waker().clone()),
        }
    }
}

#[derive(Debug)]
pub struct BusyGuard(Arc<ConnShared>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.last_request.store(now_ns(), Relaxed);
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// The open connections of one listener by client address, under its caps.
#[derive(Debug)]
pub struct ConnTable {
    /// `max_connections`; 0 = unlimited.
    max_total: usize,
    /// `max_connections_per_client`; 0 = unlimited.
    max_per_client: usize,
    /// Also counts a refusal at `max_connections` as a refused request (gRPC receivers).
    counters: Option<Arc<ReceiverCounters>>,
    inner: Mutex<TableInner>,
}

#[derive(Debug, Default)]
struct TableInner {
    by_ip: HashMap<IpAddr, Vec<Busy>>,
    total: usize,
}

impl ConnTable {
    pub fn new(
        max_total: usize,
        max_per_client: usize,
        counters: Option<Arc<ReceiverCounters>>,
    ) -> Arc<ConnTable> {
        Arc::new(ConnTable {
            max_total,
            max_per_client,
            counters,
            inner: Mutex::new(TableInner::default()),
        })
    }

    /// A slot for one more connection from `ip`. At a full cap an idle connection is
    /// evicted to make room (counted as closed, `evicted`); `None` when none is idle
    /// (counted as refused: `max_connections_per_client` or `max_connections`).
    pub fn admit(self: &Arc<Self>, ip: IpAddr, stats: &ListenerStats) -> Option<ClientSlot> {
        let ip = ip.to_canonical();
        let mut t = self.inner.lock();
        let here = t.by_ip.get(&ip).map_or(0, Vec::len);
        if self.max_per_client > 0 && here >= self.max_per_client {
            // The address's own least recently used idle connection.
            let victim = t
                .by_ip
                .get(&ip)
                .and_then(|v| oldest_idle(v))
                .map(|(_, i)| i);
            match victim {
                Some(i) => t.evict(ip, i, stats),
                None => {
                    drop(t);
                    stats.refused_per_client.fetch_add(1, Relaxed);
                    return None;
                }
            }
        } else if self.max_total > 0 && t.total >= self.max_total {
            // The address holding the most connections; among equals, the connection idle
            // the longest.
            let mut best: Option<(usize, u64, IpAddr, usize)> = None;
            for (addr, conns) in &t.by_ip {
                let n = conns.len();
                if best.is_some_and(|b| b.0 > n) {
                    continue;
                }
                if let Some((since, i)) = oldest_idle(conns)
                    && best.is_none_or(|b| n > b.0 || since < b.1)
                {
                    best = Some((n, since, *addr, i));
                }
            }
            match best {
                Some((_, _, addr, i)) => t.evict(addr, i, stats),
                None => {
                    drop(t);
                    stats.refused_over_cap.fetch_add(1, Relaxed);
                    if let Some(c) = &self.counters {
                        c.reject("max_connections");
                    }
                    return None;
                }
            }
        }
        let busy = Busy::default();
        t.by_ip.entry(ip).or_default().push(busy.clone());
        t.total += 1;
        Some(ClientSlot(Some((self.clone(), ip)), busy))
    }

    /// Connections open from `ip` now.
    pub fn open(&self, ip: IpAddr) -> usize {
        self.inner
            .lock()
            .by_ip
            .get(&ip.to_canonical())
            .map_or(0, Vec::len)
    }

    /// Connections open now.
    pub fn total(&self) -> usize {
        self.inner.lock().total
    }
}

/// The connection of `conns` idle the longest: (idle since, index).
fn oldest_idle(conns: &[Busy]) -> Option<(u64, usize)> {
    conns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.idle_since().map(|t| (t, i)))
        .min()
}

impl TableInner {
    fn evict(&mut self, ip: IpAddr, i: usize, stats: &ListenerStats) {
        let Some(conns) = self.by_ip.get_mut(&ip) else {
            return;
        };
        let victim = conns.swap_remove(i);
        if conns.is_empty() {
            self.by_ip.remove(&ip);
        }
        self.total -= 1;
        victim.evict();
        stats.closed_evicted.fetch_add(1, Relaxed);
    }
}

/// One connection's place in its listener's table, given back when dropped.
#[derive(Debug)]
pub struct ClientSlot(Option<(Arc<ConnTable>, IpAddr)>, Busy);

impl ClientSlot {
    /// The connection's request activity, for the server to mark requests in service.
    pub fn busy(&self) -> Busy {
        self.1.clone()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Some((table, ip)) = self.0.take() {
            let mut t = table.inner.lock();
            let Some(conns) = t.by_ip.get_mut(&ip) else {
                return;
            };
            // Gone already if it was evicted.
            if let Some(i) = conns.iter().position(|c| Arc::ptr_eq(&c.0, &self.1.0)) {
                conns.swap_remove(i);
                if conns.is_empty() {
                    t.by_ip.remove(&ip);
                }
                t.total -= 1;
            }
        }
    }
}

/// The connect info of a [`Guarded`] connection as tonic hands it to the request: the
/// inner connection's, and the connection's [`Busy`] (the gRPC load-shedding layer marks
/// calls in service with it).
#[derive(Debug, Clone)]
pub struct GuardedInfo<T> {
    pub inner: T,
    pub busy: Busy,
}

/// A connection under the first-byte and idle deadlines. The deadlines are checked while
/// the server waits to read from the client: a read that would wait past one fails with
/// `TimedOut`, and the server closes the connection. A connection its table evicted fails
/// its next read the same way (woken at once if the server is waiting on it).
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    timer: Pin<Box<Sleep>>,
    /// When the first byte was read; `None` until then.
    first_byte: Option<Instant>,
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
            first_byte: None,
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
            let reason = match self.first_byte {
                None => "first byte",
                Some(first) => {
                    let Some(since) = self.busy.idle_since() else {
                        // A request in service: look again one idle period later.
                        self.timer.as_mut().reset(now + self.limits.idle_timeout);
                        continue;
                    };
                    let due = instant_of(since).max(first) + self.limits.idle_timeout;
                    if due > now {
                        self.timer.as_mut().reset(due);
                        continue;
                    }
                    "request"
                }
            };
            if !self.timed_out {
                self.timed_out = true;
                let c = if self.first_byte.is_none() {
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
        if this.busy.is_evicted() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "evicted to make room for a new connection",
            )));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.first_byte.is_none() && buf.filled().len() > before {
                    // From here on only requests count as activity (the idle limit).
                    let now = Instant::now();
                    this.first_byte = Some(now);
                    this.timer.as_mut().reset(now + this.limits.idle_timeout);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                this.busy.register(cx);
                if this.busy.is_evicted() {
                    cx.waker().wake_by_ref();
                }
                this.poll_deadline(cx).map(Err)
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
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

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Guarded<IO> {
    type ConnectInfo = GuardedInfo<IO::ConnectInfo>;

    fn connect_info(&self) -> Self::ConnectInfo {
        GuardedInfo {
            inner: self.io.connect_info(),
            busy: self.busy.clone(),
        }
    }
}

/// Accept plaintext connections on `listener` for tonic: admitted by `table` (its caps,
/// evicting idle connections), under the first-byte and idle deadlines. Stops at
/// `shutdown`.
pub fn grpc_plain_incoming(
    listener: tokio::net::TcpListener,
    limits: Lifecycle,
    table: Arc<ConnTable>,
    stats: Arc<ListenerStats>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Guarded<tokio::net::TcpStream>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        while let Some((stream, peer)) =
            crate::server::accept(&listener, &mut shutdown, &stats.listener).await
        {
            let Some(slot) = table.admit(peer.ip(), &stats) else {
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let busy = slot.busy();
            let g = Guarded::new(stream, limits, busy, stats.clone(), Some(slot));
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
    fn per_client_cap_refuses_the_excess_when_none_is_idle_and_frees_on_drop() {
        let s = stats();
        let pc = ConnTable::new(0, 2, None);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = pc.admit(a, &s).unwrap();
        let s2 = pc.admit(mapped, &s).unwrap();
        let (_g1, _g2) = (s1.busy().enter(), s2.busy().enter());
        assert!(pc.admit(a, &s).is_none(), "third from one address admitted");
        assert_eq!(s.refused_per_client.load(Relaxed), 1);
        assert!(pc.admit(b, &s).is_some(), "another address is not limited");
        drop(s1);
        assert_eq!(pc.open(a), 1);
        assert!(pc.admit(a, &s).is_some(), "slot not freed");
        let unlimited = ConnTable::new(0, 0, None);
        for _ in 0..10 {
            std::mem::forget(unlimited.admit(a, &s).unwrap());
        }
        assert_eq!(s.refused_per_client.load(Relaxed), 1);
        assert_eq!(s.closed_evicted.load(Relaxed), 0);
    }

    #[test]
    fn at_the_per_address_cap_the_addresss_least_recently_used_idle_connection_is_evicted() {
        let s = stats();
        let t = ConnTable::new(0, 3, None);
        let nat: IpAddr = "10.0.0.1".parse().unwrap();
        let old = t.admit(nat, &s).unwrap();
        let busy = t.admit(nat, &s).unwrap();
        let _in_service = busy.busy().enter();
        std::thread::sleep(Duration::from_millis(2));
        let recent = t.admit(nat, &s).unwrap();
        // Full: the newcomer evicts the oldest idle one, never the busy one.
        let new = t.admit(nat, &s).unwrap();
        assert!(old.busy().is_evicted());
        assert!(!busy.busy().is_evicted() && !recent.busy().is_evicted());
        assert_eq!(s.closed_evicted.load(Relaxed), 1);
        assert_eq!(t.open(nat), 3);
        // The evicted slot's drop gives nothing back twice.
        drop(old);
        assert_eq!(t.open(nat), 3);
        let _g = (recent.busy().enter(), new.busy().enter());
        assert!(t.admit(nat, &s).is_none(), "every connection busy: refused");
        assert_eq!(s.refused_per_client.load(Relaxed), 1);
        assert_eq!(t.total(), 3);
    }

    #[test]
    fn at_the_listener_cap_the_address_holding_the_most_gives_up_an_idle_connection() {
        let s = stats();
        let t = ConnTable::new(6, 0, None);
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        let legit = t.admit(ip(9), &s).unwrap();
        let mut attacker: Vec<ClientSlot> = (0..3).map(|_| t.admit(ip(1), &s).unwrap()).collect();
        attacker.extend((0..2).map(|_| t.admit(ip(2), &s).unwrap()));
        assert_eq!(t.total(), 6);
        // The legitimate client's (older, idle) connection is not the one evicted: 10.0.0.1
        // holds the most.
        let _second = t.admit(ip(9), &s).unwrap();
        assert!(!legit.busy().is_evicted());
        assert!(
            attacker[0].busy().is_evicted(),
            "the oldest of the largest address"
        );
        assert_eq!((t.open(ip(1)), t.open(ip(9)), t.total()), (2, 2, 6));
        // Busy connections are never evicted; with all busy, the newcomer is refused.
        let _guards: Vec<BusyGuard> = attacker[1..]
            .iter()
            .map(|a| a.busy().enter())
            .chain([legit.busy().enter(), _second.busy().enter()])
            .collect();
        let counters = crate::telemetry::Telemetry::default().receiver("otlp", "grpc");
        let t2 = ConnTable::new(1, 0, Some(counters.clone()));
        let only = t2.admit(ip(1), &s).unwrap();
        let _g = only.busy().enter();
        assert!(t2.admit(ip(2), &s).is_none());
        assert!(t.admit(ip(3), &s).is_none());
        assert_eq!(s.refused_over_cap.load(Relaxed), 2);
        assert_eq!(s.closed_evicted.load(Relaxed), 1);
        assert_eq!(
            *counters.rejected_requests.lock(),
            vec![("max_connections", 1)]
        );
    }

    #[tokio::test]
    async fn an_evicted_connection_fails_the_read_it_waits_on() {
        let (_client, server) = tokio::io::duplex(64);
        let s = stats();
        let t = ConnTable::new(1, 0, None);
        let slot = t.admit(IpAddr::from([10, 0, 0, 1]), &s).unwrap();
        let mut g = Guarded::new(
            server,
            limits(60_000, 60_000),
            slot.busy(),
            s.clone(),
            Some(slot),
        );
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            g.read(&mut buf).await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!reader.is_finished());
        let _newcomer = t.admit(IpAddr::from([10, 0, 0, 2]), &s).unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("the evicted read was not woken")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
    }

    #[tokio::test]
    async fn bytes_without_a_request_do_not_hold_a_connection_past_the_idle_limit() {
        let (mut client, server) = tokio::io::duplex(1024);
        let s = stats();
        let mut g = Guarded::new(
            server,
            limits(60_000, 300),
            Busy::default(),
            s.clone(),
            None,
        );
        // The client keeps sending (as HTTP/2 PINGs would) every 50 ms, far inside the
        // idle limit, but never a request.
        let pinger = tokio::spawn(async move {
            for _ in 0..200 {
                if client.write_all(b"p").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let mut buf = [0u8; 8];
        let closed = tokio::time::timeout(Duration::from_secs(8), async {
            loop {
                if let Err(e) = g.read(&mut buf).await {
                    return e;
                }
            }
        })
        .await
        .expect("pings kept the connection open");
        assert_eq!(closed.kind(), io::ErrorKind::TimedOut);
        assert_eq!(s.closed_idle_timeout.load(Relaxed), 1);
        pinger.abort();
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
