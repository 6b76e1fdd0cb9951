// Small inline-SVG charts for pare's HTML report: XY charts (lines and labelled scatter points,
// linear or log axes with ticks, a legend) and grouped bar charts, each returned as one
// <svg class="chart" data-chart="NAME"> element with a <title>. No script, no external resource:
// hover text is SVG <title>, styling comes from the page's classes (ct, grid, axis, tick, ...).
//
//   PlotSeries s;
//   s.name = "distill"; s.color = "#4e79a7"; s.x = {1, 2, 3}; s.y = {85.1, 88.0, 89.2};
//   std::string svg = xy_chart({"val_accuracy", "Validation accuracy"}, {"epoch"}, {"accuracy (%)"}, {s});
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pare::pipeline {

/// `s` with & < > " ' replaced by entities: safe as HTML text and inside quoted attributes.
std::string html_escape(std::string_view s);

/// `v` with `decimals` digits after the point ("-0" printed as "0"), thousands separated by commas
/// when `group`; "n/a" for NaN and infinities.
std::string format_number(double v, int decimals, bool group = false);

/// The name (data-chart), visible title and size (SVG user units; the page scales it) of a chart.
struct ChartFrame {
  std::string name, title;
  int width = 560, height = 360;
};

/// An axis: its label, log scale (non-positive values are left out), ticks on whole numbers only,
/// a fixed range (else the data's, padded to round ticks) and the unit appended to values in hover
/// text.
struct PlotAxis {
  std::string label;
  bool log = false, integer = false;
  std::optional<double> min, max;
  std::string unit;
};

/// One series of an XY chart. Points whose x or y is not finite (or not positive on a log axis)
/// are left out.
struct PlotSeries {
  std::string name;                 ///< legend text ("" = not in the legend)
  std::string color = "#4e79a7";    ///< any CSS colour
  std::vector<double> x, y;
  std::vector<std::string> labels;  ///< text drawn next to each point ("" or absent = none)
  std::vector<std::string> tips;    ///< hover text of each point
  std::string key;                  ///< data-stage attribute of its elements ("" = none)
  bool line = true;                 ///< joins the points with a polyline
  bool markers = true;              ///< draws each point
  bool hollow = false;              ///< markers drawn as rings
  bool dashed = false;
};

/// A line or scatter chart of `series` on axes `x` and `y`.
std::string xy_chart(const ChartFrame& frame, const PlotAxis& x, const PlotAxis& y,
                     const std::vector<PlotSeries>& series);

/// One series of a bar chart: a value (or none) per category.
struct BarSeries {
  std::string name, color = "#4e79a7";
  std::vector<std::optional<double>> values;
};

/// Grouped bars: for each of `categories`, one bar per series (values on axis `y`, which starts
/// at 0 unless the data goes below). Labels that do not fit are slanted (the chart grows taller by
/// their height), then thinned.
std::string bar_chart(const ChartFrame& frame, const std::vector<std::string>& categories, const PlotAxis& y,
                      const std::vector<BarSeries>& series);

}  // namespace pare::pipeline
