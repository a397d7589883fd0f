//! Shape replay: the decoder's walk of one body, recorded so that the next body with the
//! same shape is read by writing only what changed.
//!
//! An agent sends the same document every time with a few other values in it: the keys,
//! their order, the punctuation, the whitespace and most values (metric names, units,
//! attribute keys and most attribute values) repeat; the node id, the scores and the
//! timestamps change. So while a body is decoded in full, the walk is recorded as a
//! *tape*: one op per object and list the decoder opens and one per field value (and
//! attribute) it reads. Each op has the bytes of the body between the previous value and
//! this one (its *literal*: keys, punctuation, whitespace, skipped unknown fields,
//! closing brackets) and the bytes of its value (for an object, a list or a nested
//! value: of everything inside it).
//!
//! The body is replayed only into a batch known to hold exactly what the tape's body
//! decoded to: the decoder names each batch it issues ([`component::recycle::Origin`]),
//! and a host hands the batch back with that name only if nothing changed it (the screen
//! changed nothing and every stage had it by shared reference). Then an op whose literal
//! and value are, byte for byte, the recorded ones is skipped with everything inside it:
//! the batch holds what a full decode would write there. Any other op has its literal
//! compared (it must be the recorded one) and the first byte of its value checked (the
//! same kind of token: string, number, boolean, `null`, object, array); then the same
//! field function a full decode calls reads it and writes it, and for an object or list
//! its ops are replayed in turn. The field function's answer (whether it set its field,
//! which decides a oneof) must be the recorded one.
//!
//! Why the result is a full decode's: the decoder is deterministic, and everything it
//! decides from the structure (which key, which field, duplicates, skipped members,
//! nesting, where a value starts) is a function of the bytes outside the values, which
//! the literals pin down; what it decides from a value is the token kind (checked) and
//! the field function's answer (checked). A value that is byte for byte the recorded one
//! decodes to what the batch holds; one that is not is decoded by the full decoder's own
//! code. Depth is counted as in a full decode, so values read whole (attribute values,
//! scalar lists) see the same recursion limit. A skipped number cannot read on into what
//! follows: the literal after it is compared next.
//!
//! Anything else (a literal that differs, a token of another kind, an error inside a
//! value, a body shorter or longer than the tape) ends the replay as a *miss*: the body
//! is decoded in full from the start, into the same batch (a full decode overwrites
//! whatever a partial replay wrote), and that decode is recorded. The full decode also
//! produces every error a client sees, with its position. After a replay the tape
//! describes the new body (the ops' offsets are moved to it).
//!
//! One tape per thread, of the last body decoded there; bodies over [`MAX_BODY`] bytes
//! or [`MAX_OPS`] ops are not recorded.

use super::{ErrorAt, JsonError, Reader, Result};

/// The largest body that is recorded (its bytes are kept with the tape).
pub(in crate::receiver::otlp_json) const MAX_BODY: usize = 32 * 1024;

/// The most ops a tape holds (16 bytes each).
pub(in crate::receiver::otlp_json) const MAX_OPS: usize = 2048;

/// Whether the reader records, replays or does neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::receiver::otlp_json) enum Mode {
    Off,
    Record,
    Replay,
}

/// What an op stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::receiver::otlp_json) enum OpKind {
    /// An object read field by field: `n` field ops follow, each with the ops of its
    /// value.
    Object,
    /// A list of messages or attributes: `n` elements follow.
    List,
    /// A field whose value is read whole by its field function: a scalar, `null`, or a
    /// container the decoder reads without recording (a list of numbers, say).
    Value,
    /// A field whose value is an object or list with ops of its own.
    Nested,
    /// One attribute of a list, read whole.
    Element,
}

/// One step of a recorded walk.
#[derive(Debug, Clone, Copy)]
pub(in crate::receiver::otlp_json) struct Op {
    /// The literal before the value: `len` bytes at `at` in the tape's body.
    at: u32,
    len: u32,
    /// The value's bytes after the literal (for an object or list, and a nested value:
    /// everything inside it).
    vlen: u32,
    /// Fields of an object, elements of a list.
    n: u32,
    /// Ops inside this one (an object, list or nested value), skipped with it.
    inner: u32,
    kind: OpKind,
    /// The field ([`super::super::FieldKey::code`]).
    pub(in crate::receiver::otlp_json) code: u8,
    /// The kind of token the value starts with ([`token_class`]).
    class: u8,
    /// What the field function returned (whether it set its field).
    pub(in crate::receiver::otlp_json) set: bool,
}

impl Op {
    pub(in crate::receiver::otlp_json) fn kind(&self) -> OpKind {
        self.kind
    }

    fn new(kind: OpKind, at: usize, len: usize, code: u8, class: u8) -> Op {
        Op {
            at: offset(at),
            len: offset(len),
            vlen: 0,
            n: 0,
            inner: 0,
            kind,
            code,
            class,
            set: false,
        }
    }
}

/// A body offset or length as stored (bodies are at most [`MAX_BODY`] bytes).
#[inline(always)]
fn offset(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A recorded walk and the body it was recorded from.
#[derive(Debug)]
pub(in crate::receiver::otlp_json) struct Tape {
    body: Vec<u8>,
    ops: Vec<Op>,
    /// Where the literal after the last value starts in `body` (it runs to the end).
    tail: usize,
    /// Whether a whole successful decode was recorded.
    ready: bool,
    /// The batch the last decode from this tape issued (see the module docs).
    issued: Option<component::recycle::Origin>,
}

impl Default for Tape {
    fn default() -> Self {
        Tape::new()
    }
}

impl Tape {
    pub(in crate::receiver::otlp_json) const fn new() -> Tape {
        Tape {
            body: Vec::new(),
            ops: Vec::new(),
            tail: 0,
            ready: false,
            issued: None,
        }
    }
}

/// The kind of token a value starts with: the first byte's class.
#[inline(always)]
fn token_class(b: Option<u8>) -> u8 {
    match b {
        Some(b'"') => 1,
        Some(b'-' | b'0'..=b'9') => 2,
        Some(b't' | b'f') => 3,
        Some(b'n') => 4,
        Some(b'{') => 5,
        Some(b'[') => 6,
        _ => 0,
    }
}

impl Tape {
    /// Name the batch just decoded from this tape (`None`: the decode failed); only a
    /// batch decoded with a recording keeps its name.
    pub(in crate::receiver::otlp_json) fn issue(
        &mut self,
        origin: Option<component::recycle::Origin>,
    ) {
        self.issued = origin.filter(|_| self.ready);
    }

    /// Whether the last decode from this tape issued a batch.
    pub(in crate::receiver::otlp_json) fn issued_any(&self) -> bool {
        self.issued.is_some()
    }

    /// The name of the batch the last decode from this tape issued.
    pub(in crate::receiver::otlp_json) fn issued(&self) -> Option<component::recycle::Origin> {
        self.issued
    }

    /// Whether a batch that came back as `origin` holds what this tape's body decoded to.
    pub(in crate::receiver::otlp_json) fn describes(
        &self,
        origin: Option<component::recycle::Origin>,
    ) -> bool {
        self.ready && origin.is_some() && origin == self.issued
    }
}

impl Reader<'_> {
    // ---- recording ---------------------------------------------------------------

    /// Record this decode's walk into `tape` (reusing its buffers) if `record`, unless the
    /// body is too long to keep.
    pub(in crate::receiver::otlp_json) fn start_recording(&mut self, mut tape: Tape, record: bool) {
        tape.ops.clear();
        tape.ready = false;
        tape.issued = None;
        self.tape = tape;
        self.lit_start = 0;
        self.mode = if record && self.text.len() <= MAX_BODY {
            Mode::Record
        } else {
            Mode::Off
        };
    }

    /// The decode succeeded: keep the body with the walk.
    pub(in crate::receiver::otlp_json) fn finish_recording(&mut self) {
        if self.mode == Mode::Record {
            self.tape.tail = self.lit_start;
            self.tape.body.clear();
            self.tape.body.extend_from_slice(self.text.as_bytes());
            self.tape.ready = true;
        }
        self.mode = Mode::Off;
    }

    /// The tape, given back for the next decode on this thread.
    pub(in crate::receiver::otlp_json) fn take_tape(&mut self) -> Tape {
        self.mode = Mode::Off;
        std::mem::take(&mut self.tape)
    }

    #[inline]
    fn push_op(&mut self, op: Op) -> Option<usize> {
        if self.tape.ops.len() >= MAX_OPS {
            // Too many to keep: this body is not recorded.
            self.mode = Mode::Off;
            return None;
        }
        self.tape.ops.push(op);
        Some(self.tape.ops.len() - 1)
    }

    /// An object or list was just opened by a decode that is recording: its op, to be
    /// closed with its count by [`Self::record_close`].
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn record_open(&mut self, kind: OpKind) -> Option<usize> {
        if self.mode != Mode::Record {
            return None;
        }
        self.push_op(Op::new(kind, self.lit_start, 0, 0, 0))
    }

    /// The object or list of `op` had `n` fields or elements.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn record_close(&mut self, op: Option<usize>, n: usize) {
        let (lit_start, ops) = (self.lit_start, self.tape.ops.len());
        if let Some(i) = op
            && let Some(o) = self.tape.ops.get_mut(i)
        {
            o.n = offset(n);
            o.inner = offset(ops - i - 1);
            o.vlen = offset(lit_start - o.at as usize);
        }
    }

    /// The value of field `code` is next (recording): its op, with the literal up to the
    /// value. Follow with [`Self::record_value_end`] once the value is read.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn record_value(&mut self, code: u8) -> Option<usize> {
        if self.mode != Mode::Record {
            return None;
        }
        self.record_at(OpKind::Value, code)
    }

    /// An attribute (a list element) is next (recording): its op, as [`Self::record_value`].
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn record_element(&mut self) -> Option<usize> {
        if self.mode != Mode::Record {
            return None;
        }
        self.record_at(OpKind::Element, 0)
    }

    #[inline]
    fn record_at(&mut self, kind: OpKind, code: u8) -> Option<usize> {
        self.skip_ws();
        let class = token_class(self.byte());
        let kind = match class {
            5 | 6 if kind == OpKind::Value => OpKind::Nested,
            _ => kind,
        };
        let op = Op::new(kind, self.lit_start, self.pos - self.lit_start, code, class);
        self.lit_start = self.pos;
        self.push_op(op)
    }

    /// The value of `op` was read and its field function returned `set`. A value that
    /// recorded no ops of its own is read whole on replay, the literal after it starting
    /// here; one that did (an object or list of messages) has its bytes in its ops.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn record_value_end(
        &mut self,
        op: Option<usize>,
        set: bool,
    ) {
        let Some(i) = op else {
            return;
        };
        let (pos, lit_start, ops) = (self.pos, self.lit_start, self.tape.ops.len());
        let Some(o) = self.tape.ops.get_mut(i) else {
            return;
        };
        o.set = set;
        let start = (o.at + o.len) as usize;
        match (i + 1 == ops, o.kind) {
            (true, _) => {
                if o.kind == OpKind::Nested {
                    o.kind = OpKind::Value;
                }
                o.vlen = offset(pos - start);
                self.lit_start = pos;
            }
            (false, OpKind::Nested) => {
                o.inner = offset(ops - i - 1);
                o.vlen = offset(lit_start - start);
            }
            // A scalar or an attribute recorded ops inside itself: no reader does that,
            // and a tape that did could not be replayed; this body is not recorded.
            (false, _) => self.mode = Mode::Off,
        }
    }

    // ---- replaying ---------------------------------------------------------------

    /// Replay `tape` on this body into a batch that holds what the tape's body decoded
    /// to, if it holds a recorded walk; `false` (and nothing to replay) otherwise.
    pub(in crate::receiver::otlp_json) fn start_replay(
        &mut self,
        tape: Tape,
        pristine: bool,
    ) -> bool {
        self.tape = tape;
        self.cursor = 0;
        self.skippable = true;
        self.mode = if self.tape.ready && pristine {
            Mode::Replay
        } else {
            Mode::Off
        };
        self.mode == Mode::Replay
    }

    /// After a miss: back to the start of the body, for a full decode.
    pub(in crate::receiver::otlp_json) fn restart(&mut self) {
        self.pos = 0;
        self.depth_left = super::RECURSION_LIMIT;
        self.mode = Mode::Off;
    }

    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn replaying(&self) -> bool {
        self.mode == Mode::Replay
    }

    /// A message or list made afresh is read into next: nothing in it may be skipped
    /// until [`Self::end_fresh`] (with what this returns).
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn fresh(&mut self) -> bool {
        std::mem::replace(&mut self.skippable, false)
    }

    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn end_fresh(&mut self, skippable: bool) {
        self.skippable = skippable;
    }

    /// Read the next value whole, as a full decode would (no ops recorded or replayed
    /// inside it); [`Self::resume`] afterwards.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn suspend(&mut self) -> Mode {
        std::mem::replace(&mut self.mode, Mode::Off)
    }

    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn resume(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// A replay that cannot go on: the body is decoded in full instead (which reports
    /// any real error), so this carries no message.
    #[cold]
    #[inline(never)]
    pub(in crate::receiver::otlp_json) fn miss(&self) -> JsonError {
        JsonError(Box::new(ErrorAt {
            msg: String::new(),
            line: 0,
            column: 0,
        }))
    }

    /// Replay: if the next op's literal and value (with everything inside it) are the
    /// recorded bytes, skip it: consumed, its ops moved to where they are in this body,
    /// and `Some` with it (nothing is written: the batch holds its value). `None` (and
    /// nothing consumed) otherwise.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn replay_skip(&mut self) -> Option<Op> {
        if !self.skippable {
            return None;
        }
        let i = self.cursor;
        let op = *self.tape.ops.get(i)?;
        let (at, span) = (op.at as usize, (op.len + op.vlen) as usize);
        // One byte more, the first of the next literal: a number as recorded that goes
        // on here (`0.9` read on as `0.91`) is not the recorded value.
        let recorded = self.tape.body.get(at..at + span + 1)?;
        let here = self.text.as_bytes().get(self.pos..self.pos + span + 1)?;
        if !same(recorded, here) {
            return None;
        }
        if self.pos != at {
            let shift = self.pos.wrapping_sub(at) as u32;
            let end = i + 1 + op.inner as usize;
            for o in self.tape.ops.get_mut(i..end).unwrap_or_default() {
                o.at = o.at.wrapping_add(shift);
            }
        }
        self.pos += span;
        self.cursor = i + 1 + op.inner as usize;
        Some(op)
    }

    #[inline(always)]
    fn next_op(&mut self) -> Result<(usize, Op)> {
        let i = self.cursor;
        let Some(&op) = self.tape.ops.get(i) else {
            return Err(self.miss());
        };
        self.cursor += 1;
        Ok((i, op))
    }

    /// Replay: the next op must open an object or list of `kind`; its count and index
    /// (for [`Self::replay_close`]). Counts a level of depth as the full decode does.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn replay_open(
        &mut self,
        kind: OpKind,
    ) -> Result<(usize, usize)> {
        let (i, op) = self.next_op()?;
        if op.kind != kind || self.depth_left == 0 {
            return Err(self.miss());
        }
        self.depth_left -= 1;
        if let Some(o) = self.tape.ops.get_mut(i) {
            o.at = offset(self.pos);
        }
        Ok((op.n as usize, i))
    }

    /// The object or list of op `i` was replayed.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn replay_close(&mut self, i: usize) {
        self.depth_left += 1;
        let pos = self.pos;
        if let Some(o) = self.tape.ops.get_mut(i) {
            o.vlen = offset(pos - o.at as usize);
        }
    }

    /// Replay: the next op, a field value or an attribute that [`Self::replay_skip`]
    /// did not skip: its literal is consumed and the value after it starts with the
    /// recorded kind of token. Read the value, then [`Self::replay_value_end`].
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn replay_value(&mut self) -> Result<(usize, Op)> {
        let (i, op) = self.next_op()?;
        let (at, len) = (op.at as usize, op.len as usize);
        let recorded = self.tape.body.get(at..at + len);
        let here = self.text.as_bytes().get(self.pos..self.pos + len);
        match (recorded, here) {
            (Some(a), Some(b)) if same(a, b) => {}
            _ => return Err(self.miss()),
        }
        if let Some(o) = self.tape.ops.get_mut(i) {
            o.at = offset(self.pos);
        }
        self.pos += len;
        if token_class(self.byte()) != op.class
            || op.kind == OpKind::Object
            || op.kind == OpKind::List
        {
            return Err(self.miss());
        }
        Ok((i, op))
    }

    /// After the value of op `i` was read: where it ends in this body.
    #[inline(always)]
    pub(in crate::receiver::otlp_json) fn replay_value_end(&mut self, i: usize) {
        let pos = self.pos;
        if let Some(o) = self.tape.ops.get_mut(i) {
            o.vlen = offset(pos - (o.at + o.len) as usize);
        }
    }

    /// Replay done: every op used, and the rest of the body is the recorded one's rest.
    /// The tape now describes this body.
    pub(in crate::receiver::otlp_json) fn finish_replay(&mut self) -> Result<()> {
        let rest = self.text.as_bytes().get(self.pos..);
        let recorded = self.tape.body.get(self.tape.tail..);
        if self.cursor != self.tape.ops.len() || rest != recorded {
            return Err(self.miss());
        }
        self.tape.tail = self.pos;
        self.tape.body.clear();
        self.tape.body.extend_from_slice(self.text.as_bytes());
        self.pos = self.text.len();
        self.mode = Mode::Off;
        Ok(())
    }
}

/// Whether two slices hold the same bytes: sixteen at a time with SSE2 (part of the
/// x86-64 baseline), eight at a time elsewhere, then the tail (the literals and values
/// compared are mostly short; no call).
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let (Some(x), Some(y)) = (
        a.get(i..).and_then(|r| r.first_chunk::<16>()),
        b.get(i..).and_then(|r| r.first_chunk::<16>()),
    ) {
        // SAFETY: compiled only where SSE2 is enabled (every x86-64 CPU has it), the
        // only requirement of `sse2::equal16`.
        if !unsafe { sse2::equal16(x, y) } {
            return false;
        }
        i += 16;
    }
    let word = |s: &[u8], i: usize| {
        s.get(i..)
            .and_then(|r| r.first_chunk::<8>())
            .map(|w| u64::from_ne_bytes(*w))
    };
    while i + 8 <= a.len() {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    while let (Some(x), Some(y)) = (a.get(i), b.get(i)) {
        if x != y {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
    use std::arch::x86_64::{__m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};

    /// Whether sixteen bytes are the same sixteen bytes.
    #[inline]
    #[target_feature(enable = "sse2")]
    pub(super) fn equal16(a: &[u8; 16], b: &[u8; 16]) -> bool {
        // SAFETY: both pointers are to sixteen readable bytes; `loadu` takes any alignment.
        let (x, y) = unsafe {
            (
                _mm_loadu_si128(a.as_ptr().cast::<__m128i>()),
                _mm_loadu_si128(b.as_ptr().cast::<__m128i>()),
            )
        };
        _mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) == 0xFFFF
    }
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn same_agrees_with_slice_equality_at_every_length_and_place() {
        let a: Vec<u8> = (0..70u8).collect();
        for len in 0..a.len() {
            for at in 0..len {
                let mut b = a[..len].to_vec();
                assert!(same(&a[..len], &b));
                b[at] ^= 0x20;
                assert!(!same(&a[..len], &b), "len {len} at {at}");
            }
            assert!(!same(&a[..len], &a[..len.saturating_sub(1)]) || len == 0);
        }
    }
}
