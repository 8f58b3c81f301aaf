// Internal: building the messages of headwise's exceptions ("headwise: <where>: <what>").
#pragma once

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

namespace headwise::detail {

template <class... Parts>
std::string message(const char* where, Parts&&... parts) {
  std::ostringstream out;
  out << "headwise: " << where << ": ";
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

/// Throws std::invalid_argument("headwise: <where>: <parts...>").
template <class... Parts>
[[noreturn]] void invalid(const char* where, Parts&&... parts) {
  throw std::invalid_argument(message(where, std::forward<Parts>(parts)...));
}

/// "float" or "double": for messages about values that fit one and not the other.
template <class Scalar>
const char* scalar_name() {
  if constexpr (std::is_same_v<Scalar, float>) return "float";
  else if constexpr (std::is_same_v<Scalar, double>) return "double";
  else return "the scalar type";
}

/// True if x and 1 / x are both finite and nonzero once converted to Scalar: a divisor or a cap
/// finite as a double may not be as a float (1e39, or 1e-39 whose inverse overflows).
template <class Scalar>
bool finite_with_inverse(double x) {
  const auto s = static_cast<Scalar>(x);
  return std::isfinite(s) && s != Scalar(0) && std::isfinite(Scalar(1) / s) && Scalar(1) / s != Scalar(0);
}

/// True if every entry of row i of m is finite: x * 0 is 0 for finite x and NaN for inf or NaN,
/// so one vectorised sum tells (Eigen's allFinite is several times slower on strided blocks).
template <class Derived>
bool row_is_finite(const Derived& m, Eigen::Index i) {
  using Scalar = typename Derived::Scalar;
  return std::isfinite(static_cast<double>((m.row(i).array() * Scalar(0)).sum()));
}

/// True if every entry of m is finite (row_is_finite on each row).
template <class Derived>
bool all_finite(const Derived& m) {
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    if (!row_is_finite(m, i)) return false;
  return true;
}

/// Throws unless every entry of m is finite, naming the first bad entry.
template <class Derived>
void require_finite(const char* where, const char* name, const Derived& m) {
  if (all_finite(m)) return;
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      if (!std::isfinite(static_cast<double>(m(i, j))))
        invalid(where, name, " has a non-finite value (", m(i, j), ") at row ", i, ", column ", j);
}

}  // namespace headwise::detail
