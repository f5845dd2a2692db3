//! Charts as inline SVG (plotters' SVG backend, text as SVG `<text>`, no font files), each with
//! its numbers as a table: the text alternative a screen reader, a narrow window or a printout
//! reads.
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const W: u32 = 640;
const H: u32 = 300;
const PALETTE: [RGBColor; 5] = [
    RGBColor(0x3b, 0x6e, 0xa8),
    RGBColor(0xe0, 0x8a, 0x2c),
    RGBColor(0x4b, 0x9b, 0x5a),
    RGBColor(0xb5, 0x4a, 0x5a),
    RGBColor(0x7a, 0x5c, 0xa8),
];

/// One picture and its numbers.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub svg: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// A value as people read it: at most 3 decimals from 1 up (thousands whole), 5 below 1, then
/// scientific notation.
pub fn fmt(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .into()
    } else if a >= 1e-3 {
        format!("{v:.5}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .into()
    } else {
        format!("{v:.3e}")
    }
}

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn upper(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * 1.12
    } else {
        1.0
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

fn render(draw: impl FnOnce(&Area) -> Drawn) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let ok = root.fill(&WHITE).is_ok() && draw(&root).is_ok() && root.present().is_ok();
        if !ok {
            return String::new();
        }
    }
    // scale with the page: the fixed size becomes the aspect ratio
    svg.replacen(
        &format!("width=\"{W}\" height=\"{H}\""),
        &format!("viewBox=\"0 0 {W} {H}\" role=\"img\" preserveAspectRatio=\"xMidYMid meet\""),
        1,
    )
}

fn legend(
    root: &DrawingArea<SVGBackend, Shift>,
    names: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut x = 70;
    for (i, n) in names.iter().enumerate() {
        root.draw(&Rectangle::new([(x, 8), (x + 12, 20)], color(i).filled()))?;
        root.draw(&Text::new(
            n.clone(),
            (x + 16, 9),
            ("sans-serif", 13).into_font(),
        ))?;
        x += 24 + 8 * n.chars().count() as i32 + 20;
    }
    Ok(())
}

/// Bars per category, one bar per series side by side (`stacked`: one bar of all series).
pub fn bars(
    title: &str,
    unit: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
    stacked: bool,
) -> Chart {
    let n = categories.len().max(1);
    let max = if stacked {
        (0..n)
            .map(|c| {
                series
                    .iter()
                    .map(|(_, v)| v.get(c).copied().unwrap_or(0.0))
                    .sum::<f64>()
            })
            .fold(0.0, f64::max)
    } else {
        series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(0.0, f64::max)
    };
    let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
    let svg = render(|root| {
        legend(root, &names)?;
        let mut chart = ChartBuilder::on(root)
            .margin_top(28)
            .margin_right(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, 0f64..upper(max))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .max_light_lines(0)
            .y_desc(unit)
            .y_label_formatter(&|v| fmt(*v))
            .draw()?;
        let k = series.len().max(1) as f64;
        for (s, (_, values)) in series.iter().enumerate() {
            let style = color(s).filled();
            chart.draw_series(values.iter().enumerate().map(|(c, &v)| {
                let (x0, x1, y0) = if stacked {
                    let below: f64 = series[..s]
                        .iter()
                        .map(|(_, v)| v.get(c).copied().unwrap_or(0.0))
                        .sum();
                    (c as f64 + 0.2, c as f64 + 0.8, below)
                } else {
                    let w = 0.8 / k;
                    (
                        c as f64 + 0.1 + w * s as f64,
                        c as f64 + 0.1 + w * (s as f64 + 0.9),
                        0.0,
                    )
                };
                Rectangle::new([(x0, y0), (x1, y0 + v.max(0.0))], style)
            }))?;
        }
        let style = ("sans-serif", 13)
            .into_font()
            .into_text_style(root)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (c, name) in categories.iter().enumerate() {
            chart.draw_series(std::iter::once(Text::new(
                name.clone(),
                (c as f64 + 0.5, 0.0),
                style.clone(),
            )))?;
        }
        Ok(())
    });
    let mut head = vec![String::new()];
    head.extend(names);
    let rows = categories
        .iter()
        .enumerate()
        .map(|(c, name)| {
            let mut row = vec![name.clone()];
            row.extend(
                series
                    .iter()
                    .map(|(_, v)| v.get(c).map_or("—".into(), |x| fmt(*x))),
            );
            row
        })
        .collect();
    Chart {
        title: title.into(),
        svg,
        head,
        rows,
    }
}

/// Points (and lines through them when `joined`) of several series; `hlines` are labelled
/// horizontal rules (a median, a bound).
pub fn points(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    joined: bool,
    hlines: &[(String, f64)],
) -> Chart {
    let all = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let xmax = all().map(|p| p.0).fold(0.0, f64::max);
    let xmin = all().map(|p| p.0).fold(f64::INFINITY, f64::min).min(0.0);
    let ymax = all()
        .map(|p| p.1)
        .chain(hlines.iter().map(|h| h.1))
        .fold(0.0, f64::max);
    let mut names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
    names.extend(hlines.iter().map(|(n, _)| n.clone()));
    let svg = render(|root| {
        legend(root, &names)?;
        let mut chart = ChartBuilder::on(root)
            .margin_top(28)
            .margin_right(16)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xmin..(xmax * 1.05).max(xmin + 1.0), 0f64..upper(ymax))?;
        chart
            .configure_mesh()
            .max_light_lines(0)
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&|v| fmt(*v))
            .y_label_formatter(&|v| fmt(*v))
            .draw()?;
        for (s, (_, pts)) in series.iter().enumerate() {
            let c = color(s);
            if joined {
                chart.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?;
            }
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
        for (h, (_, y)) in hlines.iter().enumerate() {
            let c = color(series.len() + h);
            chart.draw_series(LineSeries::new(
                [(xmin, *y), ((xmax * 1.05).max(xmin + 1.0), *y)],
                c.stroke_width(2),
            ))?;
        }
        Ok(())
    });
    let head = vec![String::new(), x_desc.to_string(), y_desc.to_string()];
    let mut rows: Vec<Vec<String>> = series
        .iter()
        .flat_map(|(name, pts)| {
            pts.iter()
                .map(move |(x, y)| vec![name.clone(), fmt(*x), fmt(*y)])
        })
        .collect();
    rows.extend(
        hlines
            .iter()
            .map(|(n, y)| vec![n.clone(), "—".into(), fmt(*y)]),
    );
    Chart {
        title: title.into(),
        svg,
        head,
        rows,
    }
}
