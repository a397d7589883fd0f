//! `host:port` listen addresses: the parser lives in [`component::listen_addr`] (the host
//! checks listeners with it too), re-exported here.

pub use component::listen_addr::*;
