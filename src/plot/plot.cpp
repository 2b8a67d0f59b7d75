// PNG line charts with cairo; see plot.hpp.
#include "plot/plot.hpp"

#include "base/error.hpp"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

namespace sao::plot {

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) throw Error("nice_ticks: the range must be finite");
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) return {lo};
  target = std::max(target, 2);
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    step = factor * magnitude;
    if (step >= raw) break;
  }
  // Multiples of the step (index times step, so errors do not accumulate).
  std::vector<double> ticks;
  const auto first = static_cast<int64_t>(std::ceil(lo / step - 1e-9));
  for (int64_t index = first; index * step <= hi + step * 1e-9; ++index) ticks.push_back(index * step);
  return ticks;
}

namespace {

// Colour-blind-safe palette (Okabe-Ito), one colour per series.
constexpr double kPalette[][3] = {{0.00, 0.45, 0.70}, {0.90, 0.62, 0.00}, {0.00, 0.62, 0.45}, {0.80, 0.40, 0.00},
                                  {0.35, 0.70, 0.90}, {0.80, 0.60, 0.70}, {0.94, 0.89, 0.26}, {0.0, 0.0, 0.0}};

std::string tick_label(double value, double step) {
  char text[32];
  if (std::fabs(value) >= 1e5 || (std::fabs(value) > 0 && std::fabs(value) < 1e-3)) {
    std::snprintf(text, sizeof(text), "%.1e", value);
  } else {
    const int decimals = step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
    std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  }
  return text;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

void draw_panel(cairo_t* cr, const PlotPanel& panel, double x0, double y0, double width, double height) {
  const double left = x0 + 64, right = x0 + width - 16, top = y0 + 30, bottom = y0 + height - 74;
  cairo_set_source_rgb(cr, 0.1, 0.12, 0.18);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  cairo_set_font_size(cr, 14);
  cairo_move_to(cr, left, y0 + 20);
  cairo_show_text(cr, panel.title.c_str());
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 11);

  Range xs, ys;
  for (const auto& series : panel.series) {
    for (size_t i = 0; i < series.x.size(); ++i) {
      if (!std::isfinite(series.y[i])) continue;
      xs.add(series.x[i]);
      ys.add(series.y[i]);
      if (!series.band_low.empty()) {
        ys.add(series.band_low[i]);
        ys.add(series.band_high[i]);
      }
    }
  }
  if (xs.empty()) {
    cairo_move_to(cr, left, (top + bottom) / 2);
    cairo_show_text(cr, "no data");
    return;
  }
  if (xs.hi == xs.lo) xs.hi = xs.lo + 1;
  if (ys.hi == ys.lo) {
    ys.hi += std::max(1e-3, std::fabs(ys.hi) * 0.1);
    ys.lo -= std::max(1e-3, std::fabs(ys.lo) * 0.1);
  }
  // Axes end on a tick, so every drawn value lies between two labels.
  auto covering_ticks = [](double lo, double hi, int target) {
    auto ticks = nice_ticks(lo, hi, target);
    const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0;
    if (ticks.front() > lo) ticks.insert(ticks.begin(), ticks.front() - step);
    if (ticks.back() < hi) ticks.push_back(ticks.back() + step);
    return ticks;
  };
  const auto x_ticks = covering_ticks(xs.lo, xs.hi, 6);
  const auto y_ticks = covering_ticks(ys.lo, ys.hi, 5);
  xs.lo = std::min(xs.lo, x_ticks.front());
  xs.hi = std::max(xs.hi, x_ticks.back());
  ys.lo = std::min(ys.lo, y_ticks.front());
  ys.hi = std::max(ys.hi, y_ticks.back());
  auto X = [&](double x) { return left + (x - xs.lo) / (xs.hi - xs.lo) * (right - left); };
  auto Y = [&](double y) { return bottom - (y - ys.lo) / (ys.hi - ys.lo) * (bottom - top); };

  cairo_set_line_width(cr, 1);
  const double x_step = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
  const double y_step = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1;
  cairo_text_extents_t extents;
  for (double tick : y_ticks) {
    cairo_set_source_rgb(cr, 0.89, 0.90, 0.93);
    cairo_move_to(cr, left, Y(tick));
    cairo_line_to(cr, right, Y(tick));
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.35, 0.38, 0.45);
    const auto label = tick_label(tick, y_step);
    cairo_text_extents(cr, label.c_str(), &extents);
    cairo_move_to(cr, left - 6 - extents.width, Y(tick) + 4);
    cairo_show_text(cr, label.c_str());
  }
  for (double tick : x_ticks) {
    cairo_set_source_rgb(cr, 0.35, 0.38, 0.45);
    const auto label = tick_label(tick, x_step);
    cairo_text_extents(cr, label.c_str(), &extents);
    cairo_move_to(cr, X(tick) - extents.width / 2, bottom + 15);
    cairo_show_text(cr, label.c_str());
  }
  cairo_set_source_rgb(cr, 0.35, 0.38, 0.45);
  cairo_rectangle(cr, left, top, right - left, bottom - top);
  cairo_stroke(cr);
  cairo_text_extents(cr, panel.x_label.c_str(), &extents);
  cairo_move_to(cr, (left + right) / 2 - extents.width / 2, bottom + 30);
  cairo_show_text(cr, panel.x_label.c_str());

  double legend_x = left;
  double legend_y = bottom + 46;
  for (size_t s = 0; s < panel.series.size(); ++s) {
    const auto& series = panel.series[s];
    const auto* colour = kPalette[s % (sizeof(kPalette) / sizeof(kPalette[0]))];
    if (!series.band_low.empty()) {
      // The band as one polygon: along the top edge, back along the bottom.
      cairo_set_source_rgba(cr, colour[0], colour[1], colour[2], 0.18);
      bool started = false;
      for (size_t i = 0; i < series.x.size(); ++i) {
        if (!std::isfinite(series.band_high[i])) continue;
        if (started) {
          cairo_line_to(cr, X(series.x[i]), Y(series.band_high[i]));
        } else {
          cairo_move_to(cr, X(series.x[i]), Y(series.band_high[i]));
          started = true;
        }
      }
      for (size_t i = series.x.size(); i-- > 0;) {
        if (std::isfinite(series.band_low[i])) cairo_line_to(cr, X(series.x[i]), Y(series.band_low[i]));
      }
      cairo_close_path(cr);
      cairo_fill(cr);
    }
    cairo_set_source_rgb(cr, colour[0], colour[1], colour[2]);
    cairo_set_line_width(cr, 2);
    bool drawing = false;
    size_t finite_points = 0;
    for (size_t i = 0; i < series.x.size(); ++i) {
      if (!std::isfinite(series.y[i]) || !std::isfinite(series.x[i])) {
        drawing = false;
        continue;
      }
      ++finite_points;
      if (drawing) {
        cairo_line_to(cr, X(series.x[i]), Y(series.y[i]));
      } else {
        cairo_move_to(cr, X(series.x[i]), Y(series.y[i]));
        drawing = true;
      }
    }
    cairo_stroke(cr);
    if (finite_points <= 20) {  // few points (evaluations): mark each
      for (size_t i = 0; i < series.x.size(); ++i) {
        if (!std::isfinite(series.y[i])) continue;
        cairo_arc(cr, X(series.x[i]), Y(series.y[i]), 3, 0, 2 * M_PI);
        cairo_fill(cr);
      }
    }
    // Legend entries flow left to right and wrap onto a second row.
    cairo_text_extents(cr, series.label.c_str(), &extents);
    if (legend_x > left && legend_x + 18 + extents.x_advance > right) {
      legend_x = left;
      legend_y += 16;
    }
    cairo_set_source_rgb(cr, colour[0], colour[1], colour[2]);
    cairo_rectangle(cr, legend_x, legend_y - 6, 14, 4);
    cairo_fill(cr);
    cairo_set_source_rgb(cr, 0.1, 0.12, 0.18);
    cairo_move_to(cr, legend_x + 18, legend_y);
    cairo_show_text(cr, series.label.c_str());
    legend_x += 30 + extents.x_advance;
  }
}

}  // namespace

void write_plot_png(const std::string& path, const std::vector<PlotPanel>& panels, const PlotLayout& layout) {
  if (panels.empty()) throw Error("plot " + path + ": no panels");
  for (const auto& panel : panels) {
    for (const auto& series : panel.series) {
      const bool band_ok = (series.band_low.empty() && series.band_high.empty()) ||
                           (series.band_low.size() == series.x.size() && series.band_high.size() == series.x.size());
      if (!band_ok) {
        throw Error("plot " + path + ": panel '" + panel.title + "' series '" + series.label +
                    "' has a band whose length differs from its " + std::to_string(series.x.size()) + " x values");
      }
      if (series.x.size() != series.y.size()) {
        throw Error("plot " + path + ": panel '" + panel.title + "' series '" + series.label + "' has " +
                    std::to_string(series.x.size()) + " x values and " + std::to_string(series.y.size()) + " y values");
      }
    }
  }
  const int columns = std::max(1, std::min<int>(layout.columns, static_cast<int>(panels.size())));
  const int rows = static_cast<int>((panels.size() + columns - 1) / columns);
  const int width = columns * layout.panel_width;
  const int height = rows * layout.panel_height;
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height), cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> context(cairo_create(surface.get()), cairo_destroy);
  cairo_t* cr = context.get();
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  for (size_t i = 0; i < panels.size(); ++i) {
    const int column = static_cast<int>(i) % columns;
    const int row = static_cast<int>(i) / columns;
    draw_panel(cr, panels[i], column * layout.panel_width, row * layout.panel_height, layout.panel_width,
               layout.panel_height);
  }
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  cairo_surface_flush(surface.get());
  const auto status = cairo_surface_write_to_png(surface.get(), path.c_str());
  if (status != CAIRO_STATUS_SUCCESS) {
    throw Error("plot " + path + ": cannot write the PNG (" + cairo_status_to_string(status) + ")");
  }
}

}  // namespace sao::plot
