//! A scatter of "bytes scanned per offset" for `index-report --plot`, hand-written as SVG, or as
//! PNG when the file name ends in `.png` (a small raster encoder: no plotting dependency).
//! Points are binned per pixel column (min and max of each column), so a plot of millions of
//! offsets stays small.

use std::io::Write;
use std::path::Path;

const W: usize = 960;
const H: usize = 420;
const LEFT: usize = 80;
const RIGHT: usize = 20;
const TOP: usize = 40;
const BOTTOM: usize = 50;

/// Points binned per pixel column as they come: the min and max of the values that fall in
/// each column of the offset range `[x0, x1]`, which is fixed up front. Memory is fixed whatever
/// the number of points.
#[derive(Clone, Debug)]
pub struct Points {
    x0: i64,
    x1: i64,
    cols: Vec<Option<(u64, u64)>>,
    ymax: u64,
}

impl Points {
    /// Points with offsets in `[x0, x1]` (the first and last offset that will be added).
    pub fn new(x0: i64, x1: i64) -> Points {
        Points { x0, x1: x1.max(x0.saturating_add(1)), cols: vec![None; W], ymax: 0 }
    }

    fn px(&self, x: i64) -> usize {
        let w = (W - LEFT - RIGHT - 1) as f64;
        // A saturating cast: an offset outside the range lands on an edge.
        let (dx, span) = (x.saturating_sub(self.x0), self.x1.saturating_sub(self.x0));
        (LEFT + (dx as f64 / span as f64 * w).round() as usize).min(W - 1)
    }

    /// One point: `y` bytes scanned at offset `x`.
    pub fn add(&mut self, x: i64, y: u64) {
        let i = self.px(x);
        let c = &mut self.cols[i];
        *c = Some(match *c {
            None => (y, y),
            Some((a, b)) => (a.min(y), b.max(y)),
        });
        self.ymax = self.ymax.max(y);
    }
}

/// What to draw.
#[derive(Debug)]
pub struct Plot<'a> {
    pub title: String,
    /// Bytes scanned per offset.
    pub points: &'a Points,
    /// A horizontal line (the bound), if any.
    pub bound: Option<u64>,
    /// Offsets where segments start (vertical guides).
    pub segment_starts: &'a [i64],
}

struct Frame<'a> {
    points: &'a Points,
    x0: i64,
    x1: i64,
    y1: u64,
}

impl Frame<'_> {
    fn new<'a>(p: &Plot<'a>) -> Frame<'a> {
        let ymax = p.points.ymax.max(p.bound.unwrap_or(0));
        Frame { points: p.points, x0: p.points.x0, x1: p.points.x1, y1: nice_ceiling(ymax.max(1)) }
    }
    fn px(&self, x: i64) -> usize {
        self.points.px(x)
    }
    fn py(&self, y: u64) -> usize {
        let h = (H - TOP - BOTTOM) as f64;
        H - BOTTOM - (y as f64 / self.y1 as f64 * h).round() as usize
    }
    /// Per pixel column: (min, max) of the y values that fall in it.
    fn columns(&self) -> &[Option<(u64, u64)>] {
        &self.points.cols
    }
    fn y_ticks(&self) -> Vec<u64> {
        (0..=4).map(|i| self.y1 * i / 4).collect()
    }
    fn x_ticks(&self) -> Vec<i64> {
        let span = self.x1 as i128 - self.x0 as i128;
        (0..=4).map(|i| (self.x0 as i128 + span * i / 4) as i64).collect()
    }
}

/// 1, 2 or 5 times a power of ten, at least `v`.
fn nice_ceiling(v: u64) -> u64 {
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            if let Some(c) = p.checked_mul(m) {
                if c >= v {
                    return c;
                }
            }
        }
        match p.checked_mul(10) {
            Some(n) => p = n,
            None => return v,
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

pub fn svg(p: &Plot) -> String {
    let f = Frame::new(p);
    let mut s = String::new();
    s.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n"
    ));
    s.push_str(&format!(
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        W / 2,
        esc(&p.title)
    ));
    for &x in p.segment_starts {
        if x >= f.x0 && x <= f.x1 {
            let px = f.px(x);
            s.push_str(&format!(
                "<line x1=\"{px}\" y1=\"{TOP}\" x2=\"{px}\" y2=\"{}\" stroke=\"#dddddd\"/>\n",
                H - BOTTOM
            ));
        }
    }
    for y in f.y_ticks() {
        let py = f.py(y);
        s.push_str(&format!(
            "<line x1=\"{}\" y1=\"{py}\" x2=\"{LEFT}\" y2=\"{py}\" stroke=\"black\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{y}</text>\n",
            LEFT - 5,
            LEFT - 8,
            py + 4
        ));
    }
    for x in f.x_ticks() {
        let px = f.px(x);
        s.push_str(&format!(
            "<line x1=\"{px}\" y1=\"{}\" x2=\"{px}\" y2=\"{}\" stroke=\"black\"/><text x=\"{px}\" y=\"{}\" text-anchor=\"middle\">{x}</text>\n",
            H - BOTTOM,
            H - BOTTOM + 5,
            H - BOTTOM + 18
        ));
    }
    s.push_str(&format!(
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{}\" y2=\"{b}\" stroke=\"black\"/>\n",
        W - RIGHT,
        b = H - BOTTOM
    ));
    s.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">offset</text>\n<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">bytes scanned (phase 2)</text>\n",
        (LEFT + W - RIGHT) / 2,
        H - 12,
        (TOP + H - BOTTOM) / 2,
        (TOP + H - BOTTOM) / 2
    ));
    let mut path = String::new();
    for (c, col) in f.columns().iter().enumerate() {
        if let Some((lo, hi)) = col {
            let (a, b) = (f.py(*lo), f.py(*hi));
            path.push_str(&format!("M{c} {} V{}", a + 1, b.saturating_sub(1)));
        }
    }
    s.push_str(&format!("<path d=\"{path}\" stroke=\"#1f5fbf\" stroke-width=\"1.5\" fill=\"none\"/>\n"));
    if let Some(bound) = p.bound {
        let py = f.py(bound);
        s.push_str(&format!(
            "<line x1=\"{LEFT}\" y1=\"{py}\" x2=\"{}\" y2=\"{py}\" stroke=\"#c0392b\" stroke-dasharray=\"6 4\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#c0392b\">bound {bound}</text>\n",
            W - RIGHT,
            W - RIGHT - 4,
            py.saturating_sub(4)
        ));
    }
    s.push_str("</svg>\n");
    s
}

/// 3x5 digits for the PNG's tick labels.
const DIGITS: [[u8; 5]; 10] = [
    [7, 5, 5, 5, 7],
    [2, 6, 2, 2, 7],
    [7, 1, 7, 4, 7],
    [7, 1, 7, 1, 7],
    [5, 5, 7, 1, 1],
    [7, 4, 7, 1, 7],
    [7, 4, 7, 5, 7],
    [7, 1, 1, 1, 1],
    [7, 5, 7, 5, 7],
    [7, 5, 7, 1, 7],
];

struct Raster {
    px: Vec<[u8; 3]>,
}

impl Raster {
    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < W && y < H {
            self.px[y * W + x] = c;
        }
    }
    fn hline(&mut self, x0: usize, x1: usize, y: usize, c: [u8; 3], dash: bool) {
        for x in x0..=x1 {
            if !dash || (x / 6) % 2 == 0 {
                self.set(x, y, c);
            }
        }
    }
    fn vline(&mut self, x: usize, y0: usize, y1: usize, c: [u8; 3]) {
        for y in y0.min(y1)..=y0.max(y1) {
            self.set(x, y, c);
        }
    }
    /// Draws a number with its right edge at `x` (or centred) and top at `y`, scale 2.
    fn number(&mut self, n: i64, x: usize, y: usize, centre: bool) {
        let text = n.to_string();
        let width = text.len() * 8;
        let start = if centre { x.saturating_sub(width / 2) } else { x.saturating_sub(width) };
        for (i, ch) in text.bytes().enumerate() {
            let Some(d) = ch.checked_sub(b'0').filter(|d| *d < 10) else {
                // A minus sign.
                self.hline(start + i * 8, start + i * 8 + 5, y + 5, [0, 0, 0], false);
                continue;
            };
            for (row, bits) in DIGITS[d as usize].iter().enumerate() {
                for col in 0..3 {
                    if bits & (4 >> col) != 0 {
                        for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                            self.set(start + i * 8 + col * 2 + dx, y + row * 2 + dy, [0, 0, 0]);
                        }
                    }
                }
            }
        }
    }
}

pub fn png(p: &Plot) -> Vec<u8> {
    let f = Frame::new(p);
    let mut r = Raster { px: vec![[255, 255, 255]; W * H] };
    for &x in p.segment_starts {
        if x >= f.x0 && x <= f.x1 {
            r.vline(f.px(x), TOP, H - BOTTOM, [221, 221, 221]);
        }
    }
    for (c, col) in f.columns().iter().enumerate() {
        if let Some((lo, hi)) = col {
            r.vline(c, f.py(*lo), f.py(*hi), [31, 95, 191]);
            r.vline(c + 1, f.py(*lo), f.py(*hi), [31, 95, 191]);
        }
    }
    if let Some(b) = p.bound {
        r.hline(LEFT, W - RIGHT, f.py(b), [192, 57, 43], true);
    }
    r.vline(LEFT, TOP, H - BOTTOM, [0, 0, 0]);
    r.hline(LEFT, W - RIGHT, H - BOTTOM, [0, 0, 0], false);
    for y in f.y_ticks() {
        let py = f.py(y);
        r.hline(LEFT - 5, LEFT, py, [0, 0, 0], false);
        r.number(y as i64, LEFT - 8, py.saturating_sub(5), false);
    }
    for x in f.x_ticks() {
        let px = f.px(x);
        r.vline(px, H - BOTTOM, H - BOTTOM + 5, [0, 0, 0]);
        r.number(x, px, H - BOTTOM + 9, true);
    }
    encode_png(&r.px)
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc.sum().to_be_bytes());
}

fn encode_png(px: &[[u8; 3]]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(H * (1 + W * 3));
    for row in px.chunks(W) {
        raw.push(0); // filter: none
        for p in row {
            raw.extend_from_slice(p);
        }
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&raw).expect("writing to memory");
    let idat = z.finish().expect("writing to memory");
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&(W as u32).to_be_bytes());
    ihdr.extend_from_slice(&(H as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &idat);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Writes the plot to `path`: PNG when it ends in `.png`, SVG otherwise.
pub fn write(path: &Path, p: &Plot) -> std::io::Result<()> {
    let is_png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if is_png {
        std::fs::write(path, png(p))
    } else {
        std::fs::write(path, svg(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_and_png_shapes() {
        let mut pts = Points::new(0, 999);
        (0..1000).for_each(|i| pts.add(i, (i % 79) as u64 * 100));
        assert_eq!(pts.cols.iter().flatten().map(|c| c.1).max(), Some(7800));
        let p = Plot { title: "t <x>".into(), points: &pts, bound: Some(9000), segment_starts: &[0, 500] };
        let s = svg(&p);
        assert!(s.starts_with("<svg") && s.contains("bound 9000") && s.contains("t &lt;x&gt;"));
        let b = png(&p);
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&b[12..16], b"IHDR");
        assert_eq!(nice_ceiling(16_350), 20_000);
        assert_eq!(nice_ceiling(1), 1);
    }
}
