//! The `.kafka_cleanshutdown` marker: a one-line JSON object, read with a small JSON reader.

use super::{invalid, quote, FormatError};

/// The `.kafka_cleanshutdown` marker. Its presence is what says "clean shutdown"; its content
/// only carries the broker epoch (KIP-966).
///
/// Kafka 3.7+ writes `{"version":0,"brokerEpoch":<long>}`. Older Kafka created the marker as an
/// empty file, so an empty (or all-whitespace) file parses as present with no epoch, and
/// `broker_epoch: None` serializes back to an empty file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanShutdown {
    /// The epoch of the broker that shut down cleanly, when the marker records one.
    pub broker_epoch: Option<i64>,
}

impl CleanShutdown {
    /// The only content version Kafka writes.
    pub const VERSION: i64 = 0;

    /// Parses the marker's content with a small JSON reader: whitespace anywhere JSON allows it,
    /// fields in any order, unknown fields skipped (Kafka's class is
    /// `@JsonIgnoreProperties(ignoreUnknown = true)`). `version` must be present and `0`;
    /// `brokerEpoch` must be an integer in `i64`, `null`, or absent (both `None`). Duplicate known
    /// fields, non-integer numbers and trailing non-whitespace are errors. Kafka itself never
    /// fails here (it logs and treats the epoch as unknown); callers may choose to do the same.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        if text.bytes().all(is_json_space) {
            return Ok(CleanShutdown { broker_epoch: None });
        }
        let mut p = JsonReader { s: text.as_bytes(), pos: 0 };
        p.parse_clean_shutdown().map_err(|detail| invalid(p.line(), detail))
    }

    /// `{"version":0,"brokerEpoch":<epoch>}` exactly as Kafka writes it (no whitespace, no
    /// trailing newline), or the empty legacy marker for `None`.
    pub fn serialize(&self) -> String {
        match self.broker_epoch {
            Some(epoch) => format!("{{\"version\":{},\"brokerEpoch\":{epoch}}}", Self::VERSION),
            None => String::new(),
        }
    }
}

fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Deepest nesting skipped inside an unknown field's value.
const MAX_JSON_DEPTH: u32 = 32;

/// A cursor over JSON text, just enough for the clean-shutdown object.
#[derive(Debug)]
struct JsonReader<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> JsonReader<'a> {
    /// 1-based line of the current position.
    fn line(&self) -> u32 {
        let end = self.pos.min(self.s.len());
        let newlines = self.s[..end].iter().filter(|&&b| b == b'\n').count();
        u32::try_from(newlines).unwrap_or(u32::MAX).saturating_add(1)
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(is_json_space) {
            self.pos += 1;
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "end of input".to_owned(),
            Some(b) => format!("byte {:?} at offset {}", char::from(b), self.pos),
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected '{}', found {}", char::from(b), self.describe()))
        }
    }

    fn parse_clean_shutdown(&mut self) -> Result<CleanShutdown, String> {
        let mut version: Option<i64> = None;
        let mut epoch: Option<Option<i64>> = None;
        self.skip_space();
        self.expect(b'{')?;
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_space();
                let key = self.string()?;
                self.skip_space();
                self.expect(b':')?;
                self.skip_space();
                match key {
                    "version" => {
                        if version.is_some() {
                            return Err("duplicate field \"version\"".to_owned());
                        }
                        version = Some(self.integer()?);
                    }
                    "brokerEpoch" => {
                        if epoch.is_some() {
                            return Err("duplicate field \"brokerEpoch\"".to_owned());
                        }
                        epoch = Some(if self.literal("null") { None } else { Some(self.integer()?) });
                    }
                    _ => self.skip_value(0)?,
                }
                self.skip_space();
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(format!("expected ',' or '}}', found {}", self.describe())),
                }
            }
        }
        self.skip_space();
        if self.pos != self.s.len() {
            return Err(format!("trailing content: {}", self.describe()));
        }
        match version {
            None => Err("missing field \"version\"".to_owned()),
            Some(v) if v != CleanShutdown::VERSION => Err(format!("unsupported version {v}")),
            Some(_) => Ok(CleanShutdown { broker_epoch: epoch.flatten() }),
        }
    }

    /// Consumes `word` if it is next.
    fn literal(&mut self, word: &str) -> bool {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    /// A string's raw content (escapes validated, not decoded; a key spelled with escapes is
    /// therefore an unknown key).
    fn string(&mut self) -> Result<&'a str, String> {
        self.expect(b'"')?;
        let start = self.pos;
        loop {
            match self.peek() {
                None => return Err("unterminated string".to_owned()),
                Some(b'"') => break,
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 1,
                        Some(b'u') => {
                            self.pos += 1;
                            for _ in 0..4 {
                                if !self.peek().is_some_and(|b| b.is_ascii_hexdigit()) {
                                    return Err(format!("bad \\u escape: {}", self.describe()));
                                }
                                self.pos += 1;
                            }
                        }
                        _ => return Err(format!("bad escape: {}", self.describe())),
                    }
                }
                Some(b) if b < 0x20 => return Err(format!("control character in string: {}", self.describe())),
                Some(_) => self.pos += 1,
            }
        }
        let raw = &self.s[start..self.pos];
        self.pos += 1; // closing quote
                       // The input is a &str and both ends are ASCII quotes, so this cannot fail.
        std::str::from_utf8(raw).map_err(|_| "invalid UTF-8 in string".to_owned())
    }

    /// Consumes the digits of a JSON number and returns its extent; `integer_only` rejects a
    /// fraction or exponent.
    fn number(&mut self, integer_only: bool) -> Result<&'a str, String> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let digits = |r: &mut Self| {
            let s = r.pos;
            while r.peek().is_some_and(|b| b.is_ascii_digit()) {
                r.pos += 1;
            }
            r.pos - s
        };
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(format!("expected a number, found {}", self.describe())),
        }
        let int_end = self.pos;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return Err(format!("bad number fraction: {}", self.describe()));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(format!("bad number exponent: {}", self.describe()));
            }
        }
        if integer_only && self.pos != int_end {
            self.pos = start;
            return Err(format!("expected an integer, found {}", self.describe()));
        }
        // Only ASCII bytes were consumed.
        std::str::from_utf8(&self.s[start..self.pos]).map_err(|_| "invalid number".to_owned())
    }

    fn integer(&mut self) -> Result<i64, String> {
        let start = self.pos;
        let text = self.number(true)?;
        text.parse::<i64>().map_err(|_| {
            self.pos = start;
            format!("integer {} out of range", quote(text))
        })
    }

    fn skip_value(&mut self, depth: u32) -> Result<(), String> {
        if depth > MAX_JSON_DEPTH {
            return Err("nesting too deep".to_owned());
        }
        self.skip_space();
        match self.peek() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'{') => self.skip_container(b'}', depth, true),
            Some(b'[') => self.skip_container(b']', depth, false),
            Some(b't') if self.literal("true") => Ok(()),
            Some(b'f') if self.literal("false") => Ok(()),
            Some(b'n') if self.literal("null") => Ok(()),
            Some(b'-' | b'0'..=b'9') => self.number(false).map(|_| ()),
            _ => Err(format!("expected a value, found {}", self.describe())),
        }
    }

    fn skip_container(&mut self, close: u8, depth: u32, object: bool) -> Result<(), String> {
        self.pos += 1; // opening bracket
        self.skip_space();
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_space();
            if object {
                self.string()?;
                self.skip_space();
                self.expect(b':')?;
            }
            self.skip_value(depth + 1)?;
            self.skip_space();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b) if b == close => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(format!("expected ',' or '{}', found {}", char::from(close), self.describe())),
            }
        }
    }
}
