// An SVG heatmap of an attention pattern (queries as rows, keys as columns, weight as shade) or of
// a signed quantity (patching effects, contributions: a diverging scale, red below zero, blue
// above), an HTML page that shows several, and write_file to save either: small, dependency-free,
// readable by any browser or XML parser. Each cell is a <rect> carrying its value (data-row,
// data-col, data-value) and a <title> shown on hover; a nonzero value is also printed in the cell.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise::interpret {

/// Writes `text` to the file at `path` (an SVG heatmap, an HTML page), replacing it; throws
/// std::runtime_error naming the path and the reason if the file cannot be written whole (its
/// folder does not exist, say), so that nothing claims to have written what it did not.
inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (out) out.close();
  if (!out) throw std::runtime_error("headwise: write_file: cannot write " + path + ": " + std::strerror(errno));
}

/// XML-escapes text for an attribute or an element.
inline std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

/// How a heatmap shades its values. `unit`: weights and scores in [0, 1], white (0) to blue (1),
/// clamped. `diverging`: signed values in [-limit, limit], red below zero, white at zero, blue
/// above (limit 0: the largest |value|, so that the scale is symmetric and zero stays white).
struct Shading {
  enum class Scale { unit, diverging };
  Scale scale = Scale::unit;
  double limit = 0.0;
};

/// A heatmap cell's fill for value w: its shade in [0, 1] towards blue (w >= 0) or red (w < 0, diverging).
inline std::string heatmap_cell_fill(double w, const Shading& shading, double limit, double* shade_out) {
  const bool diverging = shading.scale == Shading::Scale::diverging;
  const double t = diverging ? (limit > 0 ? std::abs(w) / limit : 0.0) : w;
  const double shade = t < 0 ? 0 : (t > 1 ? 1 : t);
  const int level = static_cast<int>(255 - 200 * shade + 0.5);
  *shade_out = shade;
  std::ostringstream fill;
  if (diverging && w < 0) fill << "rgb(255," << level << ',' << level << ')';
  else fill << "rgb(" << level << ',' << level << ",255)";
  return fill.str();
}

/// The |value| a heatmap's shading reaches full colour at (Shading::limit, or the largest |value|),
/// after checking the labels' counts against the weights and every value and the limit finite.
template <class Scalar>
double heatmap_limit(const Matrix<Scalar>& weights, std::size_t row_labels, std::size_t col_labels, const Shading& shading) {
  if (static_cast<Index>(row_labels) != weights.rows() || static_cast<Index>(col_labels) != weights.cols())
    detail::invalid("svg_heatmap", "labels for ", row_labels, " rows and ", col_labels, " columns, the weights are ", weights.rows(), "x",
                    weights.cols());
  if (!(shading.limit >= 0.0 && std::isfinite(shading.limit)))
    detail::invalid("svg_heatmap", "the shading's limit is ", shading.limit, " (0: the largest |value|, or a positive bound)");
  double largest = 0;
  for (Index i = 0; i < weights.rows(); ++i)
    for (Index j = 0; j < weights.cols(); ++j) {
      const double w = static_cast<double>(weights(i, j));
      if (!std::isfinite(w)) detail::invalid("svg_heatmap", "the value at row ", i, ", column ", j, " is ", w, " (not finite)");
      largest = std::max(largest, std::abs(w));
    }
  return shading.limit > 0 ? shading.limit : largest;
}

/// A heatmap of weights (rows, cols), with a label per row (query) and column (key), shaded as
/// `shading` says (default: weights in [0, 1]). Masked entries (exact 0 above the diagonal) show
/// white. Values printed with 2 decimals (3 significant digits on the diverging scale). A value
/// that is not finite is refused, naming its cell.
template <class Scalar>
std::string svg_heatmap(const Matrix<Scalar>& weights, const std::vector<std::string>& row_labels,
                        const std::vector<std::string>& col_labels, const std::string& title, int cell = 34,
                        const Shading& shading = {}) {
  if (cell <= 0) detail::invalid("svg_heatmap", "cell size must be > 0, got ", cell);
  const bool diverging = shading.scale == Shading::Scale::diverging;
  const double limit = heatmap_limit(weights, row_labels.size(), col_labels.size(), shading);
  const int left = 90, top = 110, pad = 10;
  const int width = left + cell * int(weights.cols()) + pad, height = top + cell * int(weights.rows()) + pad;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<title>" << xml_escape(title) << "</title>\n";
  svg << "<text x=\"" << pad << "\" y=\"18\" font-size=\"14\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
  svg << "<text x=\"" << pad << "\" y=\"" << top - 6 << "\" fill=\"#555\">query \\ key</text>\n";
  char value[32];
  if (diverging) {
    std::snprintf(value, sizeof value, "%.3g", limit);
    svg << "<text class=\"scale\" x=\"" << pad << "\" y=\"36\" fill=\"#555\">red: below 0, blue: above 0, full colour at |value| "
        << value << "</text>\n";
  }
  for (Index j = 0; j < weights.cols(); ++j) {
    const int x = left + cell * int(j) + cell / 2;
    svg << "<text class=\"key\" x=\"" << x << "\" y=\"" << top - 8 << "\" transform=\"rotate(-60 " << x << ' '
        << top - 8 << ")\">" << xml_escape(col_labels[static_cast<std::size_t>(j)]) << "</text>\n";
  }
  for (Index i = 0; i < weights.rows(); ++i) {
    const int y = top + cell * int(i);
    svg << "<text class=\"query\" x=\"" << left - 6 << "\" y=\"" << y + cell / 2 + 4 << "\" text-anchor=\"end\">"
        << xml_escape(row_labels[static_cast<std::size_t>(i)]) << "</text>\n";
    for (Index j = 0; j < weights.cols(); ++j) {
      const double w = static_cast<double>(weights(i, j));
      double shade = 0;
      const std::string fill = heatmap_cell_fill(w, shading, limit, &shade);
      const int x = left + cell * int(j);
      std::snprintf(value, sizeof value, diverging ? "%.6g" : "%.4f", w);
      svg << "<rect class=\"cell\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell << "\" height=\"" << cell
          << "\" fill=\"" << fill << "\" stroke=\"#ddd\" data-row=\"" << i
          << "\" data-col=\"" << j << "\" data-value=\"" << value << "\"><title>"
          << xml_escape(row_labels[static_cast<std::size_t>(i)]) << " -> "
          << xml_escape(col_labels[static_cast<std::size_t>(j)]) << ": " << value << "</title></rect>\n";
      if (w > 0 || (diverging && w != 0)) {
        std::snprintf(value, sizeof value, diverging ? "%.3g" : "%.2f", w);
        svg << "<text class=\"value\" x=\"" << x + cell / 2 << "\" y=\"" << y + cell / 2 + 4
            << "\" text-anchor=\"middle\" font-size=\"9\" fill=\"" << (shade > 0.6 ? "white" : "black") << "\">"
            << value << "</text>\n";
      }
    }
  }
  svg << "</svg>\n";
  return svg.str();
}

/// An HTML page showing the given (caption, svg) figures one after another.
inline std::string html_page(const std::string& title, const std::vector<std::pair<std::string, std::string>>& figures) {
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << xml_escape(title)
       << "</title></head>\n<body style=\"font-family: sans-serif\">\n<h1>" << xml_escape(title) << "</h1>\n";
  for (const auto& [caption, svg] : figures)
    html << "<figure>\n" << svg << "<figcaption>" << xml_escape(caption) << "</figcaption>\n</figure>\n";
  html << "</body></html>\n";
  return html.str();
}

}  // namespace headwise::interpret
