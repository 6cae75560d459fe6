// Reading JSON documents (loom-perf --json files, read back by loom-perf --compare,
// loom-calibrate and the tests) through nlohmann_json, as a plain tree that callers walk
// without including nlohmann's header.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::toolkit {

/** A parsed JSON value. */
struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;  // in the document's order
  /** The member called key, or null when absent (or not an object). */
  const JsonValue* find(std::string_view key) const;
};
/** Parses text; nullopt (with *error) when it is not one well-formed JSON value. */
std::optional<JsonValue> parseJson(std::string_view text, std::string* error);

}  // namespace loom::toolkit
