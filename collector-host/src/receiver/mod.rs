//! The `otlp` receiver: OTLP/HTTP ([`http`]) and OTLP/gRPC ([`grpc`]).

pub mod body;
pub mod decode;
pub mod grpc;
pub mod grpc_conn_cap;
pub mod grpc_shed;
pub mod http;
pub mod otlp_json;
pub mod otlp_proto;
