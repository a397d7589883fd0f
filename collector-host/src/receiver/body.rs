//! Reading an OTLP/HTTP request body into one buffer, within a size limit.
//!
//! What `Limited::new(body, limit).collect()` and `to_bytes()` do, without their
//! per-request list of frames: a push's body is almost always one data frame, handed on
//! as it came (no allocation, no copy); a body in several frames is joined into one
//! buffer. Trailers are ignored.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body as _, Incoming};

/// Why a body could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// More data bytes arrived than the limit allows (the rest is not read).
    TooLarge,
    /// The connection failed or the client broke the framing.
    Read(hyper::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::TooLarge => f.write_str("length limit exceeded"),
            ReadError::Read(e) => e.fmt(f),
        }
    }
}

/// The future of a whole body of at most `limit` data bytes.
#[derive(Debug)]
pub struct ReadBody {
    body: Incoming,
    limit: usize,
    len: usize,
    /// The only frame so far (the usual case), kept as it came.
    first: Option<Bytes>,
    /// Frames joined, once a second one arrives.
    joined: Option<BytesMut>,
}

impl ReadBody {
    pub fn new(body: Incoming, limit: usize) -> Self {
        ReadBody {
            body,
            limit,
            len: 0,
            first: None,
            joined: None,
        }
    }

    fn take(&mut self) -> Bytes {
        match self.joined.take() {
            Some(j) => j.freeze(),
            None => self.first.take().unwrap_or_default(),
        }
    }
}

impl Future for ReadBody {
    type Output = Result<Bytes, ReadError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            let Some(frame) = ready!(Pin::new(&mut this.body).poll_frame(cx)) else {
                return Poll::Ready(Ok(this.take()));
            };
            let Ok(data) = frame.map_err(ReadError::Read)?.into_data() else {
                continue; // trailers
            };
            this.len = this.len.saturating_add(data.len());
            if this.len > this.limit {
                return Poll::Ready(Err(ReadError::TooLarge));
            }
            if let Some(j) = &mut this.joined {
                j.extend_from_slice(&data);
            } else if let Some(first) = this.first.take() {
                let mut j = BytesMut::with_capacity(first.len() + data.len());
                j.extend_from_slice(&first);
                j.extend_from_slice(&data);
                this.joined = Some(j);
            } else if !data.is_empty() {
                this.first = Some(data);
            }
        }
    }
}
