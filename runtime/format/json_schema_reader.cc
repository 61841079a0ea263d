#include "runtime/format/json_schema_reader.h"

#include <utility>

namespace ckpt::runtime::json_schema {

std::string JsonQuoted(const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); }

const char* KindName(Scalar::Kind kind) {
  switch (kind) {
    case Scalar::kNull:
      return "null";
    case Scalar::kBool:
      return "a boolean";
    case Scalar::kUnsigned:
      return "a number";
    case Scalar::kNegative:
      return "a negative number";
    case Scalar::kOtherNumber:
      return "a fraction or a number of 2^64 or more";
    case Scalar::kString:
      return "a string";
    case Scalar::kBinary:
      return "binary data";
  }
  return "a value";
}

Status SchemaSax::Parse(std::string_view text, const std::string& origin) {
  // nlohmann takes a NUL where a token may begin for the end of a C string: "{}\0junk" would pass as "{}".
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return Corrupt(origin + ": invalid JSON at byte " + std::to_string(nul) + ": a NUL byte");
  }
  try {
    Json::sax_parse(text.data(), text.data() + text.size(), this);
  } catch (const Json::exception& e) {
    // nlohmann 3.11 reports every syntax error to parse_error() instead; this keeps a later version's throw from
    // escaping to a caller that expects a Status.
    return Corrupt(origin + ": " + e.what());
  }
  return error_.WithContext(origin);
}

bool SchemaSax::null() { return OnScalar(Scalar(Scalar::kNull)); }
bool SchemaSax::boolean(bool) { return OnScalar(Scalar(Scalar::kBool)); }
bool SchemaSax::number_integer(number_integer_t v) {
  return OnScalar(v < 0 ? Scalar(Scalar::kNegative) : Scalar(Scalar::kUnsigned, static_cast<uint64_t>(v)));
}
bool SchemaSax::number_unsigned(number_unsigned_t v) { return OnScalar(Scalar(Scalar::kUnsigned, v)); }
bool SchemaSax::number_float(number_float_t, const string_t&) { return OnScalar(Scalar(Scalar::kOtherNumber)); }
bool SchemaSax::string(string_t& s) { return OnScalar(Scalar(Scalar::kString, 0, std::move(s))); }
bool SchemaSax::binary(binary_t&) { return OnScalar(Scalar(Scalar::kBinary)); }
bool SchemaSax::start_object(std::size_t) { return OnOpen(true); }
bool SchemaSax::end_object() { return OnClose(); }
bool SchemaSax::start_array(std::size_t) { return OnOpen(false); }
bool SchemaSax::end_array() { return OnClose(); }

bool SchemaSax::key(string_t& key) {
  Frame& object = frames_.back();
  if (!ChecksOwnDuplicates(object.role) && !object.keys.insert(key).second) {
    const Frame* outer = frames_.size() > 1 ? &frames_[frames_.size() - 2] : nullptr;
    return Fail(
        Corrupt("duplicate key " + JsonQuoted(key) + (outer && outer->object ? " in " + JsonQuoted(outer->key) : "")));
  }
  object.key = std::move(key);
  return true;
}

bool SchemaSax::parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
  return Fail(Corrupt("invalid JSON at byte " + std::to_string(position) + ": " + e.what()));
}

bool SchemaSax::OnOpen(bool object) {
  if (frames_.empty()) {
    if (!object) return Fail(Corrupt("not a JSON object"));
    frames_.emplace_back(kTop, true);
    return true;
  }
  if (frames_.size() == kMaxJsonDepth) {
    return Fail(Corrupt("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"));
  }
  int role = kSkip;
  if (frames_.back().role != kSkip) {
    Result<int> opened = Open(frames_.back(), object);
    if (!opened.ok()) return Fail(opened.status());
    role = *opened;
  }
  frames_.emplace_back(role, object);
  return true;
}

bool SchemaSax::OnScalar(Scalar value) {
  if (frames_.empty()) return Fail(Corrupt("not a JSON object"));
  Frame& parent = frames_.back();
  if (parent.role != kSkip) {
    Status taken = Take(parent, std::move(value));
    if (!taken.ok()) return Fail(std::move(taken));
  }
  ++parent.elements;
  return true;
}

bool SchemaSax::OnClose() {
  if (frames_.back().role != kSkip) {
    Status closed = Close(frames_.back());
    if (!closed.ok()) return Fail(std::move(closed));
  }
  frames_.pop_back();
  if (!frames_.empty()) ++frames_.back().elements;
  return true;
}

bool SchemaSax::Fail(Status status) {
  error_ = std::move(status);
  return false;
}

}  // namespace ckpt::runtime::json_schema
