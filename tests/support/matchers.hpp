// Matrix matchers for the tests: print both matrices and the worst element on failure.
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include <Eigen/Core>

#include "support/catch.hpp"

namespace headwise_test {

/// Relative closeness of whole matrices: every |actual - expected| <= rel * max|expected|
/// (the tolerance scales with the matrix's largest entry, so tiny entries next to large ones do
/// not demand more digits than the type holds). Shapes must agree; NaN never matches.
class MatrixNearMatcher : public MatcherBase<Eigen::MatrixXd> {
 public:
  /// floor: the scale never goes below it (for quantities near 0 whose natural unit is 1).
  MatrixNearMatcher(Eigen::MatrixXd expected, double rel, double floor = 0)
      : expected_(std::move(expected)), rel_(rel), floor_(floor) {}

  bool match(const Eigen::MatrixXd& actual) const override {
    std::ostringstream why;
    if (actual.rows() != expected_.rows() || actual.cols() != expected_.cols()) {
      why << "shape " << actual.rows() << "x" << actual.cols() << " differs from expected "
          << expected_.rows() << "x" << expected_.cols();
      detail_ = why.str();
      return false;
    }
    if (actual.size() == 0) return true;
    const double scale = std::max(expected_.cwiseAbs().maxCoeff(), floor_);
    const double allowed = rel_ * (scale > 0 ? scale : 1.0);
    double worst = -1;
    Eigen::Index wi = 0, wj = 0;
    for (Eigen::Index i = 0; i < actual.rows(); ++i)
      for (Eigen::Index j = 0; j < actual.cols(); ++j) {
        const double e = std::abs(actual(i, j) - expected_(i, j));
        const double err = std::isnan(e) ? INFINITY : e;
        if (err > worst) worst = err, wi = i, wj = j;
      }
    why.precision(17);
    why << "worst element (" << wi << ", " << wj << "): " << actual(wi, wj) << " vs expected "
        << expected_(wi, wj) << ", |diff| = " << worst << " > allowed " << allowed << " ("
        << rel_ << " x max|expected| " << scale << ")";
    detail_ = why.str();
    return worst <= allowed;
  }

  std::string describe() const override {
    std::ostringstream out;
    out.precision(10);
    if (expected_.size() <= 64) out << "\nis near (rel " << rel_ << ")\n" << expected_ << "\n";
    else out << " is near an expected " << expected_.rows() << "x" << expected_.cols() << " matrix (rel " << rel_ << ")";
    out << "\n" << detail_;
    return out.str();
  }

 private:
  Eigen::MatrixXd expected_;
  double rel_, floor_;
  mutable std::string detail_;
};

/// Every entry of the two matrices equal, bit for bit (for exact identities).
class MatrixEqualMatcher : public MatcherBase<Eigen::MatrixXd> {
 public:
  explicit MatrixEqualMatcher(Eigen::MatrixXd expected) : expected_(std::move(expected)) {}
  bool match(const Eigen::MatrixXd& actual) const override {
    return actual.rows() == expected_.rows() && actual.cols() == expected_.cols() &&
           (actual.array() == expected_.array()).all();
  }
  std::string describe() const override {
    std::ostringstream out;
    out.precision(17);
    out << "\nequals exactly\n" << expected_;
    return out.str();
  }

 private:
  Eigen::MatrixXd expected_;
};

/// Converts any Eigen matrix (float or double, any storage order) to what the matchers compare.
template <class Derived>
Eigen::MatrixXd as_double(const Eigen::MatrixBase<Derived>& m) {
  return m.template cast<double>();
}

template <class Derived>
MatrixNearMatcher IsNear(const Eigen::MatrixBase<Derived>& expected, double rel, double floor = 0) {
  return MatrixNearMatcher(as_double(expected), rel, floor);
}
template <class Derived>
MatrixEqualMatcher IsExactly(const Eigen::MatrixBase<Derived>& expected) {
  return MatrixEqualMatcher(as_double(expected));
}

/// The tolerance of a float-type result against a float64 reference.
template <class Scalar>
constexpr double tolerance() {
  return sizeof(Scalar) == sizeof(float) ? 1e-5 : 1e-12;
}

}  // namespace headwise_test
