//! Criterion benchmarks of the push-header lookup and the GET route (filled in below).
fn main() {}
