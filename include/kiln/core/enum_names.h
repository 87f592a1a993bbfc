// kiln/core/enum_names.h: an enum's names and its parser from one table. Each enum that is printed or read
// back (a disposition, a policy, a plan's source) keeps one array of {value, name} rows; its name and parse
// functions are these two templates over that array, so the two directions never drift apart.
//
//   inline constexpr EnumName<Objective> kObjectiveNames[] = {{Objective::kTime, "time"}, ...};
//   const char* objective_name(Objective o) { return enum_name(kObjectiveNames, o); }
//   StatusOr<Objective> parse_objective(const std::string& s) { return parse_enum(kObjectiveNames, s, "objective"); }
#pragma once

#include <cstddef>
#include <string>

#include "kiln/core/status.h"

namespace kiln {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The row's name for `value`; `unknown` for a value the table lacks (a cast from a bad integer).
template <typename E, size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E value, const char* unknown = "?") {
  for (const auto& row : table)
    if (row.value == value) return row.name;
  return unknown;
}

// The value whose name is exactly `text`; InvalidArgument "unknown <what> 'text' (expected a, b or c)".
template <typename E, size_t N>
StatusOr<E> parse_enum(const EnumName<E> (&table)[N], const std::string& text, const std::string& what) {
  for (const auto& row : table)
    if (text == row.name) return row.value;
  std::string expected;
  for (size_t i = 0; i < N; ++i) expected += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  return invalid_argument("unknown " + what + " '" + text + "' (expected " + expected + ")");
}

}  // namespace kiln
