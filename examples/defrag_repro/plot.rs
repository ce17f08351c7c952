//! The footprint over time (SVG, plotters): one panel per workload, footprint in
//! MiB against operations, for pmkit with its collector, pmkit without, PMDK with
//! `pmemobj_defrag`, PMDK without, and the live bytes.

use std::path::Path;

use plotters::prelude::*;

use crate::workloads::Sample;

/// One line of a panel.
pub struct Line<'a> {
    /// Legend.
    pub name: &'static str,
    /// Check points.
    pub samples: &'a [Sample],
    /// Plot the live bytes rather than the footprint.
    pub live: bool,
}

/// One workload's panel.
pub struct Panel<'a> {
    /// Title.
    pub title: String,
    /// Lines.
    pub lines: Vec<Line<'a>>,
}

const COLORS: [RGBColor; 5] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x2c, 0xa0, 0x2c),
];

/// Writes the panels to `path`, two per row.
pub fn write_svg(path: &Path, panels: &[Panel<'_>]) -> Result<(), String> {
    draw(path, panels).map_err(|e| format!("plotting {}: {e}", path.display()))
}

fn draw(path: &Path, panels: &[Panel<'_>]) -> Result<(), Box<dyn std::error::Error>> {
    let rows = panels.len().div_ceil(2).max(1);
    let root = SVGBackend::new(path, (1200, 360 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((rows, 2));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let mib = |s: &Sample, live: bool| {
            (if live { s.live } else { s.footprint }) as f64 / (1u64 << 20) as f64
        };
        let x_max = panel
            .lines
            .iter()
            .filter_map(|l| l.samples.last().map(|s| s.ops))
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let y_max = panel
            .lines
            .iter()
            .flat_map(|l| l.samples.iter().map(|s| mib(s, l.live)))
            .fold(0.0f64, f64::max)
            .max(0.1)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("operations")
            .y_desc("MiB")
            .draw()?;
        for (i, l) in panel.lines.iter().enumerate() {
            let style = ShapeStyle::from(&COLORS[i % COLORS.len()]).stroke_width(2);
            chart
                .draw_series(LineSeries::new(
                    l.samples.iter().map(|s| (s.ops as f64, mib(s, l.live))),
                    style,
                ))?
                .label(l.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
