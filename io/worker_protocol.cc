#include "io/worker_protocol.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "common/bytes.h"
#include "common/os_error.h"

extern char** environ;

namespace ckpt::io {
namespace {

constexpr char kWhat[] = "I/O worker message";
constexpr size_t kFrameHeaderBytes = sizeof(uint64_t);
constexpr uint32_t kMaxListCount = static_cast<uint32_t>(kMaxFrameBytes / sizeof(uint64_t));
constexpr uint32_t kSegmentBytes = 3 * sizeof(uint64_t);

// Command-line flags of the worker, in the order FormatWorkerArgs writes them; kFlagNames follows this order.
enum Flag : size_t {
  kProtocolFlag,
  kWorkerFlag,
  kParentPidFlag,
  kArenaBytesFlag,
  kBackendFlag,
  kRequestBytesFlag,
  kDirectFlag,
  kQueueDepthFlag,
  kPwriteThreadsFlag,
  kFlagCount
};
constexpr const char* kFlagNames[kFlagCount] = {"protocol",      "worker", "parent-pid",  "arena-bytes",   "backend",
                                                "request-bytes", "direct", "queue-depth", "pwrite-threads"};

std::string Frame(const std::string& body) {
  ByteWriter header;
  header.U64(body.size());
  return header.Take() + body;
}

ByteWriter StartBody(MessageType type, uint64_t job_id) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(type));
  w.U64(job_id);
  return w;
}

void PutStatus(ByteWriter* w, const Status& status) {
  w->I32(static_cast<int32_t>(status.code()));
  w->Bytes(status.message());
}

Status GetStatus(ByteReader* r, Status* status) {
  int32_t code = 0;
  std::string message;
  RETURN_IF_ERROR(r->I32(&code));
  RETURN_IF_ERROR(r->Bytes(&message));
  if (code < 0 || code > static_cast<int32_t>(Code::kInternal)) {
    return Corrupt(std::string(kWhat) + ": unknown status code " + std::to_string(code));
  }
  *status = code == 0 ? Status::Ok() : Status(static_cast<Code>(code), std::move(message));
  return Status::Ok();
}

void PutSegments(ByteWriter* w, const std::vector<FileSegment>& segments) {
  w->U32(static_cast<uint32_t>(segments.size()));
  for (const FileSegment& s : segments) {
    w->U64(s.file_offset);
    w->U64(s.arena_offset);
    w->U64(s.length);
  }
}

Status GetSegments(ByteReader* r, std::vector<FileSegment>* segments) {
  uint32_t count = 0;
  RETURN_IF_ERROR(r->Count(&count, kMaxListCount, kSegmentBytes));
  segments->resize(count);
  for (FileSegment& s : *segments) {
    RETURN_IF_ERROR(r->U64(&s.file_offset));
    RETURN_IF_ERROR(r->U64(&s.arena_offset));
    RETURN_IF_ERROR(r->U64(&s.length));
  }
  return Status::Ok();
}

void PutChecksumLists(ByteWriter* w, const std::vector<std::vector<uint64_t>>& lists) {
  w->U32(static_cast<uint32_t>(lists.size()));
  for (const auto& list : lists) w->U64s(list);
}

Status GetChecksumLists(ByteReader* r, std::vector<std::vector<uint64_t>>* lists) {
  uint32_t count = 0;
  RETURN_IF_ERROR(r->Count(&count, kMaxListCount, sizeof(uint32_t)));
  lists->resize(count);
  for (auto& list : *lists) RETURN_IF_ERROR(r->U64s(&list, kMaxListCount));
  return Status::Ok();
}

void PutSizeLists(ByteWriter* w, const std::vector<std::vector<uint32_t>>& lists) {
  w->U32(static_cast<uint32_t>(lists.size()));
  for (const auto& list : lists) w->U32s(list);
}

Status GetSizeLists(ByteReader* r, std::vector<std::vector<uint32_t>>* lists) {
  uint32_t count = 0;
  RETURN_IF_ERROR(r->Count(&count, kMaxListCount, sizeof(uint32_t)));
  lists->resize(count);
  for (auto& list : *lists) RETURN_IF_ERROR(r->U32s(&list, kMaxListCount));
  return Status::Ok();
}

Status GetCodec(ByteReader* r, Codec* codec) {
  uint8_t raw = 0;
  RETURN_IF_ERROR(r->U8(&raw));
  if (raw > static_cast<uint8_t>(Codec::kZstd)) {
    return Corrupt(std::string(kWhat) + ": unknown codec " + std::to_string(raw));
  }
  *codec = static_cast<Codec>(raw);
  return Status::Ok();
}

Status GetBool(ByteReader* r, bool* value) {
  uint8_t byte = 0;
  RETURN_IF_ERROR(r->U8(&byte));
  if (byte > 1) return Corrupt(std::string(kWhat) + ": flag byte " + std::to_string(byte) + " is not 0 or 1");
  *value = byte == 1;
  return Status::Ok();
}

// Reads the type and job id every body starts with, and checks the type is one the caller expects.
Status GetHeader(ByteReader* r, std::initializer_list<MessageType> expected, MessageType* type, uint64_t* job_id) {
  uint8_t raw = 0;
  RETURN_IF_ERROR(r->U8(&raw));
  RETURN_IF_ERROR(r->U64(job_id));
  for (MessageType t : expected) {
    if (raw == static_cast<uint8_t>(t)) {
      *type = t;
      return Status::Ok();
    }
  }
  return Corrupt(std::string(kWhat) + ": unexpected message type " + std::to_string(raw));
}

Status ParseUnsigned(const std::string& flag, const std::string& text, uint64_t max, uint64_t* value) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || errno == ERANGE || parsed > max) {
    return InvalidArgument("I/O worker flag --" + flag + ": '" + text + "' is not an integer in 0.." +
                           std::to_string(max));
  }
  *value = parsed;
  return Status::Ok();
}

// Stores one flag's value into the field it names.
Status StoreFlag(Flag index, const std::string& text, WorkerArgs* args) {
  const std::string flag = kFlagNames[index];
  constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
  constexpr uint64_t kI32 = std::numeric_limits<int32_t>::max();
  uint64_t v = 0;
  switch (index) {
    case kProtocolFlag:
      RETURN_IF_ERROR(ParseUnsigned(flag, text, kU32, &v));
      if (v != kWorkerProtocolVersion) {
        return InvalidArgument("I/O worker speaks protocol " + std::to_string(kWorkerProtocolVersion) +
                               ", the library asked for " + text +
                               ": the worker and libckpt are from different builds");
      }
      return Status::Ok();
    case kWorkerFlag:
      RETURN_IF_ERROR(ParseUnsigned(flag, text, kI32, &v));
      args->worker_index = static_cast<int>(v);
      return Status::Ok();
    case kParentPidFlag:
      RETURN_IF_ERROR(ParseUnsigned(flag, text, kI32, &v));
      args->parent_pid = static_cast<pid_t>(v);
      return Status::Ok();
    case kArenaBytesFlag:
      return ParseUnsigned(flag, text, std::numeric_limits<uint64_t>::max(), &args->arena_bytes);
    case kBackendFlag:
      RETURN_IF_ERROR(ParseUnsigned(flag, text, static_cast<uint64_t>(IoBackendKind::kPwrite), &v));
      args->tuning.backend = static_cast<IoBackendKind>(v);
      return Status::Ok();
    case kRequestBytesFlag:
      return ParseUnsigned(flag, text, std::numeric_limits<uint64_t>::max(), &args->tuning.request_bytes);
    case kDirectFlag:
      RETURN_IF_ERROR(ParseUnsigned(flag, text, 1, &v));
      args->tuning.direct = v == 1;
      return Status::Ok();
    case kQueueDepthFlag:
      RETURN_IF_ERROR(ParseUnsigned(flag, text, kU32, &v));
      args->tuning.queue_depth = static_cast<uint32_t>(v);
      return Status::Ok();
    case kPwriteThreadsFlag:
    default:
      RETURN_IF_ERROR(ParseUnsigned(flag, text, kU32, &v));
      args->tuning.pwrite_threads = static_cast<uint32_t>(v);
      return Status::Ok();
  }
}

// Blocking read of exactly `size` bytes; *got says how many arrived before EOF.
Status ReadExactly(int fd, char* data, size_t size, size_t* got) {
  *got = 0;
  while (*got < size) {
    const ssize_t n = read(fd, data + *got, size - *got);
    if (n > 0) {
      *got += static_cast<size_t>(n);
    } else if (n == 0) {
      return Status::Ok();
    } else if (errno != EINTR) {
      return OsError("cannot read from the I/O pool socket", errno);
    }
  }
  return Status::Ok();
}

// Descriptors below this are the worker's stdio, socket and arena: sources for dup2 must not be among them.
constexpr int kFirstFreeFd = kWorkerArenaFd + 1;

// A close-on-exec copy of `fd` numbered at least kFirstFreeFd, so dup2 onto fds 3 and 4 cannot clobber it, and
// dup2 always changes the number (which is what clears close-on-exec on the worker's copy).
class SpawnSource {
 public:
  explicit SpawnSource(int fd) : fd_(fcntl(fd, F_DUPFD_CLOEXEC, kFirstFreeFd)) {}
  ~SpawnSource() {
    if (fd_ >= 0) close(fd_);
  }
  SpawnSource(const SpawnSource&) = delete;
  SpawnSource& operator=(const SpawnSource&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// posix_spawn attributes: empty signal mask, default dispositions, a process group of its own.
void SetSpawnAttributes(posix_spawnattr_t* attr) {
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(attr, &signals);
  sigfillset(&signals);
  sigdelset(&signals, SIGKILL);
  sigdelset(&signals, SIGSTOP);
  posix_spawnattr_setsigdefault(attr, &signals);
  posix_spawnattr_setpgroup(attr, 0);
  posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
}

uint64_t LoadU64(const char* data) {
  uint64_t value = 0;
  std::memcpy(&value, data, sizeof value);
  return value;
}

}  // namespace

std::vector<std::string> FormatWorkerArgs(const WorkerArgs& args) {
  const uint64_t values[kFlagCount] = {kWorkerProtocolVersion,
                                       static_cast<uint64_t>(args.worker_index),
                                       static_cast<uint64_t>(args.parent_pid),
                                       args.arena_bytes,
                                       static_cast<uint64_t>(args.tuning.backend),
                                       args.tuning.request_bytes,
                                       args.tuning.direct ? 1u : 0u,
                                       args.tuning.queue_depth,
                                       args.tuning.pwrite_threads};
  std::vector<std::string> out;
  for (size_t i = 0; i < kFlagCount; ++i)
    out.push_back("--" + std::string(kFlagNames[i]) + "=" + std::to_string(values[i]));
  return out;
}

Result<WorkerArgs> ParseWorkerArgs(const std::vector<std::string>& args) {
  WorkerArgs parsed;
  bool seen[kFlagCount] = {};
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    const std::string name = arg.size() > 2 && arg.compare(0, 2, "--") == 0 ? arg.substr(2, eq - 2) : "";
    size_t index = 0;
    while (index < kFlagCount && name != kFlagNames[index]) ++index;
    if (eq == std::string::npos || index == kFlagCount)
      return InvalidArgument("unknown I/O worker argument '" + arg + "'");
    if (seen[index]) return InvalidArgument("I/O worker flag --" + name + " given twice");
    seen[index] = true;
    RETURN_IF_ERROR(StoreFlag(static_cast<Flag>(index), arg.substr(eq + 1), &parsed));
  }
  for (size_t i = 0; i < kFlagCount; ++i) {
    if (!seen[i]) return InvalidArgument("I/O worker flag --" + std::string(kFlagNames[i]) + " is missing");
  }
  return parsed;
}

Result<pid_t> SpawnWorker(const std::string& path, const WorkerArgs& args, int socket_fd, int arena_fd) {
  const SpawnSource socket_source(socket_fd);
  const SpawnSource arena_source(arena_fd);
  if (socket_source.fd() < 0 || arena_source.fd() < 0) {
    return OsError("cannot duplicate descriptors for an I/O worker", errno);
  }
  std::vector<std::string> strings = FormatWorkerArgs(args);
  strings.insert(strings.begin(), path);
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, socket_source.fd(), kWorkerSocketFd);
  posix_spawn_file_actions_adddup2(&actions, arena_source.fd(), kWorkerArenaFd);
#if __GLIBC_PREREQ(2, 34)
  posix_spawn_file_actions_addclosefrom_np(&actions, kFirstFreeFd);  // the trainer's inheritable descriptors
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  SetSpawnAttributes(&attr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    return OsError("cannot start I/O worker " + std::to_string(args.worker_index) + " from " + Quoted(path), err);
  }
  return pid;
}

std::string EncodeReady(const ReadyMessage& ready) {
  ByteWriter w = StartBody(MessageType::kReady, 0);
  w.U32(ready.protocol);
  PutStatus(&w, ready.status);
  w.Bytes(ready.backend);
  return Frame(w.data());
}

std::string EncodeWriteRequest(uint64_t job_id, const WriteJob& job) {
  ByteWriter w = StartBody(MessageType::kWrite, job_id);
  w.Bytes(job.path);
  w.U8(job.create ? 1 : 0);
  w.U8(job.overwrite_existing ? 1 : 0);
  w.U8(job.finish ? 1 : 0);
  w.U64(job.final_size);
  w.U64(job.block_size);
  w.U8(job.compute_checksums ? 1 : 0);
  PutSegments(&w, job.segments);
  w.U8(static_cast<uint8_t>(job.codec));
  w.U32s(job.byte_groups);
  return Frame(w.data());
}

std::string EncodeReadRequest(uint64_t job_id, const ReadJob& job) {
  ByteWriter w = StartBody(MessageType::kRead, job_id);
  w.Bytes(job.root);
  w.Bytes(job.path);
  w.U64(job.block_size);
  PutSegments(&w, job.segments);
  PutChecksumLists(&w, job.expected_checksums);
  w.U8(static_cast<uint8_t>(job.codec));
  w.U32(job.byte_groups);
  PutSizeLists(&w, job.stored_sizes);
  return Frame(w.data());
}

std::string EncodeAbandonRequest(uint64_t job_id, const std::string& directory) {
  ByteWriter w = StartBody(MessageType::kAbandonFiles, job_id);
  w.Bytes(directory);
  return Frame(w.data());
}

std::string EncodeWriteReply(uint64_t job_id, const Result<WriteResult>& result, const std::string& backend) {
  ByteWriter w = StartBody(MessageType::kWriteDone, job_id);
  PutStatus(&w, result.status());
  w.Bytes(backend);
  if (result.ok()) {
    PutChecksumLists(&w, result.value().checksums);
    w.U64s(result.value().stored_offsets);
    PutSizeLists(&w, result.value().stored_sizes);
    w.U64(result.value().file_end);
  }
  return Frame(w.data());
}

std::string EncodeReadReply(uint64_t job_id, const Status& status, const ReadFailure& failure,
                            const std::string& backend) {
  ByteWriter w = StartBody(MessageType::kReadDone, job_id);
  PutStatus(&w, status);
  w.Bytes(backend);
  w.U64(failure.segment);
  w.U64(failure.block);
  return Frame(w.data());
}

std::string EncodeAbandonReply(uint64_t job_id, const Status& status, const std::string& backend) {
  ByteWriter w = StartBody(MessageType::kFilesAbandoned, job_id);
  PutStatus(&w, status);
  w.Bytes(backend);
  return Frame(w.data());
}

Result<ReadyMessage> DecodeReady(std::string_view body) {
  ByteReader r(body, kWhat);
  MessageType type;
  uint64_t job_id = 0;
  ReadyMessage ready;
  RETURN_IF_ERROR(GetHeader(&r, {MessageType::kReady}, &type, &job_id));
  RETURN_IF_ERROR(r.U32(&ready.protocol));
  RETURN_IF_ERROR(GetStatus(&r, &ready.status));
  RETURN_IF_ERROR(r.Bytes(&ready.backend));
  RETURN_IF_ERROR(r.ExpectDone());
  return ready;
}

Result<WorkerRequest> DecodeRequest(std::string_view body) {
  ByteReader r(body, kWhat);
  WorkerRequest request;
  RETURN_IF_ERROR(GetHeader(&r, {MessageType::kWrite, MessageType::kRead, MessageType::kAbandonFiles}, &request.type,
                            &request.job_id));
  if (request.type == MessageType::kAbandonFiles) {
    RETURN_IF_ERROR(r.Bytes(&request.directory));
  } else if (request.type == MessageType::kWrite) {
    WriteJob& job = request.write;
    RETURN_IF_ERROR(r.Bytes(&job.path));
    RETURN_IF_ERROR(GetBool(&r, &job.create));
    RETURN_IF_ERROR(GetBool(&r, &job.overwrite_existing));
    RETURN_IF_ERROR(GetBool(&r, &job.finish));
    RETURN_IF_ERROR(r.U64(&job.final_size));
    RETURN_IF_ERROR(r.U64(&job.block_size));
    RETURN_IF_ERROR(GetBool(&r, &job.compute_checksums));
    RETURN_IF_ERROR(GetSegments(&r, &job.segments));
    RETURN_IF_ERROR(GetCodec(&r, &job.codec));
    RETURN_IF_ERROR(r.U32s(&job.byte_groups, kMaxListCount));
  } else {
    ReadJob& job = request.read;
    RETURN_IF_ERROR(r.Bytes(&job.root));
    RETURN_IF_ERROR(r.Bytes(&job.path));
    RETURN_IF_ERROR(r.U64(&job.block_size));
    RETURN_IF_ERROR(GetSegments(&r, &job.segments));
    RETURN_IF_ERROR(GetChecksumLists(&r, &job.expected_checksums));
    RETURN_IF_ERROR(GetCodec(&r, &job.codec));
    RETURN_IF_ERROR(r.U32(&job.byte_groups));
    RETURN_IF_ERROR(GetSizeLists(&r, &job.stored_sizes));
  }
  RETURN_IF_ERROR(r.ExpectDone());
  return request;
}

Result<WorkerReply> DecodeReply(std::string_view body) {
  ByteReader r(body, kWhat);
  WorkerReply reply;
  RETURN_IF_ERROR(GetHeader(&r, {MessageType::kWriteDone, MessageType::kReadDone, MessageType::kFilesAbandoned},
                            &reply.type, &reply.job_id));
  RETURN_IF_ERROR(GetStatus(&r, &reply.status));
  RETURN_IF_ERROR(r.Bytes(&reply.backend));
  if (reply.type == MessageType::kWriteDone) {
    if (reply.status.ok()) {
      WriteResult& result = reply.write_result;
      RETURN_IF_ERROR(GetChecksumLists(&r, &result.checksums));
      RETURN_IF_ERROR(r.U64s(&result.stored_offsets, kMaxListCount));
      RETURN_IF_ERROR(GetSizeLists(&r, &result.stored_sizes));
      RETURN_IF_ERROR(r.U64(&result.file_end));
    }
  } else if (reply.type == MessageType::kReadDone) {
    uint64_t segment = 0;
    RETURN_IF_ERROR(r.U64(&segment));
    RETURN_IF_ERROR(r.U64(&reply.read_failure.block));
    reply.read_failure.segment = static_cast<size_t>(segment);
  }
  RETURN_IF_ERROR(r.ExpectDone());
  return reply;
}

Status CheckSegmentsInArena(const std::string& path, const std::vector<FileSegment>& segments, uint64_t arena_bytes) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const FileSegment& s = segments[i];
    if (s.arena_offset > arena_bytes || s.length > arena_bytes - s.arena_offset) {
      return InvalidArgument("I/O job for '" + path + "': segment " + std::to_string(i) + " (arena offset " +
                             std::to_string(s.arena_offset) + ", length " + std::to_string(s.length) +
                             ") reaches past the staging arena of " + std::to_string(arena_bytes) + " bytes");
    }
  }
  return Status::Ok();
}

Result<bool> FrameReader::Next(std::string* body) {
  const size_t available = buffer_.size() - consumed_;
  if (available < kFrameHeaderBytes) return false;
  const uint64_t length = LoadU64(buffer_.data() + consumed_);
  if (length > kMaxFrameBytes) {
    return Corrupt(what_ + ": frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                   std::to_string(kMaxFrameBytes));
  }
  if (available - kFrameHeaderBytes < length) return false;
  body->assign(buffer_, consumed_ + kFrameHeaderBytes, length);
  consumed_ += kFrameHeaderBytes + length;
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  return true;
}

Status ReadFrame(int fd, std::string* body, bool* eof) {
  char header[kFrameHeaderBytes];
  size_t got = 0;
  RETURN_IF_ERROR(ReadExactly(fd, header, sizeof header, &got));
  *eof = got == 0;
  if (*eof) return Status::Ok();
  if (got < sizeof header) return IoError("the I/O pool socket closed inside a frame header");
  const uint64_t length = LoadU64(header);
  if (length > kMaxFrameBytes) {
    return Corrupt(std::string(kWhat) + ": frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                   std::to_string(kMaxFrameBytes));
  }
  body->resize(length);
  RETURN_IF_ERROR(ReadExactly(fd, body->data(), length, &got));
  if (got < length) {
    return IoError("the I/O pool socket closed after " + std::to_string(got) + " of a " + std::to_string(length) +
                   "-byte frame");
  }
  return Status::Ok();
}

Status SendAll(int fd, std::string_view data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      return OsError("cannot send on the I/O pool socket", errno);
    }
  }
  return Status::Ok();
}

}  // namespace ckpt::io
