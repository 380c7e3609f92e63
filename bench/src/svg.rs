//! Line charts as hand-written SVG (no plotting dependency): latency CDFs, throughput over time,
//! lookup cost against index.interval.bytes. Axes may be logarithmic; a CDF's y axis is drawn in
//! "nines" (50 %, 90 %, 99 %, 99.9 %, ...) so the tail gets the room it deserves.

use std::fmt::Write as _;

const W: f64 = 900.0;
const H: f64 = 480.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
const COLORS: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/// One line.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart of lines.
#[derive(Clone, Debug, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    /// Explicit y ticks (value in plot units, label); default: evenly spaced.
    pub y_ticks: Option<Vec<(f64, String)>>,
    pub series: Vec<Series>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

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

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn new(vals: impl Iterator<Item = f64>, log: bool) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in vals.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            (lo, hi) = (if log { 1.0 } else { 0.0 }, 1.0);
        }
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil().max(lo.log10() + 1.0));
        } else {
            lo = lo.min(0.0);
            if hi <= lo {
                hi = lo + 1.0;
            }
            hi *= 1.05;
        }
        Axis { lo, hi, log }
    }
    /// Position in [0, 1].
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let mut t = Vec::new();
            let mut v = self.lo;
            while v <= self.hi * 1.0001 {
                t.push(v);
                v *= 10.0;
            }
            t
        } else {
            let step = nice_step((self.hi - self.lo) / 6.0);
            let mut t = Vec::new();
            let mut v = (self.lo / step).ceil() * step;
            while v <= self.hi {
                t.push(v);
                v += step;
            }
            t
        }
    }
}

fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-12).log10().floor());
    let m = raw / p;
    p * if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// The chart as an SVG document.
pub fn render(c: &Chart) -> String {
    let xs = Axis::new(c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)), c.x_log);
    let ys = match &c.y_ticks {
        Some(t) if !t.is_empty() => {
            let hi = t.iter().map(|x| x.0).fold(f64::NEG_INFINITY, f64::max);
            let top = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(hi, f64::max);
            Axis { lo: t[0].0.min(0.0), hi: top.max(hi), log: false }
        }
        _ => Axis::new(c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)), c.y_log),
    };
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |v: f64| LEFT + xs.frac(v) * pw;
    let py = |v: f64| TOP + ph - ys.frac(v) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        esc(&c.title)
    );
    // Grid and ticks.
    for t in xs.ticks() {
        let x = px(t);
        let _ = write!(s, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##, TOP + ph);
        let _ = write!(s, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, TOP + ph + 16.0, fmt_num(t));
    }
    let yt: Vec<(f64, String)> = match &c.y_ticks {
        Some(t) => t.clone(),
        None => ys.ticks().into_iter().map(|t| (t, fmt_num(t))).collect(),
    };
    for (t, label) in yt {
        let y = py(t);
        let _ = write!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, LEFT + pw);
        let _ = write!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, esc(&label));
    }
    let _ = write!(s, r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 12.0,
        esc(&c.x_label)
    );
    let _ = write!(
        s,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(&c.y_label)
    );
    // Lines and legend.
    for (i, ser) in c.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Past the palette, lines are dashed so that no two series look alike.
        let dash = if i >= COLORS.len() { r#" stroke-dasharray="6 3""# } else { "" };
        let pts: Vec<String> = ser
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!xs.log || p.0 > 0.0))
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        if pts.len() == 1 {
            let (x, y) = pts[0].split_once(',').unwrap_or(("0", "0"));
            let _ = write!(s, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
        } else if !pts.is_empty() {
            let _ = write!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.6"{dash} points="{}"/>"#,
                pts.join(" ")
            );
        }
        let ly = TOP + 14.0 + i as f64 * 18.0;
        let lx = LEFT + pw + 12.0;
        let _ = write!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"{dash}/>"#,
            lx + 18.0
        );
        let _ = write!(s, r#"<text x="{}" y="{}">{}</text>"#, lx + 24.0, ly + 4.0, esc(&ser.name));
    }
    s.push_str("</svg>\n");
    s
}

/// A latency CDF chart: each series is `(latency us, cumulative fraction)`; the y axis shows nines.
pub fn latency_cdf(title: &str, series: Vec<Series>) -> Chart {
    let nines = |q: f64| -(1.0 - q.min(0.999_999_9)).log10();
    let series = series
        .into_iter()
        .map(|s| Series { name: s.name, points: s.points.into_iter().map(|(x, q)| (x, nines(q))).collect() })
        .collect();
    let labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"];
    Chart {
        title: title.into(),
        x_label: "latency (microseconds, log scale)".into(),
        y_label: "fraction of operations at or below".into(),
        x_log: true,
        y_log: false,
        y_ticks: Some(labels.iter().enumerate().map(|(i, l)| (i as f64, l.to_string())).collect()),
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_well_formed_document() {
        let c = latency_cdf(
            "t <1>",
            vec![
                Series { name: "a".into(), points: vec![(1.0, 0.5), (10.0, 0.99), (100.0, 1.0)] },
                Series { name: "b".into(), points: vec![(3.0, 0.5)] },
            ],
        );
        let s = render(&c);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("t &lt;1&gt;") && s.contains("<polyline") && s.contains("<circle"));
        assert!(!s.contains("NaN"));
    }
}
