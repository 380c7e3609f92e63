//! Every chart the project draws, as SVG through `plotters` (its SVG backend only: text goes out
//! as SVG `<text>` for the viewer to set, so no font files or system libraries are needed):
//! `seglog bench --plot DIR` (latency CDFs, throughput over time, lookup cost against
//! index.interval.bytes) and `seglog index-report --plot FILE` (bytes scanned per offset, binned
//! per column as the lookups come: [`Columns`]). Axes may be logarithmic; a CDF's y axis is drawn
//! in "nines" (0 %, 90 %, 99 %, 99.9 %, ...) so the tail gets the room it deserves.
//!
//! This crate draws what it is given; it computes no statistics (the callers' histograms do). It is
//! a crate of its own so that the seglog command draws `index-report --plot` without the benchmark
//! crate.

use std::error::Error;
use std::io;
use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Size of every chart, in pixels.
pub const WIDTH: u32 = 900;
pub const HEIGHT: u32 = 480;
/// Width of the legend beside the plot, when a series has a name.
const LEGEND_WIDTH: u32 = 220;
/// Columns a [`Columns`] bins into: about one per pixel of a chart's plot area without a legend.
pub const COLUMNS: usize = 800;

const FONT: &str = "sans-serif";
const GRID: RGBColor = RGBColor(0xdd, 0xdd, 0xdd);
const GUIDE: RGBColor = RGBColor(0xcc, 0xcc, 0xcc);
const MARK: RGBColor = RGBColor(0xc0, 0x39, 0x2b);
/// Series colours in order; past the palette, lines are dashed so that no two series look alike.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

#[derive(Clone, Debug)]
enum Data {
    /// Points joined by a line; a single point is drawn as a dot.
    Line(Vec<(f64, f64)>),
    /// `(x, low, high)`: a vertical stroke from low to high at each x.
    Ranges(Vec<(f64, f64, f64)>),
}

/// One series of a chart, named in the legend (a chart whose series have no names has none).
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    data: Data,
}

impl Series {
    /// Points `(x, y)` joined by a line.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), data: Data::Line(points) }
    }

    /// Vertical strokes `(x, low, high)`, such as the min and max of each of [`Columns`].
    pub fn ranges(name: impl Into<String>, ranges: Vec<(f64, f64, f64)>) -> Series {
        Series { name: name.into(), data: Data::Ranges(ranges) }
    }

    pub fn is_empty(&self) -> bool {
        match &self.data {
            Data::Line(p) => p.is_empty(),
            Data::Ranges(r) => r.is_empty(),
        }
    }

    /// Every `(x, y)` the series touches.
    fn points(&self) -> Vec<(f64, f64)> {
        match &self.data {
            Data::Line(p) => p.clone(),
            Data::Ranges(r) => r.iter().flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]).collect(),
        }
    }
}

/// A chart of series.
#[derive(Clone, Debug, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    /// The x axis's range; default: the data's (from 0 on a linear axis, whole decades on a log
    /// one).
    pub x_range: Option<(f64, f64)>,
    /// Explicit y ticks `(value, label)` on a linear y axis; default: plotters' own.
    pub y_ticks: Option<Vec<(f64, String)>>,
    /// Light vertical guides at these x values (index-report: where segments start).
    pub x_guides: Vec<f64>,
    /// Labelled dashed horizontal lines `(y, label)` (index-report: the bound on bytes scanned).
    pub y_marks: Vec<(f64, String)>,
    pub series: Vec<Series>,
}

impl Chart {
    /// Whether there is nothing to draw.
    pub fn is_empty(&self) -> bool {
        self.series.iter().all(Series::is_empty)
    }
}

/// A tick label: short, with k and M for thousands and millions.
fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.0}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Whether `v` can be drawn on a (log) axis.
fn drawable(v: f64, log: bool) -> bool {
    v.is_finite() && (!log || v > 0.0)
}

/// The range of an axis showing `vals`: whole decades on a log axis; from 0 (or below) with 5 %
/// of headroom on a linear one.
fn span(vals: impl Iterator<Item = f64>, log: bool) -> Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|&v| drawable(v, log)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        (lo, hi) = (if log { 1.0 } else { 0.0 }, 1.0);
    }
    if log {
        let (a, b) = (lo.log10().floor(), hi.log10().ceil());
        10f64.powf(a)..10f64.powf(b.max(a + 1.0))
    } else {
        lo = lo.min(0.0);
        if hi <= lo {
            hi = lo + 1.0;
        }
        lo..hi * 1.05
    }
}

/// The chart as an SVG document.
pub fn render(c: &Chart) -> io::Result<String> {
    let all: Vec<(f64, f64)> = c.series.iter().flat_map(Series::points).collect();
    let x = match c.x_range {
        Some((a, b)) => a..if b > a { b } else { a + 1.0 },
        None => span(all.iter().map(|p| p.0), c.x_log),
    };
    let y = match &c.y_ticks {
        Some(t) if !t.is_empty() => {
            let top = t.iter().map(|t| t.0).chain(all.iter().map(|p| p.1)).fold(f64::NEG_INFINITY, f64::max);
            t[0].0.min(0.0)..top
        }
        _ => span(all.iter().map(|p| p.1).chain(c.y_marks.iter().map(|m| m.0)), c.y_log),
    };
    let mut svg = String::new();
    let drawn =
        if c.x_log { with_y(c, &mut svg, x.clone().log_scale(), x, y) } else { with_y(c, &mut svg, x.clone(), x, y) };
    drawn.map_err(io::Error::other)?;
    Ok(svg)
}

/// Writes the chart to `path`.
pub fn write(path: &Path, c: &Chart) -> io::Result<()> {
    std::fs::write(path, render(c)?)
}

type DrawResult = Result<(), Box<dyn Error + Send + Sync>>;

/// Picks the y axis's kind (nines ticks, log, linear) for [`draw`].
fn with_y<X>(c: &Chart, svg: &mut String, x: X, xs: Range<f64>, y: Range<f64>) -> DrawResult
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    match &c.y_ticks {
        Some(t) if !t.is_empty() => {
            let ticks = Ticked { linear: y.clone().into(), ticks: t.iter().map(|t| t.0).collect() };
            draw(c, svg, x, xs, ticks, y)
        }
        _ if c.y_log => draw(c, svg, x, xs, y.clone().log_scale(), y),
        _ => draw(c, svg, x, xs, y.clone(), y),
    }
}

/// A linear axis with exactly the ticks it is given (a CDF's nines), labelled by the chart.
#[derive(Clone)]
struct Ticked {
    linear: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.linear.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // No light grid lines between the ticks.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.linear.range()
    }
}

fn draw<X, Y>(c: &Chart, svg: &mut String, x: X, xs: Range<f64>, y: Y, ys: Range<f64>) -> DrawResult
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let legend = c.series.iter().any(|s| !s.name.is_empty());
    let (plot_area, legend_area) = if legend {
        let (p, l) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        (p, Some(l))
    } else {
        (root.clone(), None)
    };
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(&c.title, (FONT, 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(x, y)?;
    let y_tick_label = |v: &f64| {
        let named = c.y_ticks.iter().flatten().find(|t| (t.0 - v).abs() < 1e-9);
        named.map_or_else(|| fmt_num(*v), |t| t.1.clone())
    };
    chart
        .configure_mesh()
        .x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .x_label_formatter(&|v| fmt_num(*v))
        .y_label_formatter(&y_tick_label)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .draw()?;
    for &g in c.x_guides.iter().filter(|&&g| g >= xs.start && g <= xs.end) {
        chart.draw_series(std::iter::once(PathElement::new(vec![(g, ys.start), (g, ys.end)], GUIDE)))?;
    }
    for (i, s) in c.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let style = color.stroke_width(2);
        let ok = |&(x, y): &(f64, f64)| drawable(x, c.x_log) && drawable(y, c.y_log);
        match &s.data {
            Data::Line(points) => {
                let points: Vec<(f64, f64)> = points.iter().copied().filter(ok).collect();
                if points.len() == 1 {
                    chart.draw_series(std::iter::once(Circle::new(points[0], 3, color.filled())))?;
                } else if i >= PALETTE.len() {
                    chart.draw_series(DashedLineSeries::new(points, 6, 3, style))?;
                } else {
                    chart.draw_series(LineSeries::new(points, style))?;
                }
            }
            Data::Ranges(ranges) => {
                // In pixels, a pixel longer at each end, so that a column whose values are all
                // equal still shows.
                let area = chart.plotting_area();
                for &(x, lo, hi) in ranges.iter().filter(|&&(x, lo, hi)| ok(&(x, lo)) && ok(&(x, hi))) {
                    let ((px, bottom), (_, top)) = (area.map_coordinate(&(x, lo)), area.map_coordinate(&(x, hi)));
                    root.draw(&PathElement::new(vec![(px, bottom + 1), (px, top - 1)], style))?;
                }
            }
        }
    }
    for (v, label) in c.y_marks.iter().filter(|m| drawable(m.0, c.y_log)) {
        chart.draw_series(DashedLineSeries::new(vec![(xs.start, *v), (xs.end, *v)], 6, 4, MARK.stroke_width(1)))?;
        let style = (FONT, 12).into_font().color(&MARK).pos(Pos::new(HPos::Right, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(label.clone(), (xs.end, *v), style)))?;
    }
    if let Some(area) = legend_area {
        let named = c.series.iter().enumerate().filter(|(_, s)| !s.name.is_empty());
        for (row, (i, s)) in named.enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let y = 54 + 18 * row as i32;
            let stroke = vec![(12, y), (30, y)];
            if i >= PALETTE.len() {
                area.draw(&DashedPathElement::new(stroke, 6, 3, color.stroke_width(3)))?;
            } else {
                area.draw(&PathElement::new(stroke, color.stroke_width(3)))?;
            }
            let style = TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
            area.draw(&Text::new(s.name.clone(), (36, y), style))?;
        }
    }
    root.present()?;
    Ok(())
}

/// A latency CDF chart: each series is `(latency us, cumulative fraction)`; the y axis shows nines.
pub fn latency_cdf(title: &str, series: Vec<Series>) -> Chart {
    let nines = |q: f64| -(1.0 - q.min(0.999_999_9)).log10();
    let series = series
        .into_iter()
        .map(|s| {
            let points = s.points().into_iter().map(|(x, q)| (x, nines(q))).collect();
            Series::line(s.name, points)
        })
        .collect();
    let labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"];
    Chart {
        title: title.into(),
        x_label: "latency (microseconds, log scale)".into(),
        y_label: "fraction of operations at or below".into(),
        x_log: true,
        y_ticks: Some(labels.iter().enumerate().map(|(i, l)| (i as f64, l.to_string())).collect()),
        series,
        ..Default::default()
    }
}

/// Points binned into [`COLUMNS`] columns over an x range fixed up front, keeping the min and max
/// y of each column: memory is fixed however many points come, and a chart of millions of them
/// stays small.
#[derive(Clone, Debug)]
pub struct Columns {
    x0: f64,
    x1: f64,
    cols: Vec<Option<(f64, f64)>>,
}

impl Columns {
    /// Columns over `[x0, x1]` (the first and last x that will be added; one outside lands on an
    /// edge).
    pub fn new(x0: f64, x1: f64) -> Columns {
        Columns { x0, x1: if x1 > x0 { x1 } else { x0 + 1.0 }, cols: vec![None; COLUMNS] }
    }

    fn column(&self, x: f64) -> usize {
        let f = (x - self.x0) / (self.x1 - self.x0);
        // NaN lands on the first column (a saturating cast).
        (f * (COLUMNS - 1) as f64).round().clamp(0.0, (COLUMNS - 1) as f64) as usize
    }

    /// One point.
    pub fn add(&mut self, x: f64, y: f64) {
        let i = self.column(x);
        let c = &mut self.cols[i];
        *c = Some(match *c {
            None => (y, y),
            Some((lo, hi)) => (lo.min(y), hi.max(y)),
        });
    }

    /// The range of x the columns cover.
    pub fn x_range(&self) -> (f64, f64) {
        (self.x0, self.x1)
    }

    /// A vertical stroke from the min to the max of each column that has points.
    pub fn series(&self, name: impl Into<String>) -> Series {
        let step = (self.x1 - self.x0) / (COLUMNS - 1) as f64;
        let ranges = self
            .cols
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.map(|(lo, hi)| (self.x0 + step * i as f64, lo, hi)))
            .collect();
        Series::ranges(name, ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `svg` as XML (a well-formed document with an `<svg>` root) and returns the text of
    /// its `<text>` elements.
    fn texts(svg: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed: {e}\n{svg}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(|t| t.trim().to_string()))
            .collect()
    }

    fn count(svg: &str, tag: &str) -> usize {
        let doc = roxmltree::Document::parse(svg).unwrap();
        doc.descendants().filter(|n| n.has_tag_name(tag)).count()
    }

    #[test]
    fn a_cdf_has_its_series_its_labels_and_nines() {
        let c = latency_cdf(
            "t <1> & co",
            vec![Series::line("a", vec![(1.0, 0.5), (10.0, 0.99), (100.0, 1.0)]), Series::line("b", vec![(3.0, 0.5)])],
        );
        let s = render(&c).unwrap();
        let t = texts(&s);
        for want in ["t <1> & co", "a", "b", "latency (microseconds, log scale)", "99%", "99.9%", "100"] {
            assert!(t.iter().any(|x| x == want), "no text {want:?} in {t:?}");
        }
        // The line of "a" and its legend stroke; "b" alone is a dot.
        assert!(count(&s, "polyline") >= 2 && count(&s, "circle") == 1, "{s}");
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    #[test]
    fn log_and_linear_axes_and_many_series() {
        for (x_log, y_log) in [(false, false), (true, true), (true, false), (false, true)] {
            let series =
                (0..12).map(|i| Series::line(format!("s{i}"), vec![(1.0, 1.0 + i as f64), (1e4, 1e3)])).collect();
            let c = Chart { title: "t".into(), x_log, y_log, series, ..Default::default() };
            let s = render(&c).unwrap();
            let t = texts(&s);
            assert!(t.iter().any(|x| x == "s11"), "{t:?}");
            // Past the palette, series are dashed: more line pieces than series.
            assert!(count(&s, "polyline") > 24, "{x_log} {y_log}");
            assert!(!s.contains("NaN"));
        }
        // Nothing to draw still makes a document.
        let s = render(&Chart { x_log: true, y_log: true, ..Default::default() }).unwrap();
        texts(&s);
    }

    #[test]
    fn columns_guides_and_marks() {
        let mut cols = Columns::new(1000.0, 1999.0);
        (1000..2000).for_each(|i| cols.add(i as f64, ((i % 79) * 100) as f64));
        let s = cols.series("");
        let Data::Ranges(r) = s.data.clone() else { panic!("ranges") };
        assert!(r.len() <= COLUMNS && r.len() > COLUMNS / 2, "{}", r.len());
        assert_eq!(r.iter().map(|r| r.2).fold(0.0, f64::max), 7800.0);
        assert!(r.iter().all(|r| r.0 >= 1000.0 && r.0 <= 1999.0 && r.1 <= r.2));
        let c = Chart {
            title: "scan <x>".into(),
            y_label: "bytes scanned".into(),
            x_range: Some(cols.x_range()),
            x_guides: vec![1000.0, 1500.0, 5000.0],
            y_marks: vec![(9000.0, "bound 9000".into())],
            series: vec![s],
            ..Default::default()
        };
        let svg = render(&c).unwrap();
        let t = texts(&svg);
        assert!(t.iter().any(|x| x == "bound 9000") && t.iter().any(|x| x == "scan <x>"), "{t:?}");
        // A stroke per column with points, two guides in range, the dashed mark; no legend.
        assert!(count(&svg, "polyline") >= r.len() + 2 + 2, "{}", count(&svg, "polyline"));
        assert!(svg.len() < 1 << 20);
    }

    #[test]
    fn tick_labels() {
        assert_eq!(fmt_num(2_000_000.0), "2M");
        assert_eq!(fmt_num(16_384.0), "16k");
        assert_eq!(fmt_num(4096.0), "4096");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(span([3.0, 700.0].into_iter(), true), 1.0..1000.0);
        assert_eq!(span(std::iter::empty(), false), 0.0..1.05);
    }
}
