// The SVG heatmap, read back with a real XML parser (libxml2): every cell is there with its value.
#include <limits>
#include <string>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "headwise/interpret/svg_heatmap.hpp"
#include "support/catch.hpp"

using namespace headwise;

namespace {

std::string attribute(xmlNode* node, const char* name) {
  xmlChar* value = xmlGetProp(node, reinterpret_cast<const xmlChar*>(name));
  std::string out = value ? reinterpret_cast<const char*>(value) : "";
  xmlFree(value);
  return out;
}

void collect(xmlNode* node, const char* element, std::vector<xmlNode*>& out) {
  for (; node; node = node->next) {
    if (node->type == XML_ELEMENT_NODE && std::string(reinterpret_cast<const char*>(node->name)) == element)
      out.push_back(node);
    collect(node->children, element, out);
  }
}

}  // namespace

TEST_CASE("the SVG heatmap parses as XML and holds every cell and its value", "[interpret][svg]") {
  Matrix<double> a(3, 3);
  a << 1, 0, 0, 0.19557, 0.80443, 0, 0.14003, 0.28400, 0.57598;
  const std::string svg =
      interpret::svg_heatmap(a, {"the", "cat", "s<a>t & \"co\""}, {"the", "cat", "s<a>t & \"co\""}, "head 0.0");
  xmlDoc* doc = xmlReadMemory(svg.data(), static_cast<int>(svg.size()), "heatmap.svg", nullptr, XML_PARSE_NONET);
  REQUIRE(doc != nullptr);
  xmlNode* root = xmlDocGetRootElement(doc);
  CHECK(std::string(reinterpret_cast<const char*>(root->name)) == "svg");
  std::vector<xmlNode*> rects, texts;
  collect(root, "rect", rects);
  collect(root, "text", texts);
  REQUIRE(rects.size() == 9);
  for (xmlNode* rect : rects) {
    const int i = std::stoi(attribute(rect, "data-row")), j = std::stoi(attribute(rect, "data-col"));
    CAPTURE(i, j);
    CHECK_THAT(std::stod(attribute(rect, "data-value")), WithinAbs(a(i, j), 5e-5));
    CHECK_THAT(attribute(rect, "fill"), Catch::Matchers::StartsWith("rgb("));
  }
  // The escaped label comes back as written, and the values are printed in the cells.
  bool label = false;
  int values = 0;
  for (xmlNode* text : texts) {
    xmlChar* content = xmlNodeGetContent(text);
    const std::string s = reinterpret_cast<const char*>(content);
    xmlFree(content);
    label = label || s == "s<a>t & \"co\"";
    if (attribute(text, "class") == "value") ++values;
  }
  CHECK(label);
  CHECK(values == 6);  // the six unmasked weights
  xmlFreeDoc(doc);

  const std::string page = interpret::html_page("toys", {{"head 0.0", svg}});
  CHECK_THAT(page, Catch::Matchers::Contains("<figcaption>head 0.0</figcaption>"));
  REQUIRE_THROWS_WITH(interpret::svg_heatmap(a, {"a"}, {"a", "b", "c"}, "t"),
                      "headwise: svg_heatmap: labels for 1 rows and 3 columns, the weights are 3x3");
}

TEST_CASE("the diverging scale: red below zero, white at zero, blue above, symmetric, non-finite values refused", "[interpret][svg]") {
  Matrix<double> e(1, 4);
  e << -2, 0, 1, 2;
  interpret::Shading diverging;
  diverging.scale = interpret::Shading::Scale::diverging;
  const std::string svg = interpret::svg_heatmap(e, {"layer 0"}, {"a", "b", "c", "d"}, "effects", 30, diverging);
  CHECK_THAT(svg, Catch::Contains("data-col=\"0\" data-value=\"-2\"") && Catch::Contains("fill=\"rgb(255,55,55)\""));   // -limit: deep red
  CHECK_THAT(svg, Catch::Contains("fill=\"rgb(255,255,255)\""));                                                         // 0: white
  CHECK_THAT(svg, Catch::Contains("fill=\"rgb(155,155,255)\"") && Catch::Contains("fill=\"rgb(55,55,255)\""));          // +limit/2, +limit
  CHECK_THAT(svg, Catch::Contains("full colour at |value| 2"));
  diverging.limit = 4;  // a given limit: 2 is half way
  CHECK_THAT(interpret::svg_heatmap(e, {"layer 0"}, {"a", "b", "c", "d"}, "effects", 30, diverging),
             Catch::Contains("fill=\"rgb(255,155,155)\""));
  e(0, 2) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(interpret::svg_heatmap(e, {"layer 0"}, {"a", "b", "c", "d"}, "effects", 30, diverging),
                    Catch::Contains("the value at row 0, column 2 is nan (not finite)"));
  CHECK_THROWS_WITH(interpret::svg_heatmap(e, {"layer 0"}, {"a", "b", "c", "d"}, "effects"), Catch::Contains("(not finite)"));
  diverging.limit = -1;
  CHECK_THROWS_WITH(interpret::svg_heatmap(Matrix<double>(Matrix<double>::Zero(1, 1)), {"a"}, {"b"}, "t", 30, diverging),
                    Catch::Contains("the shading's limit is -1"));
}
