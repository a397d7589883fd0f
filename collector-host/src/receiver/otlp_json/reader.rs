//! The JSON lexer under the OTLP/JSON decoder: a cursor over a UTF-8 body that reads one
//! token at a time for the message code above it. It follows serde_json's grammar and its
//! number classification exactly (the differential tests compare the two), but builds
//! nothing it is not asked for: keys and unescaped strings are borrowed from the body,
//! numbers are classified while their digits are scanned, and values of unknown fields
//! are checked for syntax by an iterative skipper without being decoded.

use component::recycle::Recycler;
use std::borrow::Cow;
use std::fmt;

pub(super) mod tape;

/// serde_json's recursion limit for decoded values: objects and arrays that are decoded
/// (not skipped) may nest this deep.
const RECURSION_LIMIT: u32 = 128;

/// A decoding error with the 1-based line and column where it was found. Boxed, so that
/// the `Result` every read of the decoder returns stays one or two words (as serde_json
/// does for the same reason): errors are rare, results on the hot path are not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError(Box<ErrorAt>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct ErrorAt {
    msg: String,
    line: usize,
    column: usize,
}

impl JsonError {
    /// An error at byte `offset` of `body`.
    #[cold]
    pub(super) fn at(body: &[u8], offset: usize, msg: impl fmt::Display) -> JsonError {
        let (line, column) = position(body, offset);
        JsonError(Box::new(ErrorAt {
            msg: msg.to_string(),
            line,
            column,
        }))
    }

    /// The message without the position.
    pub fn message(&self) -> &str {
        &self.0.msg
    }

    pub fn line(&self) -> usize {
        self.0.line
    }

    pub fn column(&self) -> usize {
        self.0.column
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.0.msg, self.0.line, self.0.column
        )
    }
}

impl std::error::Error for JsonError {}

/// 1-based line and column of a byte offset (a column counts bytes, as serde_json's do).
pub(super) fn position(body: &[u8], offset: usize) -> (usize, usize) {
    let before = body.get(..offset).unwrap_or(body);
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

pub(super) type Result<T> = std::result::Result<T, JsonError>;

/// A JSON number as serde_json classifies it: an integer literal that fits `u64`
/// (non-negative) or `i64` (negative, not `-0`) keeps its integer value; everything else
/// (fractions, exponents, `-0`, integers beyond 64 bits) is a double, which must be finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Number {
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Number {
    /// As a double, the way serde's `f64` impl converts every kind.
    pub(super) fn as_f64(self) -> f64 {
        match self {
            Number::U64(v) => v as f64,
            Number::I64(v) => v as f64,
            Number::F64(v) => v,
        }
    }

    /// How serde_json names the value in an `invalid type` error.
    pub(super) fn describe(self) -> String {
        match self {
            Number::U64(v) => format!("integer `{v}`"),
            Number::I64(v) => format!("integer `{v}`"),
            Number::F64(v) => format!("floating point `{v}`"),
        }
    }
}

/// What comes next, for dispatch and for `invalid type` errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Peek {
    Object,
    Array,
    String,
    Number,
    True,
    False,
    Null,
    /// End of input or a byte no value starts with.
    Other,
}

impl Peek {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Peek::Object => "map",
            Peek::Array => "sequence",
            Peek::String => "string",
            Peek::Number => "number",
            Peek::True | Peek::False => "boolean",
            Peek::Null => "null",
            Peek::Other => "no value",
        }
    }
}

/// Cursor over a JSON text.
pub(super) struct Reader<'a> {
    text: &'a str,
    pos: usize,
    /// Decoded objects and arrays that may still open.
    depth_left: u32,
    /// Container stack of the skipper, kept across calls (`true` = object).
    skip_stack: Vec<bool>,
    /// Per message type (see `JsonMessage::SLOT`), the fields of the first eight keys of
    /// the last object of that type, one byte each (0 = none or unknown): the keys the next
    /// object of the type is expected to have, in the same order.
    predicted: [u64; PREDICTION_SLOTS],
    /// Per prediction slot, the element counts of the last repeated message field of that
    /// type and of the last attribute list of a message of that type: the next one is
    /// allocated at that size instead of growing from empty.
    lengths: [[u8; 2]; PREDICTION_SLOTS],
    /// Where decoded strings and the hot vectors get their buffers (see
    /// [`component::recycle`]); [`super::decode_metrics`] lends it the thread's pool.
    pub(super) pool: Recycler,
    /// Whether the body's shape is being recorded or replayed (see [`tape`]).
    mode: tape::Mode,
    /// The shape recorded or replayed, lent by [`super::decode_metrics`].
    tape: tape::Tape,
    /// Recording: where the literal before the next value starts.
    lit_start: usize,
    /// Replaying: the next op.
    cursor: usize,
    /// Replaying: whether the message being read into holds what the tape's body decoded
    /// to (false inside a message or list made afresh), so that values as recorded may
    /// be skipped.
    skippable: bool,
}

/// Which list a [`Reader::length_hint`] is about.
#[derive(Debug, Clone, Copy)]
pub(super) enum ListKind {
    /// A repeated field whose elements are messages of the slot's type.
    Messages = 0,
    /// The `attributes` of a message of the slot's type.
    Attributes = 1,
}

/// Longest key [`Reader::eat_key`] compares, quotes and colon included.
pub(super) const QUOTED_KEY_MAX: usize = 32;

/// A key written as `"name":`, zero-padded to [`QUOTED_KEY_MAX`] bytes and split into two
/// little-endian words with masks of its bytes, so [`Reader::eat_key`] compares it
/// without a call or a loop.
pub(crate) struct QuotedKey {
    padded: [u8; QUOTED_KEY_MAX],
    len: usize,
    lo: u128,
    hi: u128,
    lo_mask: u128,
    hi_mask: u128,
}

impl QuotedKey {
    pub(crate) const fn new(quoted: &str) -> QuotedKey {
        let bytes = quoted.as_bytes();
        assert!(bytes.len() <= QUOTED_KEY_MAX, "key too long for QuotedKey");
        let mut padded = [0u8; QUOTED_KEY_MAX];
        let mut i = 0;
        while i < bytes.len() {
            padded[i] = bytes[i];
            i += 1;
        }
        let (lo_len, hi_len) = if bytes.len() > 16 {
            (16, bytes.len() - 16)
        } else {
            (bytes.len(), 0)
        };
        let mut lo = [0u8; 16];
        let mut hi = [0u8; 16];
        let mut lo_mask = [0u8; 16];
        let mut hi_mask = [0u8; 16];
        let mut j = 0;
        while j < 16 {
            lo[j] = padded[j];
            hi[j] = padded[16 + j];
            lo_mask[j] = if j < lo_len { 0xff } else { 0 };
            hi_mask[j] = if j < hi_len { 0xff } else { 0 };
            j += 1;
        }
        QuotedKey {
            padded,
            len: bytes.len(),
            lo: u128::from_le_bytes(lo),
            hi: u128::from_le_bytes(hi),
            lo_mask: u128::from_le_bytes(lo_mask),
            hi_mask: u128::from_le_bytes(hi_mask),
        }
    }

    /// The key's bytes, `"name":`.
    pub(super) fn bytes(&self) -> &[u8] {
        self.padded.get(..self.len).unwrap_or_default()
    }
}

/// Number of key prediction slots (`JsonMessage::SLOT` values).
pub(super) const PREDICTION_SLOTS: usize = 16;

/// A byte that ends the plain run of a string: `"`, `\` or a control character.
#[inline]
fn is_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Index of the first byte at or after `i` that ends a plain string run (`bytes.len()` if
/// none). Sixteen bytes at a time with SSE2 (part of the x86-64 baseline), eight at a time
/// elsewhere, then byte by byte for the tail.
#[inline]
fn find_special(bytes: &[u8], mut i: usize) -> usize {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let Some(chunk) = bytes.get(i..).and_then(|rest| rest.first_chunk::<16>()) {
        // SAFETY: this code is only compiled for targets with SSE2 enabled (the cfg above;
        // every x86-64 CPU has it), which is the only requirement of `first_special`.
        if let Some(at) = unsafe { sse2::first_special(chunk) } {
            return i + at;
        }
        i += 16;
    }
    while let Some(chunk) = bytes.get(i..).and_then(|rest| rest.first_chunk::<8>()) {
        if let Some(at) = swar_first_special(chunk) {
            return i + at;
        }
        i += 8;
    }
    while let Some(&b) = bytes.get(i) {
        if is_special(b) {
            return i;
        }
        i += 1;
    }
    i
}

/// The first special byte of eight, by word arithmetic: each mask sets the top bit of a
/// byte that matches, and a false positive can only sit above a true one (a borrow runs
/// upwards), so the lowest set bit is exact.
#[inline]
fn swar_first_special(chunk: &[u8; 8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let w = u64::from_le_bytes(*chunk);
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let hits = (quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (w.wrapping_sub(ONES * 0x20) & !w);
    let hits = hits & HIGHS;
    (hits != 0).then(|| (hits.trailing_zeros() / 8) as usize)
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x,
        _mm_set1_epi8,
    };

    /// The first special byte of sixteen: `"` or `\` by equality, a control byte by
    /// `min(b, 0x1f) == b` (unsigned, so bytes of multi-byte UTF-8 never match).
    #[inline]
    #[target_feature(enable = "sse2")]
    pub(super) fn first_special(chunk: &[u8; 16]) -> Option<usize> {
        let (lo, hi) = chunk.split_at(8);
        let word = |half: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(half);
            i64::from_le_bytes(w)
        };
        // Two 8-byte loads that LLVM merges into one unaligned 16-byte load.
        let v: __m128i = _mm_set_epi64x(word(hi), word(lo));
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        let mask = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control));
        (mask != 0).then(|| mask.trailing_zeros() as usize)
    }
}

/// Whether all eight bytes (little-endian in `w`) are ASCII digits: each byte's high
/// nibble is 3 and adding 6 does not carry out of its low nibble.
#[inline]
fn eight_digits(w: u64) -> bool {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    ((w & HIGH_NIBBLES) | (((w.wrapping_add(0x0606_0606_0606_0606)) & HIGH_NIBBLES) >> 4))
        == 0x3333_3333_3333_3333
}

/// The value of eight ASCII digits (little-endian in `w`, checked by [`eight_digits`]),
/// combining pairs, then quads, then halves.
#[inline]
fn eight_digits_value(w: u64) -> u64 {
    let w = w - 0x3030_3030_3030_3030;
    let w = (w.wrapping_mul(10) + (w >> 8)) & 0x00FF_00FF_00FF_00FF;
    let w = (w.wrapping_mul(100) + (w >> 16)) & 0x0000_FFFF_0000_FFFF;
    (w.wrapping_mul(10_000) + (w >> 32)) & 0xFFFF_FFFF
}

/// Powers of ten that are exact doubles.
const EXACT_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The value of a JSON number literal (syntax already checked) when it is exactly
/// computable with one rounding: at most 19 significant-or-not digits forming `w <= 2^53`
/// and a decimal exponent `e` with `|e| <= 22`, so `w` and `10^|e|` are exact doubles and
/// one IEEE multiplication or division rounds `w * 10^e` correctly (Clinger's fast path,
/// the one the standard library takes for these inputs too). `None` for anything else,
/// which the caller hands to `str::parse`; where this answers, `str::parse` gives the same
/// bits.
#[inline]
fn exact_f64(lit: &[u8]) -> Option<f64> {
    let (negative, mut i) = match lit.first() {
        Some(b'-') => (true, 1),
        _ => (false, 0),
    };
    let mut w: u64 = 0;
    let mut n = 0usize;
    let mut exp: i64 = 0;
    while let Some(&d @ b'0'..=b'9') = lit.get(i) {
        // A 20th digit could overflow `w`: decline before multiplying.
        if n == SAFE_DIGITS {
            return None;
        }
        w = w * 10 + u64::from(d - b'0');
        n += 1;
        i += 1;
    }
    if lit.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&d @ b'0'..=b'9') = lit.get(i) {
            if n == SAFE_DIGITS {
                return None;
            }
            w = w * 10 + u64::from(d - b'0');
            n += 1;
            exp -= 1;
            i += 1;
        }
    }
    if let Some(b'e' | b'E') = lit.get(i) {
        i += 1;
        let exp_negative = match lit.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let mut e: i64 = 0;
        while let Some(&d @ b'0'..=b'9') = lit.get(i) {
            e = e * 10 + i64::from(d - b'0');
            i += 1;
            if e > 1000 {
                return None;
            }
        }
        exp += if exp_negative { -e } else { e };
    }
    if i != lit.len() || w > 1 << 53 {
        return None;
    }
    let pow = *EXACT_POW10.get(exp.unsigned_abs() as usize)?;
    let v = if exp < 0 {
        w as f64 / pow
    } else {
        w as f64 * pow
    };
    Some(if negative { -v } else { v })
}

/// Most ASCII digits a `u64` always holds (`10^19 - 1 < u64::MAX`).
const SAFE_DIGITS: usize = 19;

/// The digit run at `bytes[i..]`, at most [`SAFE_DIGITS`] long: its value and the index
/// after it. Eight digits at a time while eight more fit, then one at a time; the value
/// cannot overflow.
#[inline]
fn safe_digits(bytes: &[u8], mut i: usize) -> (u64, usize) {
    let limit = i + SAFE_DIGITS;
    let mut v: u64 = 0;
    while i + 8 <= limit {
        let Some(chunk) = bytes.get(i..).and_then(|rest| rest.first_chunk::<8>()) else {
            break;
        };
        let w = u64::from_le_bytes(*chunk);
        if !eight_digits(w) {
            break;
        }
        v = v * 100_000_000 + eight_digits_value(w);
        i += 8;
    }
    while i < limit {
        match bytes.get(i) {
            Some(&d @ b'0'..=b'9') => {
                v = v * 10 + u64::from(d - b'0');
                i += 1;
            }
            _ => break,
        }
    }
    (v, i)
}

impl<'a> Reader<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Reader {
            text,
            pos: 0,
            depth_left: RECURSION_LIMIT,
            skip_stack: Vec::new(),
            predicted: [0; PREDICTION_SLOTS],
            lengths: [[0; 2]; PREDICTION_SLOTS],
            pool: Recycler::default(),
            mode: tape::Mode::Off,
            tape: tape::Tape::new(),
            lit_start: 0,
            cursor: 0,
            skippable: false,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// An error at the cursor.
    #[cold]
    pub(super) fn error(&self, msg: impl fmt::Display) -> JsonError {
        JsonError::at(self.bytes(), self.pos, msg)
    }

    /// `invalid type: <what is next>, expected <expecting>`.
    #[cold]
    pub(super) fn invalid_type(&mut self, expecting: &str) -> JsonError {
        let found = self.peek();
        self.error(format_args!(
            "invalid type: {}, expected {expecting}",
            found.describe()
        ))
    }

    #[inline]
    fn byte(&self) -> Option<u8> {
        self.bytes().get(self.pos).copied()
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.byte() {
            self.pos += 1;
        }
    }

    /// The kind of the next value (after whitespace), without consuming it.
    #[inline]
    pub(super) fn peek(&mut self) -> Peek {
        self.skip_ws();
        match self.byte() {
            Some(b'{') => Peek::Object,
            Some(b'[') => Peek::Array,
            Some(b'"') => Peek::String,
            Some(b'-' | b'0'..=b'9') => Peek::Number,
            Some(b't') => Peek::True,
            Some(b'f') => Peek::False,
            Some(b'n') => Peek::Null,
            _ => Peek::Other,
        }
    }

    /// Only whitespace may follow the top-level value.
    pub(super) fn end(&mut self) -> Result<()> {
        self.skip_ws();
        if self.pos == self.text.len() {
            Ok(())
        } else {
            Err(self.error("trailing characters"))
        }
    }

    #[cold]
    fn eof_or(&self, msg: &str) -> JsonError {
        if self.pos >= self.text.len() {
            self.error(format_args!("EOF while parsing {msg}"))
        } else {
            self.error(format_args!("expected {msg}"))
        }
    }

    fn expect_literal(&mut self, word: &'static str) -> Result<()> {
        let rest = self.bytes().get(self.pos..).unwrap_or_default();
        if rest.starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else if word.as_bytes().starts_with(rest) {
            self.pos = self.text.len();
            Err(self.error("EOF while parsing a value"))
        } else {
            Err(self.error("expected ident"))
        }
    }

    /// Consume `null` if it is next.
    #[inline]
    pub(super) fn null(&mut self) -> Result<bool> {
        if self.peek() == Peek::Null {
            self.expect_literal("null")?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// `true` or `false`, else `None` with nothing consumed.
    pub(super) fn bool(&mut self) -> Result<Option<bool>> {
        match self.peek() {
            Peek::True => self.expect_literal("true").map(|()| Some(true)),
            Peek::False => self.expect_literal("false").map(|()| Some(false)),
            _ => Ok(None),
        }
    }

    fn enter(&mut self) -> Result<()> {
        if self.depth_left == 0 {
            return Err(self.error("recursion limit exceeded"));
        }
        self.depth_left -= 1;
        self.pos += 1;
        Ok(())
    }

    /// Open a decoded object (`{` must be next; the caller checked with [`Self::peek`]).
    pub(super) fn begin_object(&mut self) -> Result<()> {
        self.enter()
    }

    /// Open a decoded array (`[` must be next).
    pub(super) fn begin_array(&mut self) -> Result<()> {
        self.enter()
    }

    /// The next key of an open object, with its `:` consumed; `None` at the closing `}`.
    /// `first` is true before the first key.
    #[inline(always)]
    pub(super) fn next_key(&mut self, first: &mut bool) -> Result<Option<Cow<'a, str>>> {
        if !self.key_start(first)? {
            return Ok(None);
        }
        self.key_rest().map(Some)
    }

    /// Up to the next key of an open object: `false` at the closing `}` (consumed), else
    /// `true` with the cursor on the key's opening quote. `first` is true before the first
    /// key. Follow with [`Self::eat_key`] or [`Self::key_rest`].
    #[inline(always)]
    pub(super) fn key_start(&mut self, first: &mut bool) -> Result<bool> {
        self.skip_ws();
        match self.byte() {
            Some(b'}') => {
                self.pos += 1;
                self.depth_left += 1;
                return Ok(false);
            }
            Some(b',') if !*first => {
                self.pos += 1;
                self.skip_ws();
            }
            _ if !*first => return Err(self.eof_or("`,` or `}`")),
            _ => {}
        }
        *first = false;
        if self.byte() != Some(b'"') {
            return Err(self.eof_or("a string key"));
        }
        Ok(true)
    }

    /// After [`Self::key_start`]: if the bytes `quoted` (a key written as `"name":`, quotes
    /// and colon included, no escapes) are next verbatim, consume them and return `true`;
    /// else consume nothing. [`Self::key_rest`] would read exactly these bytes as the key
    /// `name` and its colon.
    #[inline(always)]
    pub(super) fn eat_key(&mut self, quoted: &QuotedKey) -> bool {
        let rest = self.bytes().get(self.pos..).unwrap_or_default();
        let hit = match rest.first_chunk::<QUOTED_KEY_MAX>() {
            // Two 16-byte words each side, the bytes past the key masked off.
            Some(chunk) => {
                let (lo, hi) = chunk.split_at(16);
                let word = |half: &[u8]| {
                    let mut w = [0u8; 16];
                    w.copy_from_slice(half);
                    u128::from_le_bytes(w)
                };
                ((word(lo) ^ quoted.lo) & quoted.lo_mask)
                    | ((word(hi) ^ quoted.hi) & quoted.hi_mask)
                    == 0
            }
            // Near the end of the body.
            None => rest.starts_with(quoted.bytes()),
        };
        if hit {
            self.pos += quoted.len;
        }
        hit
    }

    /// After [`Self::key_start`]: the key (decoded) and its colon.
    #[inline(always)]
    pub(super) fn key_rest(&mut self) -> Result<Cow<'a, str>> {
        self.pos += 1;
        let key = self.string_body()?;
        self.colon()?;
        Ok(key)
    }

    /// The field codes of the keys of the last object read into prediction slot `slot`.
    #[inline(always)]
    pub(super) fn predicted(&self, slot: usize) -> u64 {
        self.predicted.get(slot).copied().unwrap_or_default()
    }

    #[inline(always)]
    pub(super) fn set_predicted(&mut self, slot: usize, codes: u64) {
        if let Some(p) = self.predicted.get_mut(slot) {
            *p = codes;
        }
    }

    /// Element count of the last list of this kind in prediction slot `slot`.
    #[inline(always)]
    pub(super) fn length_hint(&self, slot: usize, kind: ListKind) -> usize {
        self.lengths
            .get(slot)
            .map_or(0, |l| usize::from(l[kind as usize]))
    }

    #[inline(always)]
    pub(super) fn set_length_hint(&mut self, slot: usize, kind: ListKind, len: usize) {
        if let Some(l) = self.lengths.get_mut(slot) {
            l[kind as usize] = u8::try_from(len).unwrap_or(u8::MAX);
        }
    }

    /// Bytes left after the cursor.
    #[inline(always)]
    pub(super) fn remaining(&self) -> usize {
        self.text.len().saturating_sub(self.pos)
    }

    fn colon(&mut self) -> Result<()> {
        self.skip_ws();
        if self.byte() == Some(b':') {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.eof_or("`:`"))
        }
    }

    /// Whether another element of an open array follows; `false` at the closing `]`.
    #[inline(always)]
    pub(super) fn next_element(&mut self, first: &mut bool) -> Result<bool> {
        self.skip_ws();
        match self.byte() {
            Some(b']') => {
                self.pos += 1;
                self.depth_left += 1;
                Ok(false)
            }
            Some(b',') if !*first => {
                self.pos += 1;
                self.skip_ws();
                if self.byte() == Some(b']') {
                    return Err(self.error("trailing comma"));
                }
                Ok(true)
            }
            _ if !*first => Err(self.eof_or("`,` or `]`")),
            None => Err(self.eof_or("a list")),
            Some(_) => {
                *first = false;
                Ok(true)
            }
        }
    }

    /// A string value (`"` must be next), decoded; borrowed when it has no escapes.
    #[inline]
    pub(super) fn string(&mut self) -> Result<Cow<'a, str>> {
        self.pos += 1;
        self.string_body()
    }

    /// The rest of a string after its opening quote.
    #[inline(always)]
    fn string_body(&mut self) -> Result<Cow<'a, str>> {
        let start = self.pos;
        let end = find_special(self.bytes(), start);
        if self.bytes().get(end) == Some(&b'"') {
            self.pos = end + 1;
            // `start` follows a quote and `end` is a quote: both are char boundaries.
            return match self.text.get(start..end) {
                Some(s) => Ok(Cow::Borrowed(s)),
                None => Err(self.error("invalid UTF-8 in string")),
            };
        }
        self.pos = end;
        self.escaped_string(start).map(Cow::Owned)
    }

    /// The slow path of a string: escapes, or an error.
    #[cold]
    fn escaped_string(&mut self, start: usize) -> Result<String> {
        let mut out = String::with_capacity(self.pos - start + 16);
        let mut run = start;
        loop {
            let end = find_special(self.bytes(), self.pos);
            self.pos = end;
            match self.byte() {
                None => return Err(self.error("EOF while parsing a string")),
                Some(b'"') => {
                    out.push_str(self.text.get(run..end).unwrap_or_default());
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    out.push_str(self.text.get(run..end).unwrap_or_default());
                    self.pos += 1;
                    let c = self.escape()?;
                    out.push(c);
                    run = self.pos;
                }
                Some(_) => {
                    return Err(self.error(
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ));
                }
            }
        }
    }

    /// One escape after its backslash, decoded.
    fn escape(&mut self) -> Result<char> {
        let Some(b) = self.byte() else {
            return Err(self.error("EOF while parsing a string"));
        };
        self.pos += 1;
        Ok(match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                match first {
                    0xD800..=0xDBFF => {
                        if self.bytes().get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(self.error("lone leading surrogate in hex escape"));
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(self.error("lone leading surrogate in hex escape"));
                        }
                        let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                        char::from_u32(c).ok_or_else(|| self.error("invalid unicode code point"))?
                    }
                    0xDC00..=0xDFFF => {
                        return Err(self.error("unexpected end of hex escape"));
                    }
                    c => {
                        char::from_u32(c).ok_or_else(|| self.error("invalid unicode code point"))?
                    }
                }
            }
            _ => {
                self.pos -= 1;
                return Err(self.error("invalid escape"));
            }
        })
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u32> {
        let mut v = 0u32;
        for _ in 0..4 {
            let digit = self.byte().and_then(|b| char::from(b).to_digit(16));
            let Some(d) = digit else {
                return Err(if self.byte().is_none() {
                    self.error("EOF while parsing a string")
                } else {
                    self.error("invalid escape")
                });
            };
            v = v * 16 + d;
            self.pos += 1;
        }
        Ok(v)
    }

    /// The attribute shape every OTLP/JSON marshaler writes for a string value,
    /// `{"key":"K","value":{"stringValue":"V"}}` with no whitespace and no escapes: if it is
    /// next, consume it and return `(K, V)`; else consume nothing. The general path decodes
    /// exactly these bytes to the same `KeyValue`; this one skips its per-key dispatch.
    #[inline]
    pub(super) fn plain_string_attribute(&mut self) -> Option<(&'a str, &'a str)> {
        const HEAD: &[u8] = b"{\"key\":\"";
        const MIDDLE: &[u8] = b"\",\"value\":{\"stringValue\":\"";
        const TAIL: &[u8] = b"\"}}";
        // The two objects count against the recursion limit like decoded ones.
        if self.depth_left < 2 {
            return None;
        }
        let bytes = self.bytes();
        let key_start = self.pos + HEAD.len();
        if !bytes.get(self.pos..)?.starts_with(HEAD) {
            return None;
        }
        // A plain run ends at a quote, a backslash or a control byte; only a quote followed
        // by the expected bytes continues.
        let key_end = find_special(bytes, key_start);
        if !bytes.get(key_end..)?.starts_with(MIDDLE) {
            return None;
        }
        let value_start = key_end + MIDDLE.len();
        let value_end = find_special(bytes, value_start);
        if !bytes.get(value_end..)?.starts_with(TAIL) {
            return None;
        }
        let key = self.text.get(key_start..key_end)?;
        let value = self.text.get(value_start..value_end)?;
        self.pos = value_end + TAIL.len();
        Some((key, value))
    }

    /// A string of 1 to 19 ASCII digits and nothing else, whose value is at most `max`
    /// (`"` must be next): consumed, and its value. Else `None`, nothing consumed, and the
    /// caller decodes the string and parses it the general way (which gives the same value
    /// for these strings). Timestamps take this path on every point.
    #[inline]
    pub(super) fn digit_string(&mut self, max: u64) -> Option<u64> {
        let start = self.pos + 1;
        // Nineteen digits and the closing quote (every nanosecond timestamp from 2001 to
        // 2286) in straight-line code; anything else the general way below.
        if let Some(c) = self
            .bytes()
            .get(start..)
            .and_then(|rest| rest.first_chunk::<20>())
        {
            let (w0, rest) = c.split_at(8);
            let (w1, tail) = rest.split_at(8);
            let word = |b: &[u8]| {
                let mut w = [0u8; 8];
                w.copy_from_slice(b);
                u64::from_le_bytes(w)
            };
            let (w0, w1) = (word(w0), word(w1));
            if let [d0 @ b'0'..=b'9', d1 @ b'0'..=b'9', d2 @ b'0'..=b'9', b'"'] = *tail
                && eight_digits(w0)
                && eight_digits(w1)
            {
                let v = eight_digits_value(w0) * 100_000_000_000
                    + eight_digits_value(w1) * 1000
                    + u64::from(d0 - b'0') * 100
                    + u64::from(d1 - b'0') * 10
                    + u64::from(d2 - b'0');
                if v <= max {
                    self.pos = start + 20;
                    return Some(v);
                }
                return None;
            }
        }
        let (v, end) = safe_digits(self.bytes(), start);
        if end > start && v <= max && self.bytes().get(end) == Some(&b'"') {
            self.pos = end + 1;
            Some(v)
        } else {
            None
        }
    }

    /// A number (`-` or a digit must be next), classified as serde_json does.
    pub(super) fn number(&mut self) -> Result<Number> {
        let start = self.pos;
        let (negative, magnitude, float) = self.scan_number()?;
        if !float {
            if !negative {
                return Ok(Number::U64(magnitude));
            }
            // As serde_json: `-0` and magnitudes beyond `i64::MIN` are doubles.
            let neg = (magnitude as i64).wrapping_neg();
            if neg < 0 {
                return Ok(Number::I64(neg));
            }
        }
        let literal = self.text.get(start..self.pos).unwrap_or_default();
        if let Some(v) = exact_f64(literal.as_bytes()) {
            return Ok(Number::F64(v));
        }
        match literal.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Number::F64(v)),
            _ => Err(JsonError::at(self.bytes(), start, "number out of range")),
        }
    }

    /// The syntax of a number (`-` or a digit must be next): whether it is negative, the
    /// magnitude of its integer part, and whether it is a double for serde_json (it has a
    /// fraction or an exponent, or its integer part overflows a `u64`).
    fn scan_number(&mut self) -> Result<(bool, u64, bool)> {
        let negative = self.byte() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        // Integer part: `0` or a non-zero digit and more digits.
        let mut magnitude: u64 = 0;
        let mut float = false;
        match self.byte() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.byte() {
                    return Err(self.error("invalid number"));
                }
            }
            Some(b'1'..=b'9') => {
                // The first nineteen digits cannot overflow; any further ones are checked.
                (magnitude, self.pos) = safe_digits(self.bytes(), self.pos);
                while let Some(d @ b'0'..=b'9') = self.byte() {
                    match magnitude
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(u64::from(d - b'0')))
                    {
                        Some(m) => magnitude = m,
                        None => float = true,
                    }
                    self.pos += 1;
                }
            }
            _ => return Err(self.eof_or("a number")),
        }
        if self.byte() == Some(b'.') {
            float = true;
            self.pos += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.byte() {
            float = true;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.byte() {
                self.pos += 1;
            }
            self.digits()?;
        }
        Ok((negative, magnitude, float))
    }

    /// One or more digits.
    fn digits(&mut self) -> Result<()> {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.byte() {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.eof_or("a digit"));
        }
        Ok(())
    }

    /// Skip one value of any kind, checking its syntax only (strings are not decoded, so a
    /// lone surrogate escape passes, and numbers are not range-checked, as serde_json's
    /// skipper). Iterative: nesting depth is not limited.
    pub(super) fn skip_value(&mut self) -> Result<()> {
        let mut stack = std::mem::take(&mut self.skip_stack);
        stack.clear();
        let result = self.skip_with(&mut stack);
        self.skip_stack = stack;
        result
    }

    fn skip_with(&mut self, stack: &mut Vec<bool>) -> Result<()> {
        loop {
            // One value, or the opening of a container.
            match self.peek() {
                Peek::Object => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.byte() == Some(b'}') {
                        self.pos += 1;
                    } else {
                        stack.push(true);
                        self.skip_key()?;
                        continue;
                    }
                }
                Peek::Array => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.byte() == Some(b']') {
                        self.pos += 1;
                    } else {
                        stack.push(false);
                        continue;
                    }
                }
                Peek::String => {
                    self.pos += 1;
                    self.skip_string()?;
                }
                Peek::Number => self.skip_number()?,
                Peek::True => self.expect_literal("true")?,
                Peek::False => self.expect_literal("false")?,
                Peek::Null => self.expect_literal("null")?,
                Peek::Other => return Err(self.eof_or("value")),
            }
            // After a value: close containers until one continues.
            loop {
                let Some(&object) = stack.last() else {
                    return Ok(());
                };
                self.skip_ws();
                match self.byte() {
                    Some(b',') => {
                        self.pos += 1;
                        if object {
                            self.skip_ws();
                            self.skip_key()?;
                        } else {
                            self.skip_ws();
                            if self.byte() == Some(b']') {
                                return Err(self.error("trailing comma"));
                            }
                        }
                        break;
                    }
                    Some(b'}') if object => {
                        self.pos += 1;
                        stack.pop();
                    }
                    Some(b']') if !object => {
                        self.pos += 1;
                        stack.pop();
                    }
                    _ if object => return Err(self.eof_or("`,` or `}`")),
                    _ => return Err(self.eof_or("`,` or `]`")),
                }
            }
        }
    }

    /// A key and its colon inside a skipped object.
    fn skip_key(&mut self) -> Result<()> {
        if self.byte() != Some(b'"') {
            return Err(if self.byte() == Some(b'}') {
                self.error("trailing comma")
            } else {
                self.eof_or("a string key")
            });
        }
        self.pos += 1;
        self.skip_string()?;
        self.colon()
    }

    /// The rest of a skipped string: escapes checked for syntax only.
    fn skip_string(&mut self) -> Result<()> {
        loop {
            self.pos = find_special(self.bytes(), self.pos);
            match self.byte() {
                None => return Err(self.error("EOF while parsing a string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.byte() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.pos += 1;
                        }
                        Some(b'u') => {
                            self.pos += 1;
                            self.hex4()?;
                        }
                        None => return Err(self.error("EOF while parsing a string")),
                        Some(_) => return Err(self.error("invalid escape")),
                    }
                }
                Some(_) => {
                    return Err(self.error(
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ));
                }
            }
        }
    }

    /// A skipped number: syntax only (no range check, as serde_json's skipper).
    fn skip_number(&mut self) -> Result<()> {
        self.scan_number().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_special_finds_the_first_stop_byte() {
        let cases: &[(&[u8], usize)] = &[
            (b"", 0),
            (b"abc", 3),
            (b"abcdefghij\"", 10),
            (b"ab\"cdefghij\"", 2),
            (b"abcdefgh\\", 8),
            (b"abcdefg\x1f", 7),
            (b"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", 8),
            (b"\x7f\x80\xff\x20\x21\x22", 5),
            (b"0123456789abcdef\x00", 16),
        ];
        for &(input, want) in cases {
            assert_eq!(find_special(input, 0), want, "{input:?}");
        }
        // Every position, every byte value, against the byte-by-byte rule.
        for b in 0..=255u8 {
            for at in 0..40 {
                let mut buf = vec![b'a'; 40];
                buf[at] = b;
                let want = buf.iter().position(|&c| is_special(c)).unwrap_or(buf.len());
                assert_eq!(find_special(&buf, 0), want, "byte {b:#x} at {at}");
            }
        }
    }

    /// Number classification against serde_json's own (`serde_json::Number`).
    #[test]
    fn numbers_classify_as_serde_json_does() {
        for lit in [
            "0",
            "-0",
            "7",
            "-7",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "1.5",
            "-0.0",
            "1e3",
            "1E+3",
            "2.5e-3",
            "123456789012345678901234567890",
            "0.1",
            "1.7976931348623157e308",
            "5e-324",
            "1e-400",
        ] {
            let mut r = Reader::new(lit);
            let ours = r.number().unwrap();
            assert_eq!(r.pos, lit.len(), "{lit}");
            let theirs: serde_json::Number = serde_json::from_str(lit).unwrap();
            let want = if let Some(u) = theirs.as_u64() {
                Number::U64(u)
            } else if let Some(i) = theirs.as_i64() {
                Number::I64(i)
            } else {
                Number::F64(theirs.as_f64().unwrap())
            };
            match (ours, want) {
                (Number::F64(a), Number::F64(b)) => {
                    assert_eq!(a.to_bits(), b.to_bits(), "{lit}")
                }
                (a, b) => assert_eq!(a, b, "{lit}"),
            }
        }
        for bad in [
            "-", "01", "1.", "1e", "1e+", "-a", ".5", "1.e3", "1e400", "-1e400",
        ] {
            let mut r = Reader::new(bad);
            let ours = r.number().and_then(|_| r.end());
            assert!(ours.is_err(), "{bad}");
            assert!(
                serde_json::from_str::<serde_json::Number>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn strings_decode_escapes_and_borrow_plain_text() {
        let mut r = Reader::new(r#""plain" "a\"b\\c\/\b\f\n\r\t\u00e9\ud83d\ude00z""#);
        assert!(matches!(r.string().unwrap(), Cow::Borrowed("plain")));
        r.skip_ws();
        assert_eq!(r.string().unwrap(), "a\"b\\c/\u{8}\u{c}\n\r\té😀z");
        for bad in [
            r#""\ud800""#,
            r#""\ud800\u0041""#,
            r#""\udc00""#,
            r#""\x""#,
            r#""\u12""#,
            "\"a\u{1}\"",
            r#""abc"#,
            r#""a\"#,
        ] {
            let mut r = Reader::new(bad);
            assert!(r.string().is_err(), "{bad}");
            assert!(serde_json::from_str::<String>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_string_attribute_takes_only_the_exact_shape() {
        let mut r = Reader::new(r#"{"key":"k.a","value":{"stringValue":"v b"}},"#);
        assert_eq!(r.plain_string_attribute(), Some(("k.a", "v b")));
        assert_eq!(r.byte(), Some(b','));
        for miss in [
            r#"{"key":"k\"","value":{"stringValue":"v"}}"#,
            r#"{"key":"k","value":{"stringValue":"v\n"}}"#,
            r#"{"key":"k","value":{"stringValue":"v","x":1}}"#,
            r#"{"key":"k","value":{"intValue":"1"}}"#,
            r#"{"key":"k","value":{"stringValue":"v"}"#,
            r#"{"key":"k", "value":{"stringValue":"v"}}"#,
            r#"{"key":"k""#,
        ] {
            let mut r = Reader::new(miss);
            assert_eq!(r.plain_string_attribute(), None, "{miss}");
            assert_eq!(r.pos, 0, "{miss}");
        }
        // Too deep for two more objects: the general path reports the limit.
        let mut r = Reader::new(r#"{"key":"k","value":{"stringValue":"v"}}"#);
        r.depth_left = 1;
        assert_eq!(r.plain_string_attribute(), None);
    }

    /// The digit run of `bytes[i..]`, at most 19 digits, one digit at a time.
    fn naive_digits(bytes: &[u8], mut i: usize) -> (u64, usize) {
        let mut v = 0u64;
        let start = i;
        while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
            if i - start == SAFE_DIGITS {
                break;
            }
            v = v * 10 + u64::from(d - b'0');
            i += 1;
        }
        (v, i)
    }

    #[test]
    fn eight_digits_at_a_time_agree_with_one_at_a_time() {
        // Every byte value at every place of a long digit run, from several starts.
        for b in 0..=255u8 {
            for at in 0..26 {
                let mut buf: Vec<u8> = (0..26u8).map(|i| b'0' + (i * 7 + 3) % 10).collect();
                buf[at] = b;
                for start in [0, 1, 3, 8] {
                    assert_eq!(
                        safe_digits(&buf, start),
                        naive_digits(&buf, start),
                        "byte {b:#x} at {at} from {start}"
                    );
                }
            }
        }
        for w in [*b"00000000", *b"99999999", *b"12345678", *b"90000009"] {
            let n = u64::from_le_bytes(w);
            assert!(eight_digits(n));
            let want: u64 = std::str::from_utf8(&w).unwrap().parse().unwrap();
            assert_eq!(eight_digits_value(n), want);
        }
        for w in [
            *b"/0000000",
            *b"0000000:",
            *b"1234567 ",
            [0xff, b'0', b'0', b'0', b'0', b'0', b'0', b'0'],
        ] {
            assert!(!eight_digits(u64::from_le_bytes(w)), "{w:?}");
        }
        // Truncated input: the chunk loop must not read past the end.
        assert_eq!(safe_digits(b"1234567", 0), (1_234_567, 7));
        assert_eq!(safe_digits(b"123456789", 0), (123_456_789, 9));
        assert_eq!(safe_digits(b"", 0), (0, 0));
    }

    #[test]
    fn digit_strings_take_the_shortcut_only_when_plain_and_in_range() {
        for (lit, max, want) in [
            (
                r#""1763769600000000000""#,
                u64::MAX,
                Some(1_763_769_600_000_000_000),
            ),
            (r#""0000000000000000001""#, u64::MAX, Some(1)),
            (
                r#""9999999999999999999""#,
                u64::MAX,
                Some(9_999_999_999_999_999_999),
            ),
            (r#""0""#, u64::MAX, Some(0)),
            (
                r#""9223372036854775807""#,
                i64::MAX as u64,
                Some(i64::MAX as u64),
            ),
            // Left to the general path (which decides the value or the error).
            (r#""9223372036854775808""#, i64::MAX as u64, None),
            (r#""18446744073709551615""#, u64::MAX, None),
            (r#""00000000000000000001""#, u64::MAX, None),
            (r#""""#, u64::MAX, None),
            (r#""+7""#, u64::MAX, None),
            (r#""-7""#, u64::MAX, None),
            (r#"" 7""#, u64::MAX, None),
            (r#""7 ""#, u64::MAX, None),
            (r#""7\u0030""#, u64::MAX, None),
            (r#""\u0037""#, u64::MAX, None),
            (r#""1.5""#, u64::MAX, None),
            (r#""12345"#, u64::MAX, None),
            // Nineteen digits with more body after them (the straight-line path) and its
            // near misses.
            (
                r#""1763769600000000000"}"#,
                u64::MAX,
                Some(1_763_769_600_000_000_000),
            ),
            (
                r#""9223372036854775807","#,
                i64::MAX as u64,
                Some(i64::MAX as u64),
            ),
            (r#""9223372036854775808","#, i64::MAX as u64, None),
            (r#""17637696000000000000"}"#, u64::MAX, None),
            (r#""176376960000000000x"}"#, u64::MAX, None),
            (r#""17637696x0000000000"}"#, u64::MAX, None),
            (r#""1763769600000000x00"}"#, u64::MAX, None),
            (r#""x763769600000000000"}"#, u64::MAX, None),
            (
                r#""176376960000000000"}}"#,
                u64::MAX,
                Some(176_376_960_000_000_000),
            ),
            (r#""1763769600000000000\"#, u64::MAX, None),
        ] {
            let mut r = Reader::new(lit);
            assert_eq!(r.digit_string(max), want, "{lit}");
            let end = if want.is_some() {
                lit.rfind('"').unwrap() + 1
            } else {
                0
            };
            assert_eq!(r.pos, end, "{lit}");
        }
    }

    /// Where the one-rounding shortcut answers, it gives `str::parse`'s bits; and it does
    /// answer for the short decimals the agents send.
    #[test]
    fn exact_doubles_agree_with_the_std_parser() {
        for lit in [
            "0.9",
            "0.85",
            "12.51",
            "-3.25e2",
            "1e22",
            "-0.0",
            "0.0",
            "9007199254740992",
            "0.000001",
            "123456.789e-3",
            "4.5E+10",
            "1e-22",
        ] {
            let v = exact_f64(lit.as_bytes()).unwrap_or_else(|| panic!("{lit} not taken"));
            assert_eq!(v.to_bits(), lit.parse::<f64>().unwrap().to_bits(), "{lit}");
        }
        for lit in [
            "1e23",
            "1e-23",
            "9007199254740993",
            "12345678901234567890",
            "0.12345678901234567890",
            "1e400",
            "1e-400",
            "5e-324",
            "1.7976931348623157e308",
            "0.1e99999999999",
        ] {
            assert_eq!(exact_f64(lit.as_bytes()), None, "{lit}");
        }
    }

    fn decimal_literal() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            any::<bool>(),
            "(0|[1-9][0-9]{0,21})",
            proptest::option::of("[0-9]{1,22}"),
            proptest::option::of(("[eE]", "[+-]?", -40i32..40)),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut s = String::new();
                if neg {
                    s.push('-');
                }
                s.push_str(&int);
                if let Some(f) = frac {
                    s.push('.');
                    s.push_str(&f);
                }
                if let Some((e, sign, n)) = exp {
                    s.push_str(&e);
                    s.push_str(&sign);
                    s.push_str(&n.unsigned_abs().to_string());
                }
                s
            })
    }

    proptest::proptest! {
        #[test]
        fn exact_doubles_match_the_std_parser_bit_for_bit(lit in decimal_literal()) {
            if let Some(v) = exact_f64(lit.as_bytes()) {
                proptest::prop_assert_eq!(v.to_bits(), lit.parse::<f64>().unwrap().to_bits(), "{}", lit);
            }
            // And the whole number path (shortcut or not) still classifies as serde_json.
            let mut r = Reader::new(&lit);
            let ours = r.number();
            let theirs = serde_json::from_str::<serde_json::Number>(&lit);
            match (ours, theirs) {
                (Ok(Number::F64(a)), Ok(_)) => {
                    proptest::prop_assert_eq!(a.to_bits(), lit.parse::<f64>().unwrap().to_bits());
                }
                (Ok(Number::U64(a)), Ok(t)) => proptest::prop_assert_eq!(Some(a), t.as_u64()),
                (Ok(Number::I64(a)), Ok(t)) => proptest::prop_assert_eq!(Some(a), t.as_i64()),
                (Err(_), Err(_)) => {}
                (a, b) => proptest::prop_assert!(false, "{lit}: {a:?} vs {b:?}"),
            }
        }

        #[test]
        fn doubles_print_and_read_back(v in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO) {
            for lit in [format!("{v}"), format!("{v:e}"), format!("{v:.3}")] {
                if let Some(x) = exact_f64(lit.as_bytes()) {
                    proptest::prop_assert_eq!(x.to_bits(), lit.parse::<f64>().unwrap().to_bits(), "{}", lit);
                }
            }
        }

        #[test]
        fn integers_classify_as_serde_json_does(digits in "-?[1-9][0-9]{0,24}") {
            let mut r = Reader::new(&digits);
            let ours = r.number().unwrap();
            let theirs: serde_json::Number = serde_json::from_str(&digits).unwrap();
            match ours {
                Number::U64(a) => proptest::prop_assert_eq!(Some(a), theirs.as_u64()),
                Number::I64(a) => proptest::prop_assert_eq!(Some(a), theirs.as_i64()),
                Number::F64(a) => {
                    proptest::prop_assert!(theirs.as_u64().is_none() && theirs.as_i64().is_none());
                    proptest::prop_assert_eq!(a.to_bits(), digits.parse::<f64>().unwrap().to_bits());
                }
            }
        }
    }

    #[test]
    fn integers_at_the_overflow_edges() {
        for (lit, want) in [
            (
                "9999999999999999999",
                Number::U64(9_999_999_999_999_999_999),
            ),
            (
                "10000000000000000000",
                Number::U64(10_000_000_000_000_000_000),
            ),
            ("18446744073709551615", Number::U64(u64::MAX)),
            (
                "18446744073709551616",
                Number::F64(18_446_744_073_709_551_616.0),
            ),
            ("99999999999999999999", Number::F64(1e20)),
            ("-9223372036854775808", Number::I64(i64::MIN)),
            (
                "-9223372036854775809",
                Number::F64(-9_223_372_036_854_775_809.0),
            ),
            ("12345678", Number::U64(12_345_678)),
            ("123456789", Number::U64(123_456_789)),
        ] {
            let mut r = Reader::new(lit);
            assert_eq!(r.number().unwrap(), want, "{lit}");
            assert_eq!(r.pos, lit.len(), "{lit}");
        }
    }

    #[test]
    fn predicted_keys_are_eaten_only_verbatim() {
        let mut first = true;
        let mut r = Reader::new(r#"{"name":"x"}"#);
        r.pos = 1;
        assert!(r.key_start(&mut first).unwrap());
        assert!(!r.eat_key(&QuotedKey::new(r#""unit":"#)));
        assert!(!r.eat_key(&QuotedKey::new(r#""nam":"#)));
        assert!(!r.eat_key(&QuotedKey::new(r#""names":"#)));
        assert_eq!(r.pos, 1);
        assert!(r.eat_key(&QuotedKey::new(r#""name":"#)));
        assert_eq!(r.byte(), Some(b'"'));
        for miss in [
            r#"{"name" :1}"#,
            r#"{"na\u006de":1}"#,
            r#"{"name_":1}"#,
            r#"{"nam"#,
            r#"{"name""#,
        ] {
            let mut first = true;
            let mut r = Reader::new(miss);
            r.pos = 1;
            assert!(r.key_start(&mut first).unwrap(), "{miss}");
            assert!(!r.eat_key(&QuotedKey::new(r#""name":"#)), "{miss}");
            assert_eq!(r.pos, 1, "{miss}");
        }
        // Keys of every length up to the limit, a byte changed at every place, with and
        // without 32 bytes after the cursor (word compare and its fallback).
        for len in 1..=QUOTED_KEY_MAX - 3 {
            let name: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let quoted = format!(r#""{name}":"#);
            let key = QuotedKey::new(&quoted);
            assert_eq!(key.bytes(), quoted.as_bytes());
            for tail in ["", "1", "1234567890123456789012345678901234567890"] {
                let text = format!("{quoted}{tail}");
                let mut r = Reader::new(&text);
                assert!(r.eat_key(&key), "{text}");
                assert_eq!(r.pos, quoted.len(), "{text}");
                for at in 0..quoted.len() {
                    let mut changed = text.clone().into_bytes();
                    changed[at] ^= 0x01;
                    let changed = String::from_utf8(changed).unwrap();
                    let mut r = Reader::new(&changed);
                    assert!(!r.eat_key(&key), "{changed}");
                    assert_eq!(r.pos, 0, "{changed}");
                }
                // Cut short.
                let cut = &quoted[..quoted.len() - 1];
                let mut r = Reader::new(cut);
                assert!(!r.eat_key(&key), "{cut}");
            }
        }
    }

    #[test]
    fn skipping_checks_syntax_at_any_depth() {
        let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
        for ok in [
            "1",
            "-0.5e7",
            r#""\ud800""#,
            "[]",
            "{}",
            r#"{"a":[1,{"b":null},true,false,"x"],"c":{}}"#,
            deep.as_str(),
        ] {
            let mut r = Reader::new(ok);
            r.skip_value().unwrap();
            r.end().unwrap();
        }
        for bad in [
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{1:2}",
            "[1 2]",
            "tru",
            "nul",
            "01",
            "\"\\x\"",
            "[",
            "{\"a\":",
            "1e400x",
        ] {
            let mut r = Reader::new(bad);
            assert!(r.skip_value().and_then(|()| r.end()).is_err(), "{bad}");
        }
    }
}
