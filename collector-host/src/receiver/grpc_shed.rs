//! Load shedding for the OTLP/gRPC receiver: a tower layer in front of tonic's routes that
//! caps the calls in flight. A call beyond the cap is answered at once with `UNAVAILABLE`
//! and a `google.rpc.RetryInfo` detail (the delay OTLP exporters honour when throttled),
//! before its request message is read or decoded, so a flood holds at most
//! `max_concurrent_requests` messages in memory. The permit lives until the handler's
//! future (decode, pipeline, response) completes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::sync::Semaphore;
use tonic::{Code, Status};

use crate::telemetry::ReceiverCounters;

/// `google.rpc.RetryInfo` (google/rpc/error_details.proto), encoded by hand: the one
/// detail a throttled OTLP client reads.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.Status`, the payload of `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The status a shed call gets: `UNAVAILABLE` (retryable in OTLP) with `RetryInfo`.
pub fn overloaded_status(retry_after: Duration) -> Status {
    let message = "too many requests in flight; retry after the RetryInfo delay";
    let retry = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: i64::try_from(retry_after.as_secs()).unwrap_or(i64::MAX),
            nanos: 0,
        }),
    };
    let status = RpcStatus {
        code: Code::Unavailable as i32,
        message: message.into(),
        details: vec![ProtoAny {
            type_url: RETRY_INFO_TYPE.into(),
            value: retry.encode_to_vec(),
        }],
    };
    Status::with_details(
        Code::Unavailable,
        message,
        Bytes::from(status.encode_to_vec()),
    )
}

/// The delay in a status made by [`overloaded_status`] (for clients and tests).
pub fn retry_delay(status: &Status) -> Option<Duration> {
    let s = RpcStatus::decode(status.details()).ok()?;
    let any = s.details.iter().find(|a| a.type_url == RETRY_INFO_TYPE)?;
    let d = RetryInfo::decode(any.value.as_slice()).ok()?.retry_delay?;
    Some(Duration::new(
        u64::try_from(d.seconds).ok()?,
        u32::try_from(d.nanos).ok()?,
    ))
}

/// Caps gRPC calls in flight (`None` = no cap).
#[derive(Debug, Clone)]
pub struct ShedLayer {
    pub permits: Option<Arc<Semaphore>>,
    pub retry_after: Duration,
    pub counters: Arc<ReceiverCounters>,
}

impl<S> tower::Layer<S> for ShedLayer {
    type Service = Shed<S>;
    fn layer(&self, inner: S) -> Shed<S> {
        Shed {
            inner,
            cfg: self.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Shed<S> {
    inner: S,
    cfg: ShedLayer,
}

impl<S, B> tower::Service<http::Request<B>> for Shed<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The call is in service on its connection (the idle limit and eviction leave the
        // connection alone) until its handler is done; shed calls count too.
        let in_service = req
            .extensions()
            .get::<crate::conn_guard::GuardedInfo<tonic::transport::server::TcpConnectInfo>>()
            .map(|i| i.busy.enter());
        let permit = match &self.cfg.permits {
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    self.cfg.counters.reject("overloaded");
                    let resp = overloaded_status(self.cfg.retry_after).into_http();
                    drop(in_service);
                    return Box::pin(async move { Ok(resp) });
                }
            },
            None => None,
        };
        // The service that was polled ready handles this call; a fresh clone takes its
        // place for the next one (tower's usual clone-and-swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let r = inner.call(req).await;
            drop((permit, in_service));
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_info_round_trips_through_the_status_details() {
        let s = overloaded_status(Duration::from_secs(7));
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(retry_delay(&s), Some(Duration::from_secs(7)));
        // Other statuses carry no delay.
        assert_eq!(retry_delay(&Status::unavailable("x")), None);
    }
}
