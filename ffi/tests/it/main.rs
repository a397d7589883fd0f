//! ingero-ffi's integration tests, one binary (each test binary links the whole dependency
//! graph): each area is a module. One area: `cargo test -p ingero-ffi --test it header::`;
//! `INGERO_BLESS=1 cargo test -p ingero-ffi --test it header::` rewrites the header.

mod c_smoke;
mod header;
mod select_differential;
