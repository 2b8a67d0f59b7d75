// Line charts as PNG (cairo): panels of series laid out in a grid, for
// `sao plot` and the results report. Kept free of any run format: the
// caller turns metrics.jsonl into series.
#pragma once

#include <string>
#include <vector>

namespace sao::plot {

struct PlotSeries {
  std::string label;
  std::vector<double> x;
  std::vector<double> y;  // non-finite values are gaps
  // Optional shaded band (e.g. min..max over seeds): empty, or one value per x.
  std::vector<double> band_low;
  std::vector<double> band_high;
};

struct PlotPanel {
  std::string title;
  std::string x_label;
  std::vector<PlotSeries> series;
};

struct PlotLayout {
  int columns = 2;
  int panel_width = 560;
  int panel_height = 340;
};

// Ticks at 1, 2 or 5 times a power of ten covering [lo, hi], about `target`
// of them; lo == hi gives one tick. Throws sao::Error for non-finite input.
std::vector<double> nice_ticks(double lo, double hi, int target);

// Writes the panels into one PNG at `path` (parent directories created).
// Throws sao::Error naming the path when a panel has a series whose x, y or
// band lengths differ or the file cannot be written.
void write_plot_png(const std::string& path, const std::vector<PlotPanel>& panels, const PlotLayout& layout);

}  // namespace sao::plot
