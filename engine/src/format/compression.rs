//! The five compression codecs of Kafka's v2 record batches (attributes bits 0-2) and the exact
//! stream formats Kafka wraps a batch's records section in: gzip (a standard gzip stream), snappy
//! (snappy-java's xerial framing, with raw snappy accepted on read), lz4 (a standard LZ4 frame with
//! 64 KiB independent blocks, as `KafkaLZ4BlockOutputStream` writes it) and zstd (a standard zstd
//! frame).
//!
//! Decompression never trusts a size read from the input: output grows in bounded chunks and is
//! refused as soon as it would pass the caller's `limit`.

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use super::FormatError;

/// A batch's compression codec, as stored in attribute bits 0-2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Records stored as they are (id 0).
    #[default]
    None,
    /// A gzip stream (id 1).
    Gzip,
    /// snappy-java's xerial-framed snappy (id 2).
    Snappy,
    /// An LZ4 frame (id 3).
    Lz4,
    /// A zstd frame (id 4).
    Zstd,
}

impl Compression {
    /// Every codec, in id order.
    pub const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    /// The id stored in attribute bits 0-2 (0..=4).
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec with this id; ids 5 and above are [`FormatError::UnknownCompression`].
    pub fn from_id(id: u8) -> Result<Compression, FormatError> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            codec => Err(FormatError::UnknownCompression { codec }),
        }
    }

    /// Kafka's name for the codec (`CompressionType.name`): "none", "gzip", "snappy", "lz4",
    /// "zstd".
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A codec name that [`Compression::from_str`] does not know.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("unknown compression codec name {0:?} (expected none, gzip, snappy, lz4 or zstd)")]
pub struct ParseCompressionError(pub String);

impl FromStr for Compression {
    type Err = ParseCompressionError;

    /// Parses one of Kafka's codec names, ignoring ASCII case; "uncompressed" (the topic-config
    /// spelling of no compression) is accepted as [`Compression::None`].
    fn from_str(s: &str) -> Result<Compression, ParseCompressionError> {
        let t = s.trim();
        for c in Compression::ALL {
            if t.eq_ignore_ascii_case(c.name()) {
                return Ok(c);
            }
        }
        if t.eq_ignore_ascii_case("uncompressed") {
            return Ok(Compression::None);
        }
        Err(ParseCompressionError(s.to_string()))
    }
}

/// snappy-java's stream header magic (`SnappyCodec.MAGIC_HEADER`).
pub const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic + version i32 + compatible version i32.
pub const XERIAL_HEADER_SIZE: usize = 16;
/// The version snappy-java writes (`SnappyCodec.DEFAULT_VERSION`).
pub const XERIAL_VERSION: i32 = 1;
/// The oldest version snappy-java writes as compatible (`MINIMUM_COMPATIBLE_VERSION`).
pub const XERIAL_MIN_COMPATIBLE_VERSION: i32 = 1;
/// Uncompressed bytes per xerial block (`SnappyOutputStream.DEFAULT_BLOCK_SIZE`, which Kafka uses).
pub const XERIAL_BLOCK_SIZE: usize = 32 * 1024;
/// The gzip and zstd levels Kafka uses by default (zlib's default 6; zstd's default 3).
pub const GZIP_DEFAULT_LEVEL: u32 = 6;
/// See [`GZIP_DEFAULT_LEVEL`].
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// Output grows by at most this many bytes per read while decompressing.
const READ_CHUNK: usize = 64 * 1024;

fn comp_err(codec: Compression, e: impl fmt::Display) -> FormatError {
    FormatError::Compression { codec: codec.name(), detail: e.to_string() }
}

fn decomp_err(codec: Compression, detail: impl Into<String>) -> FormatError {
    FormatError::Decompression { codec: codec.name(), detail: detail.into() }
}

fn over_limit(codec: Compression, limit: usize) -> FormatError {
    decomp_err(codec, format!("decompressed size exceeds the limit of {limit} bytes"))
}

/// Compresses `input` with `codec`, appending the stream Kafka would write for a v2 batch's
/// records section to `out`. [`Compression::None`] appends `input` as it is.
///
/// The compressed bytes are the same format as Kafka's, not necessarily the same bytes (Kafka uses
/// zlib, snappy-java's native snappy, LZ4-HC level 9 and zstd-jni); any Kafka reader reads them.
/// On error `out` is left as it was.
pub fn compress(codec: Compression, input: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
    let start = out.len();
    let r = match codec {
        Compression::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Gzip => gzip_compress(input, out),
        Compression::Snappy => xerial_compress(input, out),
        Compression::Lz4 => lz4_compress(input, out),
        Compression::Zstd => zstd_compress(input, out),
    };
    if r.is_err() {
        out.truncate(start);
    }
    r
}

/// Decompresses one records-section stream of `codec`, appending at most `limit` bytes to `out`.
///
/// Output that would pass `limit` is refused with [`FormatError::Decompression`]; so are malformed
/// streams. Never panics and never allocates by a size read from `input` beyond `limit`. On error
/// `out` is left as it was. Readers accept what Kafka's (Java) readers accept:
/// - gzip: one or more members; bytes after a member that do not start another member are
///   ignored, as `java.util.zip.GZIPInputStream` ignores trailing garbage;
/// - snappy: as snappy-java's `SnappyInputStream`: xerial-framed blocks (concatenated xerial
///   streams too; fewer than 4 bytes left at a block boundary end the stream), or, when the input
///   is shorter than the 16-byte header or lacks the magic, one raw snappy block; empty input is
///   an error;
/// - lz4: exactly one whole LZ4 frame (end mark and any checksums present), bytes after it
///   ignored, as `KafkaLZ4BlockInputStream` stops at the end mark and refuses a frame cut short;
/// - zstd: one or more zstd frames.
pub fn decompress(codec: Compression, input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), FormatError> {
    let start = out.len();
    let r = match codec {
        Compression::None => {
            if input.len() > limit {
                Err(over_limit(codec, limit))
            } else {
                out.extend_from_slice(input);
                Ok(())
            }
        }
        Compression::Gzip => gzip_decompress(input, out, limit),
        Compression::Snappy => xerial_decompress(input, out, limit),
        Compression::Lz4 => match lz4_frame_end(input) {
            Ok(end) => read_limited(
                codec,
                lz4_flex::frame::FrameDecoder::new(input.get(..end).unwrap_or(input)),
                out,
                limit,
                limit,
            ),
            Err(e) => Err(e),
        },
        Compression::Zstd => match zstd::stream::read::Decoder::with_buffer(input) {
            Ok(d) => read_limited(codec, d, out, limit, limit),
            Err(e) => Err(decomp_err(codec, e.to_string())),
        },
    };
    if r.is_err() {
        out.truncate(start);
    }
    r
}

/// Reads `r` to its end into `out` in chunks of at most [`READ_CHUNK`], refusing more than
/// `limit` bytes (`reported` is the limit named in the error). `out` may hold partial output on
/// error (the caller truncates it).
fn read_limited<R: Read>(
    codec: Compression,
    mut r: R,
    out: &mut Vec<u8>,
    limit: usize,
    reported: usize,
) -> Result<(), FormatError> {
    let start = out.len();
    loop {
        let produced = out.len() - start;
        // Ask for one byte past the limit so that exceeding it is seen.
        let room = (limit - produced).saturating_add(1).min(READ_CHUNK);
        let at = out.len();
        out.resize(at + room, 0);
        match r.read(&mut out[at..]) {
            Ok(0) => {
                out.truncate(at);
                return Ok(());
            }
            Ok(n) => {
                out.truncate(at + n.min(room));
                if out.len() - start > limit {
                    return Err(over_limit(codec, reported));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => out.truncate(at),
            Err(e) => {
                out.truncate(at);
                return Err(decomp_err(codec, e.to_string()));
            }
        }
    }
}

/// The LZ4 frame magic number (little-endian on the wire: `04 22 4D 18`).
const LZ4_MAGIC: u32 = 0x184D_2204;

/// Walks one LZ4 frame's structure (header, block sizes, end mark, checksums) without decoding,
/// returning where the frame ends. A frame cut short anywhere is an error, as it is for
/// `KafkaLZ4BlockInputStream`; the header's fields and checksum are judged by the decoder.
fn lz4_frame_end(input: &[u8]) -> Result<usize, FormatError> {
    let codec = Compression::Lz4;
    let truncated = |what: &str| decomp_err(codec, format!("LZ4 frame truncated in the {what}"));
    let magic = input.get(..4).ok_or_else(|| truncated("magic number"))?;
    if u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]) != LZ4_MAGIC {
        return Err(decomp_err(codec, "not an LZ4 frame (bad magic number)"));
    }
    let flg = *input.get(4).ok_or_else(|| truncated("frame descriptor"))?;
    let mut pos = 6; // magic, FLG, BD
    if flg & 0x08 != 0 {
        pos += 8; // content size
    }
    if flg & 0x01 != 0 {
        pos += 4; // dictionary id
    }
    pos += 1; // header checksum
    if input.len() < pos {
        return Err(truncated("frame descriptor"));
    }
    let block_checksum = if flg & 0x10 != 0 { 4 } else { 0 };
    loop {
        let b = input.get(pos..pos + 4).ok_or_else(|| truncated("block size (no end mark)"))?;
        pos += 4;
        let raw = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if raw == 0 {
            break;
        }
        let need = (raw & 0x7fff_ffff) as usize + block_checksum;
        if input.len() - pos < need {
            return Err(truncated("block data"));
        }
        pos += need;
    }
    if flg & 0x04 != 0 {
        pos += 4; // content checksum
        if input.len() < pos {
            return Err(truncated("content checksum"));
        }
    }
    Ok(pos)
}

/// gzip members one after another, like `GZIPInputStream`: after each member, what follows is
/// decoded as another member only when it starts with the gzip magic and deflate method
/// (`1f 8b 08`); anything else is trailing garbage and ignored.
fn gzip_decompress(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), FormatError> {
    let start = out.len();
    let mut rest = input;
    loop {
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        let room = limit - (out.len() - start);
        read_limited(Compression::Gzip, &mut dec, out, room, limit)?;
        rest = dec.into_inner();
        if !rest.starts_with(&[0x1f, 0x8b, 0x08]) {
            return Ok(());
        }
    }
}

fn gzip_compress(input: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
    // Java's GZIPOutputStream header: no mtime, no flags, XFL 0, OS 0.
    let mut enc = flate2::GzBuilder::new().operating_system(0).write(out, flate2::Compression::new(GZIP_DEFAULT_LEVEL));
    enc.write_all(input).map_err(|e| comp_err(Compression::Gzip, e))?;
    enc.finish().map_err(|e| comp_err(Compression::Gzip, e))?;
    Ok(())
}

fn lz4_compress(input: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
    use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
    // KafkaLZ4BlockOutputStream: FLG version 01, independent blocks, no block or content checksum,
    // no content size; BD 64 KiB. Header = 04 22 4D 18 60 40 82.
    let info = FrameInfo::new()
        .block_size(BlockSize::Max64KB)
        .block_mode(BlockMode::Independent)
        .block_checksums(false)
        .content_checksum(false)
        .content_size(None);
    let mut enc = FrameEncoder::with_frame_info(info, out);
    enc.write_all(input).map_err(|e| comp_err(Compression::Lz4, e))?;
    enc.finish().map_err(|e| comp_err(Compression::Lz4, e))?;
    Ok(())
}

fn zstd_compress(input: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
    let mut enc =
        zstd::stream::write::Encoder::new(out, ZSTD_DEFAULT_LEVEL).map_err(|e| comp_err(Compression::Zstd, e))?;
    enc.write_all(input).map_err(|e| comp_err(Compression::Zstd, e))?;
    enc.finish().map_err(|e| comp_err(Compression::Zstd, e))?;
    Ok(())
}

/// snappy-java's `SnappyOutputStream`: the 16-byte header, then per 32 KiB of input
/// `[i32 BE compressed length][raw snappy block]`. Empty input is the header alone.
fn xerial_compress(input: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
    out.extend_from_slice(&XERIAL_MIN_COMPATIBLE_VERSION.to_be_bytes());
    let mut enc = snap::raw::Encoder::new();
    for chunk in input.chunks(XERIAL_BLOCK_SIZE) {
        let max = snap::raw::max_compress_len(chunk.len());
        let len_at = out.len();
        out.resize(len_at + 4 + max, 0);
        let n = enc.compress(chunk, &mut out[len_at + 4..]).map_err(|e| comp_err(Compression::Snappy, e))?;
        out.truncate(len_at + 4 + n);
        let n32 = i32::try_from(n).map_err(|e| comp_err(Compression::Snappy, e))?;
        out[len_at..len_at + 4].copy_from_slice(&n32.to_be_bytes());
    }
    Ok(())
}

/// The largest output a raw snappy block of `n` bytes can describe: the densest element is a
/// 3-byte copy of 64 bytes (ratio 21.3), so anything claiming more is refused before allocating.
fn snappy_plausible_max(n: usize) -> usize {
    n.saturating_mul(22).saturating_add(64)
}

/// Decompresses one raw snappy block, appending to `out`, with at most `room` output bytes.
fn snappy_raw_block(
    dec: &mut snap::raw::Decoder,
    block: &[u8],
    out: &mut Vec<u8>,
    room: usize,
    limit: usize,
) -> Result<(), FormatError> {
    let codec = Compression::Snappy;
    let len = snap::raw::decompress_len(block).map_err(|e| decomp_err(codec, e.to_string()))?;
    if len > room {
        return Err(over_limit(codec, limit));
    }
    if len > snappy_plausible_max(block.len()) {
        return Err(decomp_err(codec, format!("block of {} bytes claims {len} uncompressed bytes", block.len())));
    }
    let at = out.len();
    out.resize(at + len, 0);
    match dec.decompress(block, &mut out[at..]) {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(decomp_err(codec, format!("block decompressed to {n} bytes, header said {len}"))),
        Err(e) => Err(decomp_err(codec, e.to_string())),
    }
}

/// snappy-java's `SnappyInputStream`, which Kafka reads snappy batches with:
/// - empty input is an error ("cannot decompress empty stream");
/// - input shorter than the 16-byte header, or not starting with the 8-byte magic, is one raw
///   snappy block;
/// - otherwise blocks `[i32 BE length][raw snappy]` follow the header (its version fields are not
///   judged, as snappy-java does not judge them); a block length equal to the first four magic
///   bytes starts a concatenated stream's header (version below 1 refused, a mismatched magic ends
///   the stream); fewer than 4 bytes at a block boundary end the stream, as in snappy-java.
fn xerial_decompress(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), FormatError> {
    let codec = Compression::Snappy;
    let mut dec = snap::raw::Decoder::new();
    let start = out.len();
    if input.is_empty() {
        return Err(decomp_err(codec, "cannot decompress an empty stream"));
    }
    let is_xerial = input.len() >= XERIAL_HEADER_SIZE && input.get(..XERIAL_MAGIC.len()) == Some(&XERIAL_MAGIC[..]);
    if !is_xerial {
        return snappy_raw_block(&mut dec, input, out, limit, limit);
    }
    let magic_head = i32::from_be_bytes([XERIAL_MAGIC[0], XERIAL_MAGIC[1], XERIAL_MAGIC[2], XERIAL_MAGIC[3]]);
    let mut pos = XERIAL_HEADER_SIZE;
    loop {
        let Some(len_bytes) = input.get(pos..pos + 4) else {
            return Ok(());
        };
        let chunk = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        pos += 4;
        if chunk == magic_head {
            // A concatenated stream: the rest of its magic, then version and compatible version.
            let Some(rest) = input.get(pos..pos + XERIAL_HEADER_SIZE - 4) else {
                return Err(decomp_err(codec, "truncated header of a concatenated stream"));
            };
            if rest.get(..4) != XERIAL_MAGIC.get(4..) {
                return Ok(());
            }
            let version = i32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
            if version < XERIAL_MIN_COMPATIBLE_VERSION {
                return Err(decomp_err(codec, format!("incompatible xerial stream version {version}")));
            }
            pos += XERIAL_HEADER_SIZE - 4;
            continue;
        }
        if chunk < 0 {
            return Err(decomp_err(codec, format!("negative block length {chunk}")));
        }
        let Some(block) = input.get(pos..pos.saturating_add(chunk as usize)) else {
            return Err(decomp_err(
                codec,
                format!("block of {chunk} bytes at byte {} runs past the end ({} bytes)", pos - 4, input.len()),
            ));
        };
        pos += block.len();
        let room = limit - (out.len() - start);
        snappy_raw_block(&mut dec, block, out, room, limit)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        // Compressible but not trivial.
        let mut x = 0x1234_5678u32;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if i % 7 < 4 {
                    b'a' + (i % 13) as u8
                } else {
                    x as u8
                }
            })
            .collect()
    }

    #[test]
    fn ids_and_names() {
        for (i, c) in Compression::ALL.iter().enumerate() {
            assert_eq!(c.id() as usize, i);
            assert_eq!(Compression::from_id(i as u8), Ok(*c));
            assert_eq!(c.name().parse::<Compression>(), Ok(*c));
            assert_eq!(c.name().to_uppercase().parse::<Compression>(), Ok(*c));
            assert_eq!(c.to_string(), c.name());
        }
        for id in 5..=255u8 {
            assert_eq!(Compression::from_id(id), Err(FormatError::UnknownCompression { codec: id }));
        }
        assert_eq!(Compression::default(), Compression::None);
        assert_eq!("uncompressed".parse::<Compression>(), Ok(Compression::None));
        assert!("brotli".parse::<Compression>().is_err());
        assert!("".parse::<Compression>().is_err());
    }

    #[test]
    fn every_codec_round_trips() {
        for c in Compression::ALL {
            for n in [0usize, 1, 5, 1000, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 64 * 1024 + 7, 300_000] {
                let data = sample(n);
                let mut z = vec![9u8; 3]; // appends after existing bytes
                compress(c, &data, &mut z).unwrap();
                assert_eq!(&z[..3], &[9, 9, 9]);
                let mut back = vec![7u8];
                decompress(c, &z[3..], &mut back, n).unwrap_or_else(|e| panic!("{c} {n}: {e}"));
                assert_eq!(back[0], 7);
                assert_eq!(&back[1..], &data[..], "{c} {n}");
            }
        }
    }

    #[test]
    fn limit_is_enforced() {
        let data = sample(200_000);
        for c in Compression::ALL {
            let mut z = Vec::new();
            compress(c, &data, &mut z).unwrap();
            let mut back = vec![1u8, 2];
            let e = decompress(c, &z, &mut back, data.len() - 1).unwrap_err();
            assert!(matches!(e, FormatError::Decompression { codec, .. } if codec == c.name()), "{c}: {e:?}");
            assert_eq!(back, vec![1, 2], "{c}: out restored on error");
            let mut back = Vec::new();
            decompress(c, &z, &mut back, data.len()).unwrap();
            assert_eq!(back, data);
        }
    }

    #[test]
    fn stream_headers_match_kafka() {
        let mut z = Vec::new();
        compress(Compression::Gzip, b"x", &mut z).unwrap();
        assert_eq!(&z[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0]);

        let mut z = Vec::new();
        compress(Compression::Lz4, b"x", &mut z).unwrap();
        assert_eq!(&z[..7], &[0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82]);
        assert_eq!(&z[z.len() - 4..], &[0, 0, 0, 0], "end mark, no content checksum");

        let mut z = Vec::new();
        compress(Compression::Zstd, b"x", &mut z).unwrap();
        assert_eq!(&z[..4], &[0x28, 0xb5, 0x2f, 0xfd]);

        let mut z = Vec::new();
        compress(Compression::Snappy, &[], &mut z).unwrap();
        assert_eq!(z, vec![0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        let mut back = Vec::new();
        decompress(Compression::Snappy, &z, &mut back, 0).unwrap();
        assert!(back.is_empty());

        // Blocks of 32 KiB of input each.
        let data = sample(70_000);
        let mut z = Vec::new();
        compress(Compression::Snappy, &data, &mut z).unwrap();
        let mut pos = XERIAL_HEADER_SIZE;
        let mut sizes = Vec::new();
        while pos < z.len() {
            let n = i32::from_be_bytes(z[pos..pos + 4].try_into().unwrap()) as usize;
            let block = &z[pos + 4..pos + 4 + n];
            sizes.push(snap::raw::decompress_len(block).unwrap());
            pos += 4 + n;
        }
        assert_eq!(pos, z.len());
        assert_eq!(sizes, vec![32768, 32768, 70_000 - 65536]);
    }

    #[test]
    fn snappy_raw_and_concatenated_streams() {
        let data = sample(50_000);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        let mut back = Vec::new();
        decompress(Compression::Snappy, &raw, &mut back, usize::MAX).unwrap();
        assert_eq!(back, data);

        let mut z = Vec::new();
        compress(Compression::Snappy, &data[..1000], &mut z).unwrap();
        compress(Compression::Snappy, &data[1000..], &mut z).unwrap();
        let mut back = Vec::new();
        decompress(Compression::Snappy, &z, &mut back, usize::MAX).unwrap();
        assert_eq!(back, data);

        // Concatenated header with version 0 is refused.
        let mut bad = Vec::new();
        compress(Compression::Snappy, b"abc", &mut bad).unwrap();
        bad.extend_from_slice(&XERIAL_MAGIC);
        bad.extend_from_slice(&0i32.to_be_bytes());
        bad.extend_from_slice(&1i32.to_be_bytes());
        assert!(decompress(Compression::Snappy, &bad, &mut Vec::new(), 100).is_err());

        // Empty input, negative and overlong block lengths.
        assert!(decompress(Compression::Snappy, &[], &mut Vec::new(), 100).is_err());
        let mut z = Vec::new();
        compress(Compression::Snappy, &[], &mut z).unwrap();
        for len in [-1i32, 1_000_000, i32::MAX] {
            let mut b = z.clone();
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&[0, 0]);
            assert!(decompress(Compression::Snappy, &b, &mut Vec::new(), 1 << 30).is_err());
        }
    }

    #[test]
    fn gzip_members_and_trailing_garbage() {
        let data = sample(40_000);
        let mut z = Vec::new();
        compress(Compression::Gzip, &data[..100], &mut z).unwrap();
        compress(Compression::Gzip, &data[100..], &mut z).unwrap();
        let mut back = Vec::new();
        decompress(Compression::Gzip, &z, &mut back, usize::MAX).unwrap();
        assert_eq!(back, data);
        // The limit spans members.
        let e = decompress(Compression::Gzip, &z, &mut Vec::new(), data.len() - 1).unwrap_err();
        assert!(matches!(e, FormatError::Decompression { .. }));
        // Trailing garbage is ignored, as GZIPInputStream ignores it.
        z.extend_from_slice(b"\0\0garbage");
        let mut back = Vec::new();
        decompress(Compression::Gzip, &z, &mut back, usize::MAX).unwrap();
        assert_eq!(back, data);
        // A cut-short member is an error, whatever the cut.
        let mut one = Vec::new();
        compress(Compression::Gzip, &data, &mut one).unwrap();
        for cut in 0..one.len() {
            assert!(decompress(Compression::Gzip, &one[..cut], &mut Vec::new(), usize::MAX).is_err(), "{cut}");
        }
    }

    #[test]
    fn lz4_frame_must_be_whole() {
        let data = sample(150_000);
        let mut z = Vec::new();
        compress(Compression::Lz4, &data, &mut z).unwrap();
        assert_eq!(lz4_frame_end(&z), Ok(z.len()));
        for cut in 0..z.len() {
            assert!(decompress(Compression::Lz4, &z[..cut], &mut Vec::new(), usize::MAX).is_err(), "{cut}");
        }
        // Bytes after the end mark are not read, as in KafkaLZ4BlockInputStream.
        let mut t = z.clone();
        t.extend_from_slice(b"trailing");
        let mut back = Vec::new();
        decompress(Compression::Lz4, &t, &mut back, usize::MAX).unwrap();
        assert_eq!(back, data);
        // The legacy LZ4 format and other magics are refused.
        let mut legacy = vec![0x02, 0x21, 0x4c, 0x18];
        legacy.extend_from_slice(&[0; 8]);
        assert!(decompress(Compression::Lz4, &legacy, &mut Vec::new(), 100).is_err());
    }

    #[test]
    fn zstd_truncation_is_an_error() {
        let data = sample(100_000);
        let mut z = Vec::new();
        compress(Compression::Zstd, &data, &mut z).unwrap();
        for cut in 0..z.len() {
            assert!(decompress(Compression::Zstd, &z[..cut], &mut Vec::new(), usize::MAX).is_err(), "{cut}");
        }
    }

    #[test]
    fn hostile_snappy_length_claims_do_not_allocate() {
        // A raw block claiming 2^32-1 bytes, and a xerial block claiming 64 MiB from 5 bytes.
        let raw = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        let e = decompress(Compression::Snappy, &raw, &mut Vec::new(), 1 << 20).unwrap_err();
        assert!(matches!(e, FormatError::Decompression { .. }));
        let mut z = Vec::new();
        compress(Compression::Snappy, &[], &mut z).unwrap();
        z.extend_from_slice(&5i32.to_be_bytes());
        z.extend_from_slice(&[0x80, 0x80, 0x80, 0x20, 0x00]);
        let e = decompress(Compression::Snappy, &z, &mut Vec::new(), usize::MAX).unwrap_err();
        assert!(matches!(e, FormatError::Decompression { .. }), "{e:?}");
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for c in Compression::ALL {
            let mut z = Vec::new();
            compress(c, &sample(5000), &mut z).unwrap();
            for _ in 0..300 {
                let mut b = z.clone();
                for _ in 0..1 + next() % 4 {
                    let i = (next() as usize) % b.len();
                    b[i] ^= 1 << (next() % 8);
                }
                let cut = (next() as usize) % (b.len() + 1);
                let mut out = Vec::new();
                let _ = decompress(c, &b, &mut out, 10_000);
                assert!(out.len() <= 10_000);
                let _ = decompress(c, &b[..cut], &mut Vec::new(), 10_000);
            }
            for n in 0..64 {
                let junk: Vec<u8> = (0..n).map(|_| next() as u8).collect();
                let _ = decompress(c, &junk, &mut Vec::new(), 10_000);
            }
        }
    }
}
