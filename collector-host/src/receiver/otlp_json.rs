//! OTLP/JSON decoder for `ExportMetricsServiceRequest`, written for the receiver's hot path.
//!
//! The generic path (`serde_json::from_slice` through opentelemetry-proto's `with-serde`
//! impls) buffers every metric, data point, exemplar and attribute value into serde's
//! private `Content` tree, because those types use `#[serde(flatten)]` for their oneofs.
//! This decoder does not use serde at all (an earlier version drove serde visitors, whose
//! layers cost more than the scanning): a small lexer ([`reader`]) walks the body once and each
//! OTLP message reads its own fields from it. Keys are matched as borrowed slices of the
//! body, strings without escapes are copied once into their `String`, numbers are
//! classified while their digits are scanned, nothing is buffered. Layout: this file holds
//! the entry point and the generic message machinery, `reader` the lexer, `scalars` the
//! number, string-number and bytes encodings, `common` attributes and resources,
//! `metrics` the metric messages, `reader::tape` the shape replay (a body of the same
//! shape as the last one, into a batch that came back unchanged, has only its changed
//! values read).
//!
//! # Rules (shared with the generic path; checked by differential tests)
//! - Field names in lowerCamelCase. Unknown fields are skipped, as OTLP/JSON requires. A
//!   known field given twice is an error (`duplicate field`).
//! - 64-bit integers (`timeUnixNano`, `count`, `bucketCounts` items, `asInt`, `intValue`,
//!   ...): a JSON integer or a decimal string (parsed with Rust's `str::parse`, so an
//!   optional leading `+`). Out of range (a negative `u64`, an `i64` above `i64::MAX`) or a
//!   fraction is an error.
//! - 32-bit integers and enums (`flags`, `aggregationTemporality`, `scale`, ...): JSON
//!   integers only. Enum names such as `"AGGREGATION_TEMPORALITY_CUMULATIVE"` are not
//!   accepted (the generic path does not accept them either).
//! - Doubles: JSON numbers. Strings only in `ValueAtQuantile.quantile`/`.value`: `"NaN"`,
//!   `"Infinity"`, `"-Infinity"` and anything Rust's `f64` parser reads, as the generic path.
//! - `spanId`/`traceId`: hex (either case, optional `0x`); `bytesValue`: standard base64
//!   with padding. Same crates as the generic path, so the same strings pass.
//! - Oneofs: a metric's `gauge`/`sum`/`histogram`/`exponentialHistogram`/`summary` and a
//!   point's or exemplar's `asDouble`/`asInt`: the first member present wins, later
//!   members are skipped unread. `AnyValue`: the last member present wins.
//! - `asDouble`/`asInt` of the wrong type (`"asDouble":"NaN"`, `"asInt":1.5`) leaves the
//!   point without a value instead of failing the request: the processors then refuse that
//!   one point and the client gets a partial-success count for it.
//! - Nothing but whitespace after the value; serde_json's 128-level recursion limit for
//!   decoded objects and arrays. The grammar, string escapes and number classification are
//!   serde_json's (`reader` has unit tests against it); error messages name the line and
//!   column, with wording close to serde_json's.
//!
//! # Where this decoder deliberately differs from the generic path
//! Looser (accepted here, refused or lost there), as the OTLP/JSON and proto3 JSON
//! mappings require:
//! - The original proto snake_case names (`time_unix_nano`, `data_points`, ...) are
//!   accepted too; the generic path skipped them as unknown and lost their values. Both
//!   spellings of one field in one object is a `duplicate field` error.
//! - `null` for any field means the field is absent (default value, unset oneof member).
//!   The generic path accepted `null` only for message, optional-double and `AnyValue`
//!   member fields. `null` as an array element is still an error.
//! - An omitted `KeyValue.key`, `ArrayValue.values`, `KeyValueList.values` or `EntityRef`
//!   field defaults like every other field. The generic path refused these with `missing
//!   field`, although Go's protojson omits them when empty (`{"arrayValue":{}}`).
//! - Values of unknown fields are checked for JSON syntax only, as serde_json's skipper
//!   does: any depth (it is iterative), a string with a lone surrogate escape (`"\ud800"`)
//!   and a number out of `f64` range (`2E07209303`) pass. The generic path decoded the
//!   unknown fields of metrics, data points, exemplars and `AnyValue`s into its buffer and
//!   so refused all three there (elsewhere it skipped them as this decoder does). In a
//!   field that is read, an out-of-range number is refused by both.
//!
//! Stricter (refused here, accepted there):
//! - Any error inside a metric's data (its `gauge`/`sum`/... object and everything below
//!   it, apart from the `asDouble`/`asInt` rule above) fails the request. The generic path
//!   wraps that oneof in `Option` + `#[serde(flatten)]`, and serde turns every error inside
//!   it into `None`: the metric was accepted with no data and all its points vanished
//!   without an error or a partial-success count (for example `aggregationTemporality` as
//!   an enum name, `"NaN"` as a histogram `sum`, a malformed exemplar `traceId`).
//!   Reproducing that would need the metric body buffered, which is the cost this decoder
//!   removes, and an error naming line and column is more useful to a client than silent
//!   loss.
//! - Messages written as JSON arrays (serde's sequence form of a derived struct, e.g.
//!   `"resource":[[...],0]`) are refused; OTLP/JSON has no such form.
//! - The whole body must be UTF-8. The generic path did not check values it skipped
//!   (unknown fields of most messages), so it took invalid bytes there.
//! - `AnyValue` nesting (`arrayValue`/`kvlistValue`) deeper than [`MAX_ANY_VALUE_DEPTH`]
//!   levels is refused with its own message. The generic path was bounded only by
//!   serde_json's recursion limit (about 40 levels of `AnyValue`).

use component::recycle::{Origin, Recycler};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;
use std::cell::Cell;

mod reader;

pub use reader::JsonError;
use reader::tape::OpKind;
use reader::{ListKind, Number, Peek, Reader, Result};

/// Deepest `AnyValue` accepted: an attribute's value is level 1, each `arrayValue` or
/// `kvlistValue` adds one.
pub const MAX_ANY_VALUE_DEPTH: usize = 32;

/// Decode an OTLP/JSON `ExportMetricsServiceRequest` body.
pub fn decode_metrics(body: &[u8]) -> std::result::Result<ExportMetricsServiceRequest, JsonError> {
    // The whole body must be UTF-8, including values that are skipped unread; checked
    // once here, so the lexer can slice strings out of it without checking again.
    let text =
        body_text(body).map_err(|e| JsonError::at(body, e.valid_up_to(), "invalid UTF-8"))?;
    let mut r = Reader::new(text);
    r.pool = component::recycle::take_thread_pool();
    r.pool.set_writes_in_place(true);
    // The last batch this thread finished, if it kept one whole: overwritten in place.
    let (tree, came_back) = r.pool.take_tree_from();
    let mut req = ExportMetricsServiceRequest {
        resource_metrics: tree,
    };
    // When that batch came back unchanged from the last decode here, a body of the same
    // shape has only what changed written (see `reader::tape`).
    let tape = TAPE.with(Cell::take);
    let pristine = tape.describes(came_back);
    let record = RECORDING.with(|c| {
        let (verdict, state) = c.get().next(pristine, tape.issued_any());
        c.set(state);
        verdict
    });
    let replayed = r.start_replay(tape, pristine)
        && read_message_reusing(&mut r, &mut req)
            .and_then(|()| r.finish_replay())
            .is_ok();
    let out = if replayed {
        Ok(req)
    } else {
        // A miss (or nothing to replay): decoded in full from the start, into the same
        // batch, and recorded for the next body.
        r.restart();
        let tape = r.take_tape();
        r.start_recording(tape, record);
        match read_message_reusing(&mut r, &mut req).and_then(|()| r.end()) {
            Ok(()) => {
                r.finish_recording();
                Ok(req)
            }
            Err(e) => {
                // What was overwritten so far is still a batch: kept for the next decode
                // (or its parts pooled), as a finished one would be.
                r.pool.keep_or_recycle(req.resource_metrics);
                Err(e)
            }
        }
    };
    let mut tape = r.take_tape();
    tape.issue(out.is_ok().then(Origin::next));
    ISSUED.with(|c| c.set(tape.issued()));
    REPLAYED.with(|c| c.set(replayed));
    TAPE.with(|t| t.set(tape));
    component::recycle::put_thread_pool(std::mem::take(&mut r.pool));
    out
}

thread_local! {
    /// The walk of the last body this thread decoded in full (see `reader::tape`).
    static TAPE: Cell<reader::tape::Tape> = const { Cell::new(reader::tape::Tape::new()) };
    /// Whether this thread's last decode was a replay.
    static REPLAYED: Cell<bool> = const { Cell::new(false) };
    /// The name of the batch this thread's last decode issued, until taken.
    static ISSUED: Cell<Option<Origin>> = const { Cell::new(None) };
    /// Whether this thread's decodes are worth recording.
    static RECORDING: Cell<Recording> = const { Cell::new(Recording::NEW) };
}

/// Whether a full decode is worth recording. Recording costs about a tenth of a full
/// decode, and pays only if the batch comes back unchanged (a pipeline whose processors
/// all read it, a screen that changes nothing). Once two recorded decodes in a row had
/// their batches not come back so, only one full decode in [`Recording::PROBE_EVERY`] is
/// recorded, until one comes back unchanged.
#[derive(Debug, Clone, Copy)]
struct Recording {
    /// Recorded decodes in a row whose batch did not come back unchanged.
    lost: u32,
    /// Full decodes not recorded since the last one that was.
    skipped: u32,
}

impl Recording {
    const NEW: Recording = Recording {
        lost: 0,
        skipped: 0,
    };
    const PROBE_EVERY: u32 = 16;

    /// Whether to record this decode, given whether the last issued batch came back
    /// unchanged (`returned`) and whether one was issued at all (`issued`).
    fn next(self, returned: bool, issued: bool) -> (bool, Recording) {
        let lost = match (returned, issued) {
            (true, _) => 0,
            (false, true) => self.lost.saturating_add(1),
            (false, false) => self.lost,
        };
        if lost < 2 {
            return (true, Recording { lost, skipped: 0 });
        }
        let skipped = self.skipped + 1;
        if skipped >= Self::PROBE_EVERY {
            (true, Recording { lost, skipped: 0 })
        } else {
            (false, Recording { lost, skipped })
        }
    }
}

/// The name of the batch the last [`decode_metrics`] on this thread returned (once; `None`
/// after a failed decode). A host that hands that batch back unchanged with
/// [`component::recycle::recycle_on_this_thread_from`] and this origin lets the next
/// decode here write only what changed (see `reader::tape`). Take it right after the
/// decode, before anything else can decode on the thread.
pub fn take_origin() -> Option<Origin> {
    ISSUED.with(Cell::take)
}

/// Whether the last [`decode_metrics`] on this thread replayed the shape of the body
/// before it instead of decoding in full (for tests and benchmarks).
#[doc(hidden)]
pub fn last_decode_replayed() -> bool {
    REPLAYED.with(Cell::get)
}

/// Forget the shape this thread recorded, so that its next [`decode_metrics`] decodes
/// in full (for tests that compare the two).
#[doc(hidden)]
pub fn forget_shape() {
    TAPE.with(|t| drop(t.take()));
    RECORDING.with(|c| c.set(Recording::NEW));
}

fn body_text(body: &[u8]) -> std::result::Result<&str, std::str::Utf8Error> {
    if is_ascii(body) {
        // SAFETY: every byte is below 0x80, and ASCII is valid UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(body) });
    }
    std::str::from_utf8(body)
}

/// Whether every byte is ASCII: 64-byte blocks ORed together as words (which the compiler
/// turns into vector ORs), one test of the high bits at the end, then the tail.
fn is_ascii(body: &[u8]) -> bool {
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    let mut blocks = body.chunks_exact(64);
    let mut seen = 0u64;
    for block in &mut blocks {
        for word in block.chunks_exact(8) {
            seen |= u64::from_le_bytes(word.try_into().unwrap_or_default());
        }
    }
    seen & HIGH_BITS == 0 && blocks.remainder().is_ascii()
}

/// Give a finished batch's strings and vectors to this thread's pool, for the next
/// [`decode_metrics`] here (see [`component::recycle::recycle_on_this_thread`]).
pub fn recycle(data: Vec<ResourceMetrics>) {
    component::recycle::recycle_on_this_thread(data);
}

/// The fields of one message, looked up by either JSON spelling.
trait FieldKey: Copy + 'static {
    fn lookup(name: &str) -> Option<Self>;
    /// The lowerCamelCase name, for error messages.
    fn name(self) -> &'static str;
    /// Bit for duplicate detection.
    fn bit(self) -> u32;
    /// Member of the message's oneof (first present member wins, no duplicate error).
    fn is_oneof(self) -> bool;
    /// A non-zero byte naming the field, for key prediction.
    fn code(self) -> u8;
    /// The field named by [`Self::code`]; `None` for 0 and other bytes no field has.
    fn from_code(code: u8) -> Option<Self>;
    /// The key as the marshalers write it, `"camelCase":` (quotes and colon included).
    fn quoted(self) -> &'static reader::QuotedKey;
}

/// `fields!(Name { Variant = "camelCase" | "snake_case", #[oneof] Member = "member", .. })`
/// declares a field enum and its [`FieldKey`] impl.
macro_rules! fields {
    ($name:ident { $( $(#[$kind:ident])? $var:ident = $camel:literal $(| $snake:literal)? ),+ $(,)? }) => {
        // Variants are the proto field names, some of which share a suffix (`*Value`).
        #[allow(clippy::enum_variant_names)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum $name { $($var),+ }

        // One bit per field in a `u32` (duplicate detection).
        const _: () = assert!([$($camel),+].len() <= 32);

        impl $crate::receiver::otlp_json::FieldKey for $name {
            #[inline]
            fn lookup(name: &str) -> Option<Self> {
                match name {
                    $($camel $(| $snake)? => Some(Self::$var),)+
                    _ => None,
                }
            }
            fn name(self) -> &'static str {
                match self { $(Self::$var => $camel),+ }
            }
            fn bit(self) -> u32 {
                1u32 << (self as u32)
            }
            #[inline]
            fn is_oneof(self) -> bool {
                match self { $(Self::$var => fields!(@oneof $($kind)?)),+ }
            }
            #[inline]
            fn code(self) -> u8 {
                self as u8 + 1
            }
            #[inline]
            fn from_code(code: u8) -> Option<Self> {
                const ALL: &[$name] = &[$($name::$var),+];
                ALL.get(usize::from(code).wrapping_sub(1)).copied()
            }
            #[inline]
            fn quoted(self) -> &'static $crate::receiver::otlp_json::reader::QuotedKey {
                const QUOTED: &[$crate::receiver::otlp_json::reader::QuotedKey] = &[$(
                    $crate::receiver::otlp_json::reader::QuotedKey::new(
                        concat!("\"", $camel, "\":")
                    )
                ),+];
                &QUOTED[self as usize]
            }
        }
    };
    (@oneof oneof) => { true };
    (@oneof) => { false };
}

mod common;
mod metrics;
mod scalars;

use scalars::{
    NumberKind, NumberMember, base64_value, hex_bytes, int64, special_f64, uint64, uint64s,
};

/// A prost message decoded from a JSON object, field by field.
trait JsonMessage: Default {
    type Field: FieldKey;
    /// What the message is, for `invalid type` errors.
    const EXPECTING: &'static str;
    /// Decode the value of `field` into `self`. Returns `false` when the value was `null`,
    /// so an unset oneof member does not decide the oneof.
    fn field(&mut self, field: Self::Field, r: &mut Reader<'_>) -> Result<bool>;
    /// Key prediction slot (below [`reader::PREDICTION_SLOTS`]): objects of one type
    /// usually repeat the keys of the previous one in the same order, so each key is first
    /// compared with the bytes of the key at the same place in the last object read into
    /// this slot. Hot types have their own; the rest share 0 (a miss only costs the
    /// comparison).
    const SLOT: usize = 0;
    /// For a repeated field of this type: JSON bytes per element below which the initial
    /// capacity (at most [`MAX_INITIAL_CAPACITY`]) is sized from the bytes left in the body;
    /// 0 to grow from empty.
    const BYTES_PER_ELEMENT: usize = 0;
    /// An empty vector for a repeated field of this type, from the pool for the types it
    /// keeps.
    #[inline(always)]
    fn list(_pool: &mut Recycler) -> Vec<Self> {
        Vec::new()
    }
    /// Whether a used message of this type can be read into in place
    /// ([`read_message_reusing`]): its `field` overwrites every field it is given whole,
    /// and [`JsonMessage::reset_unwritten`] resets the others. Types without it are reset
    /// to their default before they are read into.
    const REUSES: bool = false;
    /// After an object was read into a used message: reset each field the object did not
    /// write (`written`: the [`FieldKey::bit`]s of its fields outside a oneof;
    /// `oneof_set`: whether a oneof member was set) to its default, keeping buffers where
    /// it can, so the message equals what reading into a default one gives.
    fn reset_unwritten(&mut self, _written: u32, _oneof_set: bool) {}
}

/// Largest initial capacity [`messages`] reserves before seeing the elements.
const MAX_INITIAL_CAPACITY: usize = 16;

/// Read one object (which must be next) as `M`.
fn read_message<M: JsonMessage>(r: &mut Reader<'_>) -> Result<M> {
    let mut msg = M::default();
    let skippable = r.fresh();
    let read = read_message_into(r, &mut msg);
    r.end_fresh(skippable);
    read?;
    Ok(msg)
}

/// Read the next object into `msg`, a message that may hold an earlier one's fields: the
/// result equals [`read_message`]'s, but strings and lists already in `msg` are reused.
#[inline]
fn read_message_reusing<M: JsonMessage>(r: &mut Reader<'_>, msg: &mut M) -> Result<()> {
    if !M::REUSES {
        *msg = M::default();
        let skippable = r.fresh();
        let read = read_message_into(r, msg);
        r.end_fresh(skippable);
        return read.map(|_| ());
    }
    let (written, oneof_set) = read_message_into(r, msg)?;
    msg.reset_unwritten(written, oneof_set);
    Ok(())
}

/// Whether `written` (see [`JsonMessage::reset_unwritten`]) has field `f`.
#[inline(always)]
fn wrote<F: FieldKey>(written: u32, f: F) -> bool {
    written & f.bit() != 0
}

/// Read the next object's fields into `msg`; the fields written outside a oneof (as
/// [`FieldKey::bit`]s) and whether a oneof member was set.
#[inline]
fn read_message_into<M: JsonMessage>(r: &mut Reader<'_>, msg: &mut M) -> Result<(u32, bool)> {
    if r.replaying() {
        return replay_message_into(r, msg);
    }
    if r.peek() != Peek::Object {
        return Err(r.invalid_type(M::EXPECTING));
    }
    r.begin_object()?;
    let object = r.record_open(OpKind::Object);
    let mut recorded = 0;
    let mut seen = Seen::default();
    let mut oneof_set = false;
    let mut first = true;
    let predicted = r.predicted(M::SLOT);
    let mut observed = 0u64;
    let mut shift = 0u32;
    while r.key_start(&mut first)? {
        // The key at this place in the last object of this type, compared byte for byte;
        // on a miss (other key, other spelling, escapes, whitespace) the general path.
        let guess = (shift < 64)
            .then(|| M::Field::from_code((predicted >> shift) as u8))
            .flatten();
        let field = match guess {
            Some(f) if r.eat_key(f.quoted()) => Some(f),
            _ => M::Field::lookup(&r.key_rest()?),
        };
        if shift < 64 {
            observed |= u64::from(field.map_or(0, FieldKey::code)) << shift;
            shift += 8;
        }
        match field {
            None => r.skip_value()?,
            Some(f) if f.is_oneof() => {
                if oneof_set {
                    r.skip_value()?;
                } else {
                    let op = r.record_value(f.code());
                    oneof_set = msg.field(f, r)?;
                    r.record_value_end(op, oneof_set);
                    recorded += usize::from(op.is_some());
                }
            }
            Some(f) => {
                seen.mark(f, r)?;
                let op = r.record_value(f.code());
                let set = msg.field(f, r)?;
                r.record_value_end(op, set);
                recorded += usize::from(op.is_some());
            }
        }
    }
    r.set_predicted(M::SLOT, observed);
    r.record_close(object, recorded);
    Ok((seen.0, oneof_set))
}

/// [`read_message_into`] replaying a recorded walk (see `reader::tape`): the fields the
/// tape names, each value read by the same field function, with no key read.
fn replay_message_into<M: JsonMessage>(r: &mut Reader<'_>, msg: &mut M) -> Result<(u32, bool)> {
    let (fields, object) = r.replay_open(OpKind::Object)?;
    let mut written = 0;
    let mut oneof_set = false;
    for _ in 0..fields {
        // A value as recorded is in `msg` already; only its bookkeeping.
        let (set, op) = match r.replay_skip() {
            Some(op) if matches!(op.kind(), OpKind::Value | OpKind::Nested) => (op.set, op),
            Some(_) => return Err(r.miss()),
            None => {
                let (i, op) = r.replay_value()?;
                let Some(f) = M::Field::from_code(op.code) else {
                    return Err(r.miss());
                };
                let set = match op.kind() {
                    OpKind::Nested => msg.field(f, r)?,
                    OpKind::Value => {
                        let mode = r.suspend();
                        let set = msg.field(f, r);
                        r.resume(mode);
                        set?
                    }
                    _ => return Err(r.miss()),
                };
                // Every field function today answers `false` only for `null`, which the
                // token-kind check already tells apart; this keeps a replay right for
                // one whose answer depends on more.
                if set != op.set {
                    return Err(r.miss());
                }
                r.replay_value_end(i);
                (set, op)
            }
        };
        let Some(f) = M::Field::from_code(op.code) else {
            return Err(r.miss());
        };
        if f.is_oneof() {
            oneof_set |= set;
        } else {
            written |= f.bit();
        }
    }
    r.replay_close(object);
    Ok((written, oneof_set))
}

/// Known fields already read in one object.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn mark<F: FieldKey>(&mut self, f: F, r: &Reader<'_>) -> Result<()> {
        if self.0 & f.bit() != 0 {
            return Err(r.error(format_args!("duplicate field `{}`", f.name())));
        }
        self.0 |= f.bit();
        Ok(())
    }
}

/// A repeated field: `null` is empty, else an array whose elements `each` reads.
fn repeated<T>(
    r: &mut Reader<'_>,
    mut each: impl FnMut(&mut Reader<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    // Read whole: no ops recorded or replayed inside (see `reader::tape`).
    let mode = r.suspend();
    let out = (|| {
        if !begin_repeated(r)? {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let mut first = true;
        while r.next_element(&mut first)? {
            out.push(each(r)?);
        }
        Ok(out)
    })();
    r.resume(mode);
    out
}

/// The start of a repeated field: `false` for `null` (consumed), `true` with its array
/// opened.
#[inline(always)]
fn begin_repeated(r: &mut Reader<'_>) -> Result<bool> {
    match r.peek() {
        Peek::Null => {
            r.null()?;
            Ok(false)
        }
        Peek::Array => r.begin_array().map(|()| true),
        _ => Err(r.invalid_type("an array")),
    }
}

/// A repeated message field. Each element is decoded in place in the vector.
fn messages<M: JsonMessage>(r: &mut Reader<'_>) -> Result<Vec<M>> {
    let mut out = Vec::new();
    let skippable = r.fresh();
    let read = messages_into(r, &mut out);
    r.end_fresh(skippable);
    read?;
    Ok(out)
}

/// A repeated message field into `out`, which may hold an earlier list: its elements are
/// read into in place ([`read_message_reusing`]), missing ones appended, extra ones
/// dropped. `null` is the empty list.
fn messages_into<M: JsonMessage>(r: &mut Reader<'_>, out: &mut Vec<M>) -> Result<()> {
    let replayed = if r.replaying() {
        Some(r.replay_open(OpKind::List)?)
    } else if begin_repeated(r)? {
        None
    } else {
        out.clear();
        return Ok(());
    };
    let list = r.record_open(OpKind::List);
    if out.capacity() == 0 {
        let capacity = r
            .remaining()
            .checked_div(M::BYTES_PER_ELEMENT)
            .unwrap_or_default()
            .max(r.length_hint(M::SLOT, ListKind::Messages))
            .min(MAX_INITIAL_CAPACITY);
        *out = M::list(&mut r.pool);
        out.reserve(capacity);
    }
    let mut n = 0;
    match replayed {
        Some((len, list)) => {
            while n < len {
                // An element as recorded is in `out` already.
                match r.replay_skip() {
                    Some(op) if op.kind() == OpKind::Object && n < out.len() => {}
                    Some(_) => return Err(r.miss()),
                    None => message_at(r, out, n)?,
                }
                n += 1;
            }
            r.replay_close(list);
        }
        None => {
            let mut first = true;
            while r.next_element(&mut first)? {
                message_at(r, out, n)?;
                n += 1;
            }
        }
    }
    out.truncate(n);
    r.set_length_hint(M::SLOT, ListKind::Messages, n);
    r.record_close(list, n);
    Ok(())
}

/// Element `n` of a repeated message field: read into the one `out` holds there, or
/// appended.
#[inline(always)]
fn message_at<M: JsonMessage>(r: &mut Reader<'_>, out: &mut Vec<M>, n: usize) -> Result<()> {
    if let Some(msg) = out.get_mut(n) {
        read_message_reusing(r, msg)
    } else {
        out.push(M::default());
        let skippable = r.fresh();
        let read = match out.last_mut() {
            Some(msg) => read_message_into(r, msg).map(|_| ()),
            None => Ok(()),
        };
        r.end_fresh(skippable);
        read
    }
}

/// An optional message field (`null` is unset).
fn message<M: JsonMessage>(r: &mut Reader<'_>) -> Result<Option<M>> {
    if r.null()? {
        return Ok(None);
    }
    read_message(r).map(Some)
}

/// An optional message field into `slot`, reusing the message it may hold.
fn message_into<M: JsonMessage>(r: &mut Reader<'_>, slot: &mut Option<M>) -> Result<()> {
    if r.null()? {
        *slot = None;
        return Ok(());
    }
    match slot {
        Some(msg) => read_message_reusing(r, msg),
        None => {
            *slot = Some(read_message(r)?);
            Ok(())
        }
    }
}

/// A `string` field; `null` is empty.
fn string(r: &mut Reader<'_>) -> Result<String> {
    Ok(opt_string(r)?.unwrap_or_default())
}

/// A string field into `slot`, in its buffer (`null` is the empty string). A buffer
/// larger than the pool keeps ([`Recycler::MAX_STRING_BYTES`]) is not reused, so a batch
/// read in place stays as small as a pooled one.
fn string_into(r: &mut Reader<'_>, slot: &mut String) -> Result<()> {
    match r.peek() {
        Peek::String => {
            let text = r.string()?;
            set_string(&mut r.pool, slot, &text);
            Ok(())
        }
        Peek::Null => {
            r.null()?;
            slot.clear();
            Ok(())
        }
        _ => Err(r.invalid_type("a string")),
    }
}

/// Set `slot` to `text`, reusing its buffer unless that is larger than the pool keeps.
#[inline]
fn set_string(pool: &mut Recycler, slot: &mut String, text: &str) {
    if slot.capacity() > Recycler::MAX_STRING_BYTES {
        *slot = String::new();
    }
    pool.set_string(slot, text);
}

/// A string, `None` for `null`.
fn opt_string(r: &mut Reader<'_>) -> Result<Option<String>> {
    match r.peek() {
        Peek::String => {
            let text = r.string()?;
            Ok(Some(r.pool.string_from(&text)))
        }
        Peek::Null => r.null().map(|_| None),
        _ => Err(r.invalid_type("a string")),
    }
}

/// A `bool` field; `null` is `false`.
fn boolean(r: &mut Reader<'_>) -> Result<bool> {
    Ok(opt_bool(r)?.unwrap_or_default())
}

/// A `repeated string` field; `null` is empty (elements may not be `null`).
fn strings(r: &mut Reader<'_>) -> Result<Vec<String>> {
    repeated(r, |r| {
        if r.peek() == Peek::String {
            Ok(r.string()?.into_owned())
        } else {
            Err(r.invalid_type("a string"))
        }
    })
}

/// A boolean, `None` for `null`.
fn opt_bool(r: &mut Reader<'_>) -> Result<Option<bool>> {
    if r.null()? {
        return Ok(None);
    }
    match r.bool()? {
        Some(b) => Ok(Some(b)),
        None => Err(r.invalid_type("a boolean")),
    }
}

/// A JSON number (which must be next, else `invalid type: .., expected <expecting>`).
fn number(r: &mut Reader<'_>, expecting: &str) -> Result<Number> {
    if r.peek() == Peek::Number {
        r.number()
    } else {
        Err(r.invalid_type(expecting))
    }
}

/// A 32-bit integer field (`uint32`, `int32`, `fixed32`, enums): a JSON integer in range;
/// `null` is 0.
fn int32<T: TryFrom<u64> + TryFrom<i64> + Default>(r: &mut Reader<'_>, name: &str) -> Result<T> {
    if r.null()? {
        return Ok(T::default());
    }
    let n = number(r, name)?;
    let v = match n {
        Number::U64(v) => <T as TryFrom<u64>>::try_from(v).ok(),
        Number::I64(v) => <T as TryFrom<i64>>::try_from(v).ok(),
        Number::F64(_) => {
            return Err(r.error(format_args!(
                "invalid type: {}, expected {name}",
                n.describe()
            )));
        }
    };
    v.ok_or_else(|| {
        r.error(format_args!(
            "invalid value: {}, expected {name}",
            n.describe()
        ))
    })
}

fn uint32(r: &mut Reader<'_>) -> Result<u32> {
    int32(r, "u32")
}

fn sint32(r: &mut Reader<'_>) -> Result<i32> {
    int32(r, "i32")
}

/// A `double` field; `null` is 0.
fn double(r: &mut Reader<'_>) -> Result<f64> {
    Ok(opt_double(r)?.unwrap_or_default())
}

/// An `optional double`, `None` for `null`.
fn opt_double(r: &mut Reader<'_>) -> Result<Option<f64>> {
    if r.null()? {
        return Ok(None);
    }
    number(r, "f64").map(|n| Some(n.as_f64()))
}

/// A `repeated double` field; `null` is empty (elements may not be `null`).
fn doubles(r: &mut Reader<'_>) -> Result<Vec<f64>> {
    repeated(r, |r| number(r, "f64").map(Number::as_f64))
}

#[cfg(test)]
mod tests;
