#pragma once
// The tools' strict JSON parser, for the tests (src/tools/common/json_value.hpp).

#include <json_value.hpp>  // src/tools/common/json_value.hpp, not this file

namespace gpumem::test {
using tools::json_value;
using tools::parse_json;
}  // namespace gpumem::test
