// The contract between a WorkerPool and one ckpt-io-worker process: how it is launched and what they say.
//
// Launch: SpawnWorker installs the pool's socket as the worker's fd 3 and the arena memfd as its fd 4, and passes
// its settings as --name=value flags (FormatWorkerArgs / ParseWorkerArgs).
// Transport: a SOCK_STREAM Unix socket. Every message is a frame: a u64 little-endian body length (at most
// kMaxFrameBytes), then the body; a job with any number of segments travels whole, and a message never depends on
// a packet size limit. A body is: u8 MessageType, u64 job id, then the type's fields in common/bytes.h encoding.
// Conversation: the worker speaks first (kReady, job id 0), then answers every request, in order, with one reply
// carrying the request's job id. EOF on the socket tells the worker to exit. A write job may leave its file open for
// the file's later jobs; kAbandonFiles closes those of a failed save (their later jobs will never come).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "io/file_jobs.h"

namespace ckpt::io {

// Bumped whenever a message changes; the pool refuses a worker that reports another version.
inline constexpr uint32_t kWorkerProtocolVersion = 6;
// The descriptors the pool installs in a worker before exec.
inline constexpr int kWorkerSocketFd = 3;
inline constexpr int kWorkerArenaFd = 4;
// Bounds what a peer can make the other allocate; far above any real job (a job of 1 M segments is ~24 MiB).
inline constexpr uint64_t kMaxFrameBytes = 256ull << 20;

enum class MessageType : uint8_t {
  kReady = 1,           // worker -> pool, once: protocol version, startup status, backend name
  kWrite = 2,           // pool -> worker: a WriteJob
  kRead = 3,            // pool -> worker: a ReadJob
  kWriteDone = 4,       // worker -> pool: status, checksums, backend name
  kReadDone = 5,        // worker -> pool: status, ReadFailure, backend name
  kAbandonFiles = 6,    // pool -> worker: a directory whose open files to close (FileJobExecutor::AbandonFiles)
  kFilesAbandoned = 7,  // worker -> pool: status, backend name
};

// What the worker is told on its command line.
struct WorkerArgs {
  int worker_index = 0;
  pid_t parent_pid = 0;
  uint64_t arena_bytes = 0;
  IoTuning tuning;
};
// argv[1..] for the worker (argv[0], the executable, is the caller's).
std::vector<std::string> FormatWorkerArgs(const WorkerArgs& args);
// kInvalidArgument naming the flag that is unknown, missing, malformed, or from another protocol version.
Result<WorkerArgs> ParseWorkerArgs(const std::vector<std::string>& args);

// Starts the worker at `path` (posix_spawn, never fork) with `socket_fd` as its fd 3 and `arena_fd` as its fd 4;
// both may have any number here. Nothing else is inherited where the C library allows it; the worker gets its own
// process group (a Ctrl-C meant for the trainer must not cut a write short), an empty signal mask and default
// signal dispositions. kNotFound if the executable is missing, else kIo.
Result<pid_t> SpawnWorker(const std::string& path, const WorkerArgs& args, int socket_fd, int arena_fd);

struct ReadyMessage {
  uint32_t protocol = kWorkerProtocolVersion;
  Status status;  // why the worker cannot serve (it exits after sending this), or OK
  std::string backend;
};

struct WorkerRequest {
  MessageType type = MessageType::kWrite;
  uint64_t job_id = 0;
  WriteJob write;         // when type is kWrite
  ReadJob read;           // when type is kRead
  std::string directory;  // when type is kAbandonFiles
};

struct WorkerReply {
  MessageType type = MessageType::kWriteDone;
  uint64_t job_id = 0;
  Status status;
  WriteResult write_result;  // kWriteDone with an OK status
  ReadFailure read_failure;  // kReadDone
  std::string backend;
};

// Encoders return whole frames, ready to send.
std::string EncodeReady(const ReadyMessage& ready);
std::string EncodeWriteRequest(uint64_t job_id, const WriteJob& job);
std::string EncodeReadRequest(uint64_t job_id, const ReadJob& job);
std::string EncodeAbandonRequest(uint64_t job_id, const std::string& directory);
std::string EncodeWriteReply(uint64_t job_id, const Result<WriteResult>& result, const std::string& backend);
std::string EncodeReadReply(uint64_t job_id, const Status& status, const ReadFailure& failure,
                            const std::string& backend);
std::string EncodeAbandonReply(uint64_t job_id, const Status& status, const std::string& backend);

// Decoders take a frame's body; kCorrupt naming the message and what is wrong with it.
Result<ReadyMessage> DecodeReady(std::string_view body);
Result<WorkerRequest> DecodeRequest(std::string_view body);
Result<WorkerReply> DecodeReply(std::string_view body);

// kInvalidArgument if a segment reaches past the arena (or its end overflows), naming the job's file and segment.
Status CheckSegmentsInArena(const std::string& path, const std::vector<FileSegment>& segments, uint64_t arena_bytes);

// Splits a byte stream into frame bodies, for a reader that gets the stream in pieces (non-blocking sockets).
class FrameReader {
 public:
  explicit FrameReader(std::string what) : what_(std::move(what)) {}
  void Append(const char* data, size_t size) { buffer_.append(data, size); }
  // The next whole body into *body and true; false when more bytes are needed. kCorrupt on an oversized frame.
  Result<bool> Next(std::string* body);
  // Whether a frame has started but not ended (EOF now means the peer died mid-message).
  bool partial() const { return consumed_ < buffer_.size(); }

 private:
  std::string what_;
  std::string buffer_;
  size_t consumed_ = 0;
};

// Blocking helpers for the worker. ReadFrame sets *eof (and returns OK) when the stream ends between frames.
Status ReadFrame(int fd, std::string* body, bool* eof);
Status SendAll(int fd, std::string_view data);

}  // namespace ckpt::io
