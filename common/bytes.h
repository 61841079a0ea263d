// Little-endian encoding for messages between ranks. The reader checks every length against what is left, so a
// short or hostile message becomes an error, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt {

class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof v); }
  void U64(uint64_t v) { Raw(&v, sizeof v); }
  void I32(int32_t v) { Raw(&v, sizeof v); }
  void Bytes(std::string_view s) {
    U64(s.size());
    out_.append(s.data(), s.size());
  }
  void U64s(const std::vector<uint64_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (uint64_t x : v) U64(x);
  }
  void U32s(const std::vector<uint32_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (uint32_t x : v) U32(x);
  }
  const std::string& data() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class ByteReader {
 public:
  // `what` names the message in errors ("shard descriptors from rank 3").
  ByteReader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}

  Status U8(uint8_t* v) { return Raw(v, sizeof *v); }
  Status U32(uint32_t* v) { return Raw(v, sizeof *v); }
  Status U64(uint64_t* v) { return Raw(v, sizeof *v); }
  Status I32(int32_t* v) { return Raw(v, sizeof *v); }
  Status Bytes(std::string* s) {
    uint64_t n = 0;
    RETURN_IF_ERROR(U64(&n));
    if (n > in_.size() - pos_) return Short(n);
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  // `max_count` bounds the element count before anything is allocated.
  Status U64s(std::vector<uint64_t>* v, uint32_t max_count) {
    uint32_t n = 0;
    RETURN_IF_ERROR(Count(&n, max_count, sizeof(uint64_t)));
    v->resize(n);
    for (auto& x : *v) RETURN_IF_ERROR(U64(&x));
    return Status::Ok();
  }
  Status U32s(std::vector<uint32_t>* v, uint32_t max_count) {
    uint32_t n = 0;
    RETURN_IF_ERROR(Count(&n, max_count, sizeof(uint32_t)));
    v->resize(n);
    for (auto& x : *v) RETURN_IF_ERROR(U32(&x));
    return Status::Ok();
  }
  // A count of elements of at least `min_element_bytes` each, bounded by max_count and by what is left.
  Status Count(uint32_t* n, uint32_t max_count, size_t min_element_bytes) {
    RETURN_IF_ERROR(U32(n));
    if (*n > max_count || static_cast<uint64_t>(*n) * min_element_bytes > in_.size() - pos_) {
      return Corrupt(what_ + ": count " + std::to_string(*n) + " exceeds the message");
    }
    return Status::Ok();
  }
  bool done() const { return pos_ == in_.size(); }
  // How many bytes have been read.
  size_t position() const { return pos_; }
  Status ExpectDone() const {
    return done() ? Status::Ok() : Corrupt(what_ + ": " + std::to_string(in_.size() - pos_) + " trailing bytes");
  }

 private:
  Status Raw(void* p, size_t n) {
    if (n > in_.size() - pos_) return Short(n);
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  Status Short(uint64_t n) const {
    return Corrupt(what_ + ": truncated (needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                   ", " + std::to_string(in_.size() - pos_) + " left)");
  }
  std::string_view in_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace ckpt
