#include "toolkit/json.h"

#include <nlohmann/json.hpp>

namespace loom::toolkit {

namespace {

using Json = nlohmann::ordered_json;

JsonValue convert(const Json& j) {
  JsonValue v;
  switch (j.type()) {
    case Json::value_t::boolean:
      v.kind = JsonValue::Kind::kBool;
      v.boolean = j.get<bool>();
      break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      v.kind = JsonValue::Kind::kNumber;
      v.number = j.get<double>();
      break;
    case Json::value_t::string:
      v.kind = JsonValue::Kind::kString;
      v.text = j.get<std::string>();
      break;
    case Json::value_t::array:
      v.kind = JsonValue::Kind::kArray;
      for (const Json& item : j) v.items.push_back(convert(item));
      break;
    case Json::value_t::object:
      v.kind = JsonValue::Kind::kObject;
      for (const auto& [key, member] : j.items()) v.members.emplace_back(key, convert(member));
      break;
    default:  // null, and binary, which parsing text never yields
      break;
  }
  return v;
}

}  // namespace

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<JsonValue> parseJson(std::string_view text, std::string* error) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *error = "malformed JSON";
    return std::nullopt;
  }
  return convert(j);
}

}  // namespace loom::toolkit
