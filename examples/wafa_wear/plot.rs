//! The paper's Figure 5 for one workload: the CDF of writes (allocations) per 64 B
//! unit, one line per allocator, drawn with plotters' SVG backend.
//!
//! The lower panel is the whole CDF; the upper one expands the 99.99 %–100 % interval
//! as the paper's figure does (values below 99.99 % sit on its bottom edge). The x
//! axis is logarithmic from 1 write: the value a curve has at x = 1 includes the
//! units never written (units of touched pages that no allocation covered).

use std::path::Path;

use plotters::prelude::*;

/// One allocator's CDF: (writes per unit, fraction of units with at most that many).
pub struct Curve<'a> {
    /// Allocator name (legend).
    pub name: &'a str,
    /// Ascending steps, last fraction 1.0 (`wafa::wear::cdf`).
    pub cdf: &'a [(u64, f64)],
}

/// Lower edge of the zoomed panel.
const ZOOM_FROM: f64 = 0.9999;

/// Line colours, in curve order.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0xd6, 0x27, 0x28), // red: wafa
    RGBColor(0x1f, 0x77, 0xb4), // blue
    RGBColor(0x2c, 0xa0, 0x2c), // green
    RGBColor(0xff, 0x7f, 0x0e), // orange
    RGBColor(0x94, 0x67, 0xbd), // purple
    RGBColor(0x8c, 0x56, 0x4b), // brown
    RGBColor(0xe3, 0x77, 0xc2), // pink
    RGBColor(0x7f, 0x7f, 0x7f), // grey
];

/// The CDF as a staircase starting at x = 1 (`F(1)` covers the zero-write units).
fn staircase(cdf: &[(u64, f64)], x_max: f64) -> Vec<(f64, f64)> {
    let mut pts = Vec::with_capacity(2 * cdf.len() + 2);
    let mut f = 0.0;
    for &(c, frac) in cdf {
        if c <= 1 {
            f = frac;
            continue;
        }
        if pts.is_empty() {
            pts.push((1.0, f));
        }
        pts.push((c as f64, f));
        pts.push((c as f64, frac));
        f = frac;
    }
    if pts.is_empty() {
        pts.push((1.0, f));
    }
    pts.push((x_max, f));
    pts
}

/// Writes the figure for `workload` to `path`.
pub fn write_cdf_svg(path: &Path, workload: &str, curves: &[Curve<'_>]) -> Result<(), String> {
    draw(path, workload, curves).map_err(|e| format!("plotting {}: {e}", path.display()))
}

fn draw(
    path: &Path,
    workload: &str,
    curves: &[Curve<'_>],
) -> Result<(), Box<dyn std::error::Error>> {
    let max_count = curves
        .iter()
        .filter_map(|c| c.cdf.last().map(|l| l.0))
        .max()
        .unwrap_or(1);
    // Room to the right of the largest count, so its vertical step is visible.
    let x_max = ((max_count.max(2) as f64) * 1.5).max(10.0);
    let root = SVGBackend::new(path, (900, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("{workload}: CDF of writes per 64 B unit"),
        ("sans-serif", 22),
    )?;
    let (top, bottom) = root.split_vertically(250);

    let mut zoom = ChartBuilder::on(&top)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(80)
        .caption("99.99 % - 100 %", ("sans-serif", 15))
        .build_cartesian_2d((1f64..x_max).log_scale(), ZOOM_FROM..1.000_002f64)?;
    zoom.configure_mesh()
        .y_labels(3)
        .y_label_formatter(&|y| format!("{:.3}%", y * 100.0))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;

    let mut full = ChartBuilder::on(&bottom)
        .margin(10)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d((1f64..x_max).log_scale(), 0f64..1.02f64)?;
    full.configure_mesh()
        .x_desc("writes per unit (log scale; the value at 1 includes units never written)")
        .y_desc("fraction of units")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()?;

    for (i, c) in curves.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let style = ShapeStyle::from(&color).stroke_width(if i == 0 { 3 } else { 2 });
        let pts = staircase(c.cdf, x_max);
        full.draw_series(LineSeries::new(pts.iter().copied(), style))?
            .label(c.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        zoom.draw_series(LineSeries::new(
            pts.iter().map(|&(x, y)| (x, y.max(ZOOM_FROM))),
            style,
        ))?;
    }
    full.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staircase_starts_at_one_and_steps_at_each_count() {
        let pts = staircase(&[(0, 0.25), (1, 0.5), (4, 0.75), (9, 1.0)], 20.0);
        assert_eq!(
            pts,
            vec![
                (1.0, 0.5),
                (4.0, 0.5),
                (4.0, 0.75),
                (9.0, 0.75),
                (9.0, 1.0),
                (20.0, 1.0)
            ]
        );
        assert_eq!(staircase(&[(1, 1.0)], 10.0), vec![(1.0, 1.0), (10.0, 1.0)]);
    }

    #[test]
    fn writes_an_svg() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.svg");
        let a = [(0u64, 0.1), (3, 1.0)];
        let b = [(1u64, 0.5), (50, 0.99995), (80, 1.0)];
        write_cdf_svg(
            &p,
            "test",
            &[Curve { name: "a", cdf: &a }, Curve { name: "b", cdf: &b }],
        )
        .expect("plot");
        let s = std::fs::read_to_string(&p).expect("read");
        assert!(s.starts_with("<svg") && s.contains("polyline"));
    }
}
