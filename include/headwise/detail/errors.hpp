// Internal: headwise's exceptions and the checks that throw them: messages built from type-erased
// parts ("headwise: <where>: <what>"; MessagePart, message_of), invalid() throwing
// std::invalid_argument, and the finiteness checks (row_is_finite, all_finite, require_finite,
// finite_with_inverse), with scalar_name for their messages.
#pragma once

#include <cmath>
#include <initializer_list>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <Eigen/Core>

namespace headwise::detail {

/// One part of an exception's message, held by value: text, an integer, a character or a
/// floating-point number. Messages are built from a list of these by one function (message_of),
/// not by a template per list of argument types: the ~350 checks of the headers cost a file that
/// includes them a list each, not an ostream instantiation each (bench/RESULTS.md, "Tuning constants").
class MessagePart {
 public:
  MessagePart(const char* text) : kind_(Kind::text), text_(text ? text : "(null)") {}
  MessagePart(const std::string& text) : kind_(Kind::text), text_(text.c_str()) {}
  MessagePart(char c) : kind_(Kind::character), signed_(c) {}
  MessagePart(bool b) : kind_(Kind::signed_integer), signed_(b) {}
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer> && std::is_signed_v<Integer>, int> = 0>
  MessagePart(Integer i) : kind_(Kind::signed_integer), signed_(i) {}
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer> && !std::is_signed_v<Integer>, int> = 0>
  MessagePart(Integer i) : kind_(Kind::unsigned_integer), unsigned_(i) {}
  MessagePart(double x) : kind_(Kind::number), number_(x) {}
  MessagePart(float x) : kind_(Kind::number), number_(x) {}

  void write(std::ostream& out) const {
    switch (kind_) {
      case Kind::text: out << text_; break;
      case Kind::character: out << static_cast<char>(signed_); break;
      case Kind::signed_integer: out << signed_; break;
      case Kind::unsigned_integer: out << unsigned_; break;
      case Kind::number: out << number_; break;
    }
  }

 private:
  enum class Kind { text, character, signed_integer, unsigned_integer, number };
  Kind kind_;
  const char* text_ = nullptr;
  long long signed_ = 0;
  unsigned long long unsigned_ = 0;
  double number_ = 0;
};

/// "headwise: <where>: <parts...>".
inline std::string message_of(const char* where, std::initializer_list<MessagePart> parts) {
  std::ostringstream out;
  out << "headwise: " << where << ": ";
  for (const MessagePart& part : parts) part.write(out);
  return out.str();
}

[[noreturn]] inline void invalid_of(const char* where, std::initializer_list<MessagePart> parts) {
  throw std::invalid_argument(message_of(where, parts));
}

/// Throws std::invalid_argument("headwise: <where>: <parts...>").
template <class... Parts>
[[noreturn]] void invalid(const char* where, const Parts&... parts) {
  invalid_of(where, {MessagePart(parts)...});
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
/// so one vectorised sum tells (Eigen's allFinite is slower on strided blocks: it does not vectorise them).
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
