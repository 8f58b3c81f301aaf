// An SVG heatmap of an attention pattern (queries as rows, keys as columns, weight as shade), and
// an HTML page that shows several: small, dependency-free, readable by any browser or XML parser.
// Each cell is a <rect> carrying its value (data-row, data-col, data-value), a <title> shown on
// hover, and the value printed in the cell.
#pragma once

#include <cerrno>
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

/// A heatmap of weights (rows, cols) in [0, 1], with a label per row (query) and column (key).
/// Masked entries (exact 0 above the diagonal) show white. Values printed with 2 decimals.
template <class Scalar>
std::string svg_heatmap(const Matrix<Scalar>& weights, const std::vector<std::string>& row_labels,
                        const std::vector<std::string>& col_labels, const std::string& title, int cell = 34) {
  if (static_cast<Index>(row_labels.size()) != weights.rows() || static_cast<Index>(col_labels.size()) != weights.cols())
    detail::invalid("svg_heatmap", "labels for ", row_labels.size(), " rows and ", col_labels.size(),
                    " columns, the weights are ", weights.rows(), "x", weights.cols());
  if (cell <= 0) detail::invalid("svg_heatmap", "cell size must be > 0, got ", cell);
  const int left = 90, top = 110, pad = 10;
  const int width = left + cell * int(weights.cols()) + pad, height = top + cell * int(weights.rows()) + pad;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<title>" << xml_escape(title) << "</title>\n";
  svg << "<text x=\"" << pad << "\" y=\"18\" font-size=\"14\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
  svg << "<text x=\"" << pad << "\" y=\"" << top - 6 << "\" fill=\"#555\">query \\ key</text>\n";
  for (Index j = 0; j < weights.cols(); ++j) {
    const int x = left + cell * int(j) + cell / 2;
    svg << "<text class=\"key\" x=\"" << x << "\" y=\"" << top - 8 << "\" transform=\"rotate(-60 " << x << ' '
        << top - 8 << ")\">" << xml_escape(col_labels[static_cast<std::size_t>(j)]) << "</text>\n";
  }
  char value[32];
  for (Index i = 0; i < weights.rows(); ++i) {
    const int y = top + cell * int(i);
    svg << "<text class=\"query\" x=\"" << left - 6 << "\" y=\"" << y + cell / 2 + 4 << "\" text-anchor=\"end\">"
        << xml_escape(row_labels[static_cast<std::size_t>(i)]) << "</text>\n";
    for (Index j = 0; j < weights.cols(); ++j) {
      const double w = static_cast<double>(weights(i, j));
      const double shade = w < 0 ? 0 : (w > 1 ? 1 : w);
      const int level = static_cast<int>(255 - 200 * shade + 0.5);  // white (0) to deep blue (1)
      const int x = left + cell * int(j);
      std::snprintf(value, sizeof value, "%.4f", w);
      svg << "<rect class=\"cell\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell << "\" height=\"" << cell
          << "\" fill=\"rgb(" << level << ',' << level << ",255)\" stroke=\"#ddd\" data-row=\"" << i
          << "\" data-col=\"" << j << "\" data-value=\"" << value << "\"><title>"
          << xml_escape(row_labels[static_cast<std::size_t>(i)]) << " -> "
          << xml_escape(col_labels[static_cast<std::size_t>(j)]) << ": " << value << "</title></rect>\n";
      if (w > 0) {
        std::snprintf(value, sizeof value, "%.2f", w);
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
