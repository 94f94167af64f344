#pragma once
// The tools' strict JSON parser, for the tests (include/gpumem/tools/json_value.hpp).

#include <gpumem/tools/json_value.hpp>

namespace gpumem::test {
using tools::json_value;
using tools::parse_json;
}  // namespace gpumem::test
