//! AFL++ entry point of the `config` target. Build with
//! `cargo afl build --release --features afl`; run with scripts/fuzz.sh.

fn main() {
    afl::fuzz!(|data: &[u8]| ingero_fleet_fuzz::config::config(data));
}
