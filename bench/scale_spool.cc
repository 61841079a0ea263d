#include "bench/scale_spool.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace ckpt::bench {
namespace {

constexpr size_t kWriteBytes = 8u << 20;

// Ends the simulation: the spool's files are the simulation's own, so any failure is a broken machine.
[[noreturn]] void Fail(const std::string& what, bool os_error = true) {
  Check(Internal("bench/scale spool: " + what + (os_error ? std::string(": ") + std::strerror(errno) : "")),
        "spooling messages");
  std::abort();
}

void WriteAll(int fd, const char* data, size_t size, uint64_t offset, const std::string& path) {
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail("cannot write " + path);
    done += static_cast<size_t>(n);
  }
}

void ReadAll(int fd, char* data, size_t size, uint64_t offset, const std::string& path) {
  for (size_t done = 0; done < size;) {
    const ssize_t n = pread(fd, data + done, size - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail("cannot read " + path);
    done += static_cast<size_t>(n);
  }
}

std::string ReadFile(const std::string& path) {
  const UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) Fail("cannot open " + path);
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  if (size < 0) Fail("cannot size " + path);
  std::string bytes(static_cast<size_t>(size), '\0');
  ReadAll(fd.get(), bytes.data(), bytes.size(), 0, path);
  return bytes;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  const UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) Fail("cannot create " + path);
  WriteAll(fd.get(), bytes.data(), bytes.size(), 0, path);
}

}  // namespace

Spool::Spool(std::string path, int ranks) : by_receiver_(ranks) {
  files_.emplace_back(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  paths_.push_back(std::move(path));
  if (!files_.front().valid()) Fail("cannot create " + paths_.front());
}

Spool::~Spool() {
  if (kept_) return;
  for (const std::string& path : paths_) unlink(path.c_str());
}

void Spool::Add(int from, int to, std::string_view message) {
  if (message.size() > std::numeric_limits<uint32_t>::max()) Fail("a message of 4 GiB or more", false);
  Index({end_ + pending_.size(), static_cast<uint32_t>(message.size()), from, to, 0});
  pending_.append(message);
  if (pending_.size() >= kWriteBytes) Flush();
}

void Spool::Index(const Entry& entry) { by_receiver_.at(entry.to).push_back(entry); }

void Spool::Flush() {
  WriteAll(files_.front().get(), pending_.data(), pending_.size(), end_, paths_.front());
  end_ += pending_.size();
  pending_.clear();
}

Messages Spool::Inbox(int to) {
  Flush();
  Messages messages;
  messages.reserve(by_receiver_.at(to).size());
  for (const Entry& entry : by_receiver_[to]) {
    std::string message(entry.size, '\0');
    ReadAll(files_[entry.file].get(), message.data(), message.size(), entry.offset, paths_[entry.file]);
    messages.emplace_back(entry.from, std::move(message));
  }
  return messages;
}

void Spool::CountInto(ControlBytes* bytes) const {
  for (const std::vector<Entry>& entries : by_receiver_) {
    for (const Entry& entry : entries) bytes->Message(entry.from, entry.to, entry.size);
  }
}

void Spool::Keep() {
  Flush();
  std::string index;
  for (const std::vector<Entry>& entries : by_receiver_) {
    index.append(reinterpret_cast<const char*>(entries.data()), entries.size() * sizeof(Entry));
  }
  WriteFile(paths_.front() + ".index", index);
  kept_ = true;
}

void Spool::Adopt(const std::string& path) {
  const std::string index = ReadFile(path + ".index");
  unlink((path + ".index").c_str());
  if (index.size() % sizeof(Entry) != 0) Fail("a torn index beside " + path, false);
  files_.emplace_back(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  paths_.push_back(path);
  if (!files_.back().valid()) Fail("cannot open " + path);
  for (size_t at = 0; at < index.size(); at += sizeof(Entry)) {
    Entry entry;
    std::memcpy(&entry, index.data() + at, sizeof(Entry));
    entry.file = static_cast<uint32_t>(files_.size() - 1);
    Index(entry);
  }
}

std::vector<RankResult> RunStep(int ranks, int workers, const std::function<RankResult(int rank, Spool& out)>& work,
                                Spool& into) {
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int w = 0; w < workers; ++w) {
    const pid_t pid = fork();
    if (pid < 0) Fail("cannot fork a worker");
    if (pid == 0) {
      Spool out(into.path() + ".worker-" + std::to_string(w), ranks);
      std::string results;
      for (int r = w; r < ranks; r += workers) {
        const RankResult result = work(r, out);
        results.append(reinterpret_cast<const char*>(&result), sizeof result);
      }
      out.Keep();
      WriteFile(out.path() + ".results", results);
      std::fflush(stdout);
      _exit(0);  // without the parent's destructors, which would remove its files
    }
    pids.push_back(pid);
  }
  bool failed = false;
  for (pid_t pid : pids) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = true;
  }
  if (failed) Fail("a worker failed", false);
  std::vector<RankResult> results(ranks);
  for (int w = 0; w < workers; ++w) {
    const std::string path = into.path() + ".worker-" + std::to_string(w);
    into.Adopt(path);
    const std::string bytes = ReadFile(path + ".results");
    unlink((path + ".results").c_str());
    size_t at = 0;
    for (int r = w; r < ranks; r += workers, at += sizeof(RankResult)) {
      if (at + sizeof(RankResult) > bytes.size()) Fail("worker " + std::to_string(w) + "'s results are short", false);
      std::memcpy(&results[r], bytes.data() + at, sizeof(RankResult));
    }
  }
  return results;
}

}  // namespace ckpt::bench
