// Numbers read from JSON files that may come from anywhere (checkpoints, teacher caches). nlohmann's
// get<int64_t>() converts a float such as 5e58 to the integer type, which is undefined behaviour
// outside its range (found by tests/fuzz's teacher_cache_fuzz under UBSan): read integers with
// json_int (json_int_at for an object's field), which takes only integers in range and throws
// InputError naming the value otherwise.
#pragma once

#include <nlohmann/json.hpp>

#include <limits>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace pare {

/// `v` as an integer of type Int; throws InputError saying that `what` must be one otherwise.
template <class Int>
Int json_int(const nlohmann::json& v, const std::string& what) {
  static_assert(std::is_integral_v<Int>, "json_int reads integers");
  bool fits = false;
  if (v.is_number_unsigned())
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max());
  else if (v.is_number_integer())
    fits = std::is_signed_v<Int> && v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<Int>::min()) &&
           v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<Int>::max());
  PARE_CHECK(fits, what, " must be an integer", std::is_signed_v<Int> ? "" : " >= 0", " that fits ",
             sizeof(Int) * 8, " bits, got ", v.dump());
  return v.is_number_unsigned() ? static_cast<Int>(v.get<uint64_t>()) : static_cast<Int>(v.get<int64_t>());
}

/// `j`[key] as an integer (json_int); throws InputError when it is missing.
template <class Int>
Int json_int_at(const nlohmann::json& j, const char* key) {
  PARE_CHECK(j.is_object() && j.contains(key), "'", key, "' is missing");
  return json_int<Int>(j.at(key), std::string("'") + key + "'");
}

}  // namespace pare
