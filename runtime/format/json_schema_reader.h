// A JSON reader that keeps only what a schema reads: SchemaSax walks one JSON object through nlohmann's SAX parser,
// which builds nothing, and a subclass (the schema: a safetensors header, a Hugging Face index) stores the values it
// wants and refuses what does not fit. Depth is bounded and duplicate keys are refused everywhere, so a hostile
// document costs memory in proportion to what the schema keeps, never to the DOM it would expand to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ckpt::runtime::json_schema {

using Json = nlohmann::json;

// Deeper than anything the schemas read: it bounds the frames that a value they skip (an index's own metadata) can
// cost.
inline constexpr size_t kMaxJsonDepth = 64;

// A string as JSON writes it: quoted, with control characters escaped and invalid UTF-8 replaced, so that a
// hostile name can neither garble a message nor make nlohmann throw.
std::string JsonQuoted(const std::string& s);

// A JSON value other than an object or an array, reduced to what the schemas read.
struct Scalar {
  enum Kind { kNull, kBool, kUnsigned, kNegative, kOtherNumber, kString, kBinary };
  explicit Scalar(Kind kind, uint64_t number = 0, std::string text = {})
      : kind(kind), number(number), text(std::move(text)) {}
  Kind kind;
  uint64_t number;   // kUnsigned
  std::string text;  // kString
};

// For messages: "... shape[1] is a negative number, not an integer in [0, 2^64)".
const char* KindName(Scalar::Kind kind);

// An object or array that is open where the parser stands.
struct Frame {
  Frame(int role, bool object) : role(role), object(object) {}
  int role;
  bool object;
  std::string key;             // objects: the member being read
  uint64_t elements = 0;       // values read so far (an array's next index)
  std::set<std::string> keys;  // objects: the members read so far, to refuse a duplicate that nlohmann would let
                               // replace the first silently (unless the schema checks them: ChecksOwnDuplicates)
};

// Reads one JSON object: the schema gives each object or array a role, and takes the scalars read in those with a
// role; the values that a schema skips (role kSkip) have their syntax checked alone.
class SchemaSax : public nlohmann::json_sax<Json> {
 public:
  // Parses `text`; errors are kCorrupt and name `origin`.
  Status Parse(std::string_view text, const std::string& origin);

  bool null() override;
  bool boolean(bool) override;
  // nlohmann reports non-negative integers as unsigned: only "-0" comes here without being negative.
  bool number_integer(number_integer_t v) override;
  bool number_unsigned(number_unsigned_t v) override;
  bool number_float(number_float_t, const string_t&) override;
  bool string(string_t& s) override;
  // Only nlohmann's binary formats (CBOR, ...) produce this; the interface requires it.
  bool binary(binary_t&) override;
  bool start_object(std::size_t) override;
  bool end_object() override;
  bool start_array(std::size_t) override;
  bool end_array() override;
  bool key(string_t& key) override;
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override;

 protected:
  static constexpr int kSkip = 0;  // a value the schema ignores
  static constexpr int kTop = 1;   // the top-level object

  // The role of an object (or array) opening in `parent`, or why it cannot be there.
  virtual Result<int> Open(const Frame& parent, bool object) = 0;
  // Takes a scalar read in `parent`, or says why it cannot be there.
  virtual Status Take(const Frame& parent, Scalar value) = 0;
  // Checks what only a whole object or array shows (a missing member, a count).
  virtual Status Close(const Frame& frame) = 0;
  // Whether the schema keeps every member of an object of `role` and refuses a duplicate itself once the parse is
  // done, by sorting them: the object that lists the tensors, whose set of names would cost more memory than the
  // tensors (100 bytes and more a name, a million names in a large header).
  virtual bool ChecksOwnDuplicates(int /*role*/) const { return false; }

 private:
  bool OnOpen(bool object);
  bool OnScalar(Scalar value);
  bool OnClose();
  // Stops the parse: nlohmann returns as soon as a callback answers false.
  bool Fail(Status status);

  std::vector<Frame> frames_;
  Status error_;
};

}  // namespace ckpt::runtime::json_schema
