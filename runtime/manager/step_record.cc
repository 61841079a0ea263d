#include "runtime/manager/step_record.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/file_io.h"
#include "io/object_storage.h"

namespace ckpt::runtime {
namespace {

using Json = nlohmann::json;

// Deeper nesting is no table of metrics, and would make a hostile file cost stack and time.
constexpr int kMaxDepth = 64;
// The record wraps the metrics in a few short fields.
constexpr uint64_t kMaxRecordBytes = kMaxMetricsBytes + 4096;

// Parses `text` as one JSON value nested at most kMaxDepth deep; the error says why it is not, without an origin.
Result<Json> ParseBounded(std::string_view text) {
  // nlohmann takes a NUL where a token may begin for the end of a C string: "{}\0junk" would pass as "{}".
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return Corrupt("invalid JSON at byte " + std::to_string(nul) + ": a NUL byte");
  }
  int deepest = 0;
  const Json::parser_callback_t depth = [&deepest](int level, Json::parse_event_t, Json&) {
    deepest = std::max(deepest, level);
    return level <= kMaxDepth;  // what lies deeper is dropped, then refused below
  };
  Json value = Json::parse(text.begin(), text.end(), depth, /*allow_exceptions=*/false);
  if (value.is_discarded()) return Corrupt("invalid JSON");
  if (deepest > kMaxDepth) return Corrupt("nested more than " + std::to_string(kMaxDepth) + " levels deep");
  return value;
}

}  // namespace

int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status CheckMetrics(std::string_view text) {
  if (text.size() > kMaxMetricsBytes) {
    return InvalidArgument("the metrics are " + std::to_string(text.size()) +
                           " bytes of JSON, more than the limit of " + std::to_string(kMaxMetricsBytes));
  }
  Result<Json> value = ParseBounded(text);
  if (!value.ok()) return InvalidArgument("the metrics are not a JSON object: " + value.status().message());
  if (!value->is_object()) return InvalidArgument("the metrics are JSON but not an object ({...})");
  return Status::Ok();
}

std::string EncodeStepRecord(const StepRecord& record) {
  Json json = {{"committed_unix_ns", record.committed_unix_ns}};
  if (record.score) json["score"] = *record.score;
  // Checked by CheckMetrics when the save was asked for.
  if (!record.metrics.empty()) json["metrics"] = Json::parse(record.metrics);
  return json.dump();
}

Result<StepRecord> DecodeStepRecord(std::string_view text, const std::string& origin) {
  const auto corrupt = [&origin](const std::string& why) { return Corrupt(Quoted(origin) + ": " + why); };
  Result<Json> parsed = ParseBounded(text);
  if (!parsed.ok()) return corrupt(parsed.status().message());
  const Json& json = *parsed;
  if (!json.is_object()) return corrupt("not a JSON object");
  StepRecord record;
  const auto time = json.find("committed_unix_ns");
  if (time == json.end() || !time->is_number_integer()) return corrupt("\"committed_unix_ns\" is not an integer");
  record.committed_unix_ns = time->get<int64_t>();
  if (const auto score = json.find("score"); score != json.end()) {
    if (!score->is_number() || !std::isfinite(score->get<double>())) return corrupt("\"score\" is not a finite number");
    record.score = score->get<double>();
  }
  if (const auto metrics = json.find("metrics"); metrics != json.end()) {
    if (!metrics->is_object()) return corrupt("\"metrics\" is not a JSON object");
    record.metrics = metrics->dump();
    if (record.metrics.size() > kMaxMetricsBytes) return corrupt("its metrics exceed the limit of 1 MiB");
  }
  return record;
}

Status WriteStepRecord(const std::string& step_directory, const StepRecord& record) {
  const std::string path = io::JoinPath(step_directory, kStepRecordName);
  const std::string text = EncodeStepRecord(record);
  const std::string context = "writing the step's record " + Quoted(path);
  if (io::IsObjectStorePath(path)) {
    // The step has no MANIFEST yet, so this object is debris of an earlier attempt at the step if anything: the save
    // creates it anew, as it does its data objects.
    RETURN_IF_ERROR(io::RemoveObject(path).WithContext(context));
    return io::CreateObjectExclusive(path, text).WithContext(context);
  }
  return io::WriteFileDurably(path, text.data(), text.size()).WithContext(context);
}

Result<std::optional<StepRecord>> ReadStepRecord(const std::string& step_directory) {
  Result<std::string> text = io::ReadWholeFile(step_directory, kStepRecordName, kMaxRecordBytes);
  if (text.status().code() == Code::kNotFound) return std::optional<StepRecord>();
  const std::string origin = io::JoinPath(step_directory, kStepRecordName);
  if (!text.ok()) return text.status().WithContext("reading the step's record " + Quoted(origin));
  ASSIGN_OR_RETURN(StepRecord record, DecodeStepRecord(*text, origin));
  return std::optional<StepRecord>(std::move(record));
}

}  // namespace ckpt::runtime
