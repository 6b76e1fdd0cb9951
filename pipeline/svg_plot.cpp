// Inline-SVG charts for the HTML report: scales, ticks, legend, XY and bar charts.
#include "pipeline/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace pare::pipeline {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_number(double v, int decimals, bool group) {
  if (!std::isfinite(v)) return "n/a";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 12), v);
  std::string s = buf;
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  if (group) {
    const size_t start = s[0] == '-' ? 1 : 0;
    for (size_t at = std::min(s.find('.'), s.size()); at > start + 3;) {
      at -= 3;
      s.insert(at, ",");
    }
  }
  return s;
}

namespace {

constexpr double kTitleHeight = 34;  // the chart's title line
constexpr double kLegendRow = 18;
constexpr double kMarginLeft = 64, kMarginRight = 24;

// Coordinates in the SVG, one decimal.
std::string px(double v) { return format_number(v, 1); }

// Estimated width of `s` in 11-12 px sans-serif text (code points, not bytes), for layout only.
double text_width(const std::string& s, double font_px = 11.5) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return static_cast<double>(n) * font_px * 0.56;
}

// Maps data values on [lo, hi] (log10 of them on a log axis) to pixels on [p0, p1].
struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  double p0 = 0, p1 = 1;

  double t(double v) const { return log ? std::log10(v) : v; }
  double operator()(double v) const { return p0 + (t(v) - t(lo)) / (t(hi) - t(lo)) * (p1 - p0); }
  bool accepts(double v) const { return std::isfinite(v) && (!log || v > 0); }
};

// 1, 2 or 5 times a power of ten, near `raw`.
double nice_step(double raw) {
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

// Digits after the point that show multiples of `step` exactly.
int step_decimals(double step) { return std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9))); }

double linear_step(const Scale& s, int target, bool integer) {
  const double step = nice_step((s.hi - s.lo) / std::max(target, 1));
  return integer ? std::max(step, 1.0) : step;
}

// Sets the range of `s` to the values it accepts: the axis' fixed ends where given, else the
// data's padded by `pad_fraction` of their span (a linear axis widened to whole ticks and kept >= 0
// for data >= 0).
void fit_range(Scale& s, const std::vector<double>& values, const PlotAxis& ax, double pad_fraction = 0.05) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values)
    if (s.accepts(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (lo > hi) lo = s.log ? 1 : 0, hi = s.log ? 10 : 1;  // no data: an empty unit frame
  if (s.log) {
    if (hi / lo < 1.01) lo /= 1.5, hi *= 1.5;
    const double pad = std::pow(hi / lo, pad_fraction + 0.02);
    s.lo = ax.min.value_or(lo / pad);
    s.hi = ax.max.value_or(hi * pad);
    return;
  }
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    const double d = hi != 0 ? std::abs(hi) * 0.02 : 1;
    lo -= d, hi += d;
  }
  const double pad = (hi - lo) * pad_fraction;
  const bool non_negative = lo >= 0;
  s.lo = ax.min.value_or(non_negative ? std::max(0.0, lo - pad) : lo - pad);
  s.hi = ax.max.value_or(hi + pad);
  // Widen to whole ticks; a wider range may call for a larger step, so settle it in a few rounds.
  for (int round = 0; round < 3; ++round) {
    const double step = linear_step(s, 5, ax.integer);
    if (!ax.min) s.lo = std::floor(s.lo / step + 1e-9) * step;
    if (!ax.max) s.hi = std::ceil(s.hi / step - 1e-9) * step;
  }
  if (s.hi <= s.lo) s.hi = s.lo + 1;
}

struct Tick {
  double at;
  std::string text;
};

std::vector<Tick> linear_ticks(const Scale& s, int target, bool integer) {
  const double step = linear_step(s, target, integer);
  std::vector<Tick> ticks;
  for (double k = std::ceil(s.lo / step - 1e-9); k * step <= s.hi + step * 1e-9; k += 1) {
    const double v = k * step;
    if (s.accepts(v)) ticks.push_back({v, format_number(v, step_decimals(step), true)});
  }
  return ticks;
}

// Decades (and 2x, 5x within a narrow range) on a log axis; plain steps when the range is too
// narrow for three of those.
std::vector<Tick> log_ticks(const Scale& s, int target) {
  const double decades = std::log10(s.hi / s.lo);
  const std::vector<double> mults = decades <= 2.2 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
  std::vector<Tick> ticks;
  for (int d = static_cast<int>(std::floor(std::log10(s.lo))); d <= std::ceil(std::log10(s.hi)); ++d)
    for (double m : mults) {
      const double v = m * std::pow(10.0, d);
      if (v >= s.lo * (1 - 1e-9) && v <= s.hi * (1 + 1e-9))
        ticks.push_back({v, format_number(v, v >= 1 ? 0 : step_decimals(v), true)});
    }
  return ticks.size() >= 3 ? ticks : linear_ticks(s, target, false);
}

std::vector<Tick> make_ticks(const Scale& s, int target, bool integer) {
  return s.log ? log_ticks(s, target) : linear_ticks(s, target, integer);
}

struct LegendItem {
  std::string name, color, key;
  bool line = true, marker = false, dashed = false;
  double x = 0, y = 0;  // set by place_legend
};

// Lays out `items` in rows from x0 to x1 starting at baseline y; returns the height used.
double place_legend(std::vector<LegendItem>& items, double x0, double x1, double y) {
  if (items.empty()) return 0;
  double x = x0, rows = 1;
  for (auto& it : items) {
    const double w = 26 + text_width(it.name) + 18;
    if (x > x0 && x + w > x1) x = x0, y += kLegendRow, rows += 1;
    it.x = x, it.y = y;
    x += w;
  }
  return rows * kLegendRow + 4;
}

void draw_legend(std::ostringstream& os, const std::vector<LegendItem>& items) {
  for (const auto& it : items) {
    const std::string key = it.key.empty() ? "" : " data-stage=\"" + html_escape(it.key) + "\"";
    os << "<g class=\"legend\"" << key << ">";
    if (it.line)
      os << "<line x1=\"" << px(it.x) << "\" y1=\"" << px(it.y - 4) << "\" x2=\"" << px(it.x + 20) << "\" y2=\""
         << px(it.y - 4) << "\" stroke=\"" << html_escape(it.color) << "\" stroke-width=\"2.5\""
         << (it.dashed ? " stroke-dasharray=\"5 4\"" : "") << "/>";
    if (it.marker)
      os << "<circle cx=\"" << px(it.x + 10) << "\" cy=\"" << px(it.y - 4) << "\" r=\"4\" fill=\""
         << html_escape(it.color) << "\"/>";
    os << "<text x=\"" << px(it.x + 26) << "\" y=\"" << px(it.y) << "\">" << html_escape(it.name) << "</text></g>";
  }
}

void open_svg(std::ostringstream& os, const ChartFrame& f) {
  os << "<svg class=\"chart\" data-chart=\"" << html_escape(f.name) << "\" viewBox=\"0 0 " << f.width << " "
     << f.height << "\" role=\"img\">"
     << "<title>" << html_escape(f.title) << "</title>"
     << "<text class=\"ct\" x=\"14\" y=\"22\">" << html_escape(f.title) << "</text>";
}

// Every k-th of `ticks` so that labels `min_gap` px apart fit in `span` px.
std::vector<Tick> thin(std::vector<Tick> ticks, double span, double min_gap) {
  if (ticks.size() < 2) return ticks;
  const size_t k = static_cast<size_t>(std::ceil(min_gap * (ticks.size() - 1) / std::max(span, 1.0)));
  if (k <= 1) return ticks;
  std::vector<Tick> kept;
  for (size_t i = 0; i < ticks.size(); i += k) kept.push_back(ticks[i]);
  return kept;
}

// Horizontal grid lines and labels of the y axis; the y axis label rotated on the left.
void draw_y_axis(std::ostringstream& os, const Scale& sy, const PlotAxis& ya, double x0, double x1) {
  for (const Tick& t : make_ticks(sy, 5, ya.integer)) {
    const double y = sy(t.at);
    os << "<line class=\"grid\" x1=\"" << px(x0) << "\" y1=\"" << px(y) << "\" x2=\"" << px(x1) << "\" y2=\""
       << px(y) << "\"/><text class=\"tick\" x=\"" << px(x0 - 8) << "\" y=\"" << px(y + 4)
       << "\" text-anchor=\"end\">" << html_escape(t.text) << "</text>";
  }
  const double mid = (sy.p0 + sy.p1) / 2;
  os << "<text class=\"al\" transform=\"translate(16 " << px(mid) << ") rotate(-90)\" text-anchor=\"middle\">"
     << html_escape(ya.label) << "</text>";
  os << "<line class=\"axis\" x1=\"" << px(x0) << "\" y1=\"" << px(sy.p0) << "\" x2=\"" << px(x0) << "\" y2=\""
     << px(sy.p1) << "\"/>";
}

void draw_x_axis(std::ostringstream& os, const Scale& sx, const PlotAxis& xa, double y0, double y1, double height) {
  std::vector<Tick> ticks = make_ticks(sx, std::max(2, static_cast<int>((sx.p1 - sx.p0) / 90)), xa.integer);
  double widest = 0;
  for (const Tick& t : ticks) widest = std::max(widest, text_width(t.text));
  for (const Tick& t : thin(ticks, sx.p1 - sx.p0, widest + 12)) {
    const double x = sx(t.at);
    os << "<line class=\"grid\" x1=\"" << px(x) << "\" y1=\"" << px(y0) << "\" x2=\"" << px(x) << "\" y2=\""
       << px(y1) << "\"/><line class=\"axis\" x1=\"" << px(x) << "\" y1=\"" << px(y0) << "\" x2=\"" << px(x)
       << "\" y2=\"" << px(y0 + 4) << "\"/><text class=\"tick\" x=\"" << px(x) << "\" y=\"" << px(y0 + 17)
       << "\" text-anchor=\"middle\">" << html_escape(t.text) << "</text>";
  }
  os << "<line class=\"axis\" x1=\"" << px(sx.p0) << "\" y1=\"" << px(y0) << "\" x2=\"" << px(sx.p1) << "\" y2=\""
     << px(y0) << "\"/><text class=\"al\" x=\"" << px((sx.p0 + sx.p1) / 2) << "\" y=\"" << px(height - 10)
     << "\" text-anchor=\"middle\">" << html_escape(xa.label) << "</text>";
}

struct Box {
  double x0, y0, x1, y1;
  double overlap(const Box& o) const {
    return std::max(0.0, std::min(x1, o.x1) - std::max(x0, o.x0)) * std::max(0.0, std::min(y1, o.y1) - std::max(y0, o.y0));
  }
};

struct PlacedPoint {
  double x, y;
  size_t index;  // into the series' vectors
};

std::vector<PlacedPoint> placed_points(const PlotSeries& s, const Scale& sx, const Scale& sy) {
  std::vector<PlacedPoint> pts;
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
    if (sx.accepts(s.x[i]) && sy.accepts(s.y[i])) pts.push_back({sx(s.x[i]), sy(s.y[i]), i});
  return pts;
}

void draw_series(std::ostringstream& os, const PlotSeries& s, const std::vector<PlacedPoint>& pts) {
  const std::string color = html_escape(s.color);
  const std::string key = s.key.empty() ? "" : " data-stage=\"" + html_escape(s.key) + "\"";
  if (s.line && pts.size() >= 2) {
    os << "<polyline class=\"series\" fill=\"none\" stroke=\"" << color << "\"" << key
       << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
    for (const auto& p : pts) os << px(p.x) << "," << px(p.y) << " ";
    os << "\"/>";
  }
  if (!s.markers) return;
  for (const auto& p : pts) {
    os << "<circle class=\"pt\" cx=\"" << px(p.x) << "\" cy=\"" << px(p.y) << "\" r=\"" << (s.line ? 3.5 : 5.5)
       << "\" fill=\"" << (s.hollow ? "#fff" : color) << "\" stroke=\"" << color << "\"" << key << ">";
    if (p.index < s.tips.size()) os << "<title>" << html_escape(s.tips[p.index]) << "</title>";
    os << "</circle>";
  }
}

// Writes the point labels where they overlap the least with the markers, the lines, the labels
// placed before and what lies outside `area` (the plot and the margin right of it): right of the
// point, else left, above, below.
void draw_point_labels(std::ostringstream& os, const std::vector<PlotSeries>& series,
                       const std::vector<std::vector<PlacedPoint>>& points, const Box& area) {
  std::vector<Box> taken;
  for (size_t k = 0; k < series.size(); ++k) {
    for (const auto& p : points[k]) taken.push_back({p.x - 6, p.y - 6, p.x + 6, p.y + 6});
    if (!series[k].line) continue;
    // Lines are obstacles too: small boxes every few pixels along each segment.
    for (size_t i = 1; i < points[k].size(); ++i) {
      const PlacedPoint &a = points[k][i - 1], &b = points[k][i];
      const int steps = static_cast<int>(std::hypot(b.x - a.x, b.y - a.y) / 4) + 1;
      for (int j = 0; j <= steps; ++j) {
        const double x = a.x + (b.x - a.x) * j / steps, y = a.y + (b.y - a.y) * j / steps;
        taken.push_back({x - 1.5, y - 1.5, x + 1.5, y + 1.5});
      }
    }
  }
  for (size_t k = 0; k < series.size(); ++k)
    for (const auto& p : points[k]) {
      if (p.index >= series[k].labels.size() || series[k].labels[p.index].empty()) continue;
      const std::string& text = series[k].labels[p.index];
      const double w = text_width(text, 11), h = 12;
      struct Spot { double x, y; const char* anchor; double bx; };
      const Spot spots[] = {{p.x + 9, p.y + 4, "start", p.x + 9},       {p.x - 9, p.y + 4, "end", p.x - 9 - w},
                            {p.x, p.y - 10, "middle", p.x - w / 2},     {p.x, p.y + 18, "middle", p.x - w / 2},
                            {p.x + 7, p.y - 9, "start", p.x + 7},       {p.x - 7, p.y - 9, "end", p.x - 7 - w},
                            {p.x + 7, p.y + 17, "start", p.x + 7},      {p.x - 7, p.y + 17, "end", p.x - 7 - w}};
      double best = std::numeric_limits<double>::infinity();
      const Spot* chosen = &spots[0];
      for (const Spot& s : spots) {
        const Box b{s.bx, s.y - h + 2, s.bx + w, s.y + 2};
        double cost = w * h - b.overlap(area);  // the part outside `area`
        for (const Box& t : taken) cost += b.overlap(t);
        if (cost < best - 1e-9) best = cost, chosen = &s;
      }
      taken.push_back({chosen->bx, chosen->y - h + 2, chosen->bx + w, chosen->y + 2});
      os << "<text class=\"pl\" x=\"" << px(chosen->x) << "\" y=\"" << px(chosen->y) << "\" text-anchor=\""
         << chosen->anchor << "\">" << html_escape(text) << "</text>";
    }
}

std::vector<LegendItem> legend_of(const std::vector<PlotSeries>& series) {
  std::vector<LegendItem> items;
  for (const auto& s : series)
    if (!s.name.empty()) items.push_back({s.name, s.color, s.key, s.line, !s.line && s.markers, s.dashed});
  return items;
}

}  // namespace

std::string xy_chart(const ChartFrame& frame, const PlotAxis& xa, const PlotAxis& ya,
                     const std::vector<PlotSeries>& series) {
  const double w = frame.width, h = frame.height;
  std::vector<LegendItem> legend = legend_of(series);
  const double top = kTitleHeight + place_legend(legend, kMarginLeft, w - kMarginRight, kTitleHeight + 6) + 10;
  Scale sx{0, 1, xa.log, kMarginLeft, w - kMarginRight}, sy{0, 1, ya.log, h - 48, top};
  std::vector<double> xs, ys;
  for (const auto& s : series) {
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
  }
  // Labelled points need room for their labels inside the frame.
  const bool labelled = std::any_of(series.begin(), series.end(), [](const PlotSeries& s) { return !s.labels.empty(); });
  fit_range(sx, xs, xa, labelled ? 0.1 : 0.05);
  fit_range(sy, ys, ya, labelled ? 0.1 : 0.05);
  std::ostringstream os;
  open_svg(os, frame);
  draw_legend(os, legend);
  draw_y_axis(os, sy, ya, sx.p0, sx.p1);
  draw_x_axis(os, sx, xa, sy.p0, sy.p1, h);
  std::vector<std::vector<PlacedPoint>> points;
  for (const auto& s : series) points.push_back(placed_points(s, sx, sy));
  for (size_t k = 0; k < series.size(); ++k) draw_series(os, series[k], points[k]);
  draw_point_labels(os, series, points, Box{sx.p0, sy.p1 - 6, w - 6, sy.p0});
  os << "</svg>";
  return os.str();
}

namespace {

// A category label short enough to sit under its bars.
std::string short_label(const std::string& s) {
  constexpr size_t kMax = 22;
  return s.size() <= kMax ? s : s.substr(0, kMax - 1) + "\xE2\x80\xA6";  // "…"
}

void draw_bars(std::ostringstream& os, const std::vector<std::string>& categories, const PlotAxis& ya,
               const std::vector<BarSeries>& series, const Scale& sy, double x0, double group) {
  const double m = static_cast<double>(series.size());
  const double bw = std::min(group * 0.8 / m, 42.0), base = sy(std::max(sy.lo, 0.0));
  for (size_t c = 0; c < categories.size(); ++c)
    for (size_t k = 0; k < series.size(); ++k) {
      const double x = x0 + group * (c + 0.5) - bw * m / 2 + bw * k;
      if (c >= series[k].values.size() || !series[k].values[c] || !std::isfinite(*series[k].values[c])) {
        if (bw >= 26)
          os << "<text class=\"bv\" x=\"" << px(x + bw / 2) << "\" y=\"" << px(base - 4) << "\" text-anchor=\"middle\">n/a"
             << "<title>" << html_escape(categories[c]) << ": no " << html_escape(series[k].name) << "</title></text>";
        continue;
      }
      const double v = *series[k].values[c];
      const double y = sy(std::clamp(v, sy.lo, sy.hi));
      const double top = std::min(y, base), height = std::max(std::abs(y - base), 0.8);
      os << "<rect class=\"bar\" x=\"" << px(x + 0.5) << "\" y=\"" << px(top) << "\" width=\""
         << px(std::max(bw - 1, 1.0)) << "\" height=\"" << px(height) << "\" fill=\"" << html_escape(series[k].color)
         << "\"><title>" << html_escape(categories[c]) << (series[k].name.empty() ? "" : " \xC2\xB7 ")
         << html_escape(series[k].name) << ": " << format_number(v, 1) << html_escape(ya.unit) << "</title></rect>";
      if (bw >= 26)
        os << "<text class=\"bv\" x=\"" << px(x + bw / 2) << "\" y=\"" << px(top - 4) << "\" text-anchor=\"middle\">"
           << format_number(v, 1) << "</text>";
    }
}

void draw_categories(std::ostringstream& os, const std::vector<std::string>& categories, double x0, double group,
                     double base, bool slanted) {
  const size_t every = static_cast<size_t>(std::ceil((slanted ? 14.0 : 0.0) / group));
  for (size_t c = 0; c < categories.size(); c += std::max<size_t>(every, 1)) {
    const double x = x0 + group * (c + 0.5);
    os << "<text class=\"tick\"";
    if (slanted)
      os << " text-anchor=\"end\" transform=\"translate(" << px(x + 3) << " " << px(base + 12) << ") rotate(-40)\"";
    else
      os << " text-anchor=\"middle\" x=\"" << px(x) << "\" y=\"" << px(base + 17) << "\"";
    os << ">" << html_escape(short_label(categories[c])) << "<title>" << html_escape(categories[c])
       << "</title></text>";
  }
}

}  // namespace

std::string bar_chart(const ChartFrame& fixed_frame, const std::vector<std::string>& categories, const PlotAxis& ya,
                      const std::vector<BarSeries>& series) {
  ChartFrame frame = fixed_frame;
  const double w = frame.width;
  std::vector<LegendItem> legend;
  for (const auto& s : series)
    if (!s.name.empty()) legend.push_back({s.name, s.color, "", false, true, false});
  const double top = kTitleHeight + place_legend(legend, kMarginLeft, w - kMarginRight, kTitleHeight + 6) + 12;
  const double n = static_cast<double>(std::max<size_t>(categories.size(), 1));
  double widest = 0;
  for (const auto& c : categories) widest = std::max(widest, text_width(short_label(c)));
  const bool slanted = widest > (w - kMarginLeft - kMarginRight) / n - 6;
  // A slanted label reaches left of its bars by about cos(40 deg) of its width: room for the first.
  const double left = slanted ? std::max(kMarginLeft, widest * 0.77 - (w - kMarginLeft - kMarginRight) / (2 * n) + 8) : kMarginLeft;
  const double group = (w - left - kMarginRight) / n;
  // Slanted labels get room of their own below the plot: the chart grows instead of the bars shrinking.
  if (slanted) frame.height += static_cast<int>(widest * 0.66) - 6;
  const double bottom = frame.height - (slanted ? 24 + widest * 0.66 : 30);
  Scale sy{0, 1, false, bottom, top};
  std::vector<double> values;
  for (const auto& s : series)
    for (const auto& v : s.values)
      if (v) values.push_back(*v);
  // Bars grow from 0: the axis reaches 0 unless the caller fixed its ends.
  PlotAxis axis = ya;
  if (!axis.min && std::all_of(values.begin(), values.end(), [](double v) { return v >= 0; })) axis.min = 0.0;
  if (!axis.max && !values.empty() && std::all_of(values.begin(), values.end(), [](double v) { return v <= 0; }))
    axis.max = 0.0;
  fit_range(sy, values, axis);
  std::ostringstream os;
  open_svg(os, frame);
  draw_legend(os, legend);
  draw_y_axis(os, sy, ya, left, w - kMarginRight);
  const double base = sy(std::max(sy.lo, 0.0));
  os << "<line class=\"axis\" x1=\"" << px(left) << "\" y1=\"" << px(base) << "\" x2=\"" << px(w - kMarginRight)
     << "\" y2=\"" << px(base) << "\"/>";
  draw_bars(os, categories, ya, series, sy, left, group);
  draw_categories(os, categories, left, group, bottom, slanted);
  os << "</svg>";
  return os.str();
}

}  // namespace pare::pipeline
