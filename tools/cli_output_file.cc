// Files the `ckpt` tool writes for its user (tools/cli_output_file.h).
#include "tools/cli_output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "common/os_error.h"

// Not every libc declares RENAME_NOREPLACE; its value is part of the kernel ABI.
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

namespace ckpt_cli {
namespace {

// Gives `from` the name `to` unless `to` exists; errno says why not. Where the kernel or file system lacks
// RENAME_NOREPLACE, link() has the same guarantee (it never replaces, nor follows a link at `to`).
bool RenameNoReplace(const std::string& from, const std::string& to) {
  if (syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) return false;
  if (link(from.c_str(), to.c_str()) != 0) return false;
  unlink(from.c_str());
  return true;
}

// The mode an ordinary created file gets (0666 less the umask): mkstemp's is 0600.
mode_t CreatedFileMode() {
  const mode_t mask = umask(0);
  umask(mask);
  return 0666 & ~mask;
}

}  // namespace

OutputFile::OutputFile(std::string path, std::string temporary, std::FILE* stream)
    : path_(std::move(path)), temporary_(std::move(temporary)), stream_(stream) {}

OutputFile::~OutputFile() {
  if (stream_ != nullptr) std::fclose(stream_);
  if (!published_) unlink(temporary_.c_str());
}

std::unique_ptr<OutputFile> OutputFile::Create(const std::string& path, std::string* why) {
  const size_t slash = path.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  // mkostemp creates with O_EXCL: never through a link, never an existing file.
  std::string pattern = directory + "." + name + ".tmp-XXXXXX";
  std::vector<char> temporary(pattern.begin(), pattern.end());
  temporary.push_back('\0');
  const int fd = mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot create a file beside " + path + ": " + ckpt::OsErrorText(errno);
    return nullptr;
  }
  std::FILE* stream = fchmod(fd, CreatedFileMode()) == 0 ? fdopen(fd, "wb") : nullptr;
  if (stream == nullptr) {
    *why = "cannot write " + std::string(temporary.data()) + ": " + ckpt::OsErrorText(errno);
    close(fd);
    unlink(temporary.data());
    return nullptr;
  }
  return std::unique_ptr<OutputFile>(new OutputFile(path, temporary.data(), stream));
}

bool OutputFile::Publish(std::string* why) {
  const bool flushed = std::fflush(stream_) == 0;
  const int flush_error = errno;
  const bool closed = std::fclose(stream_) == 0;
  stream_ = nullptr;
  if (!flushed || !closed) {
    *why = "writing " + path_ + " failed: " + ckpt::OsErrorText(flushed ? errno : flush_error);
    return false;
  }
  if (!RenameNoReplace(temporary_, path_)) {
    *why = errno == EEXIST ? path_ + " exists (a file, a directory or a link): ckpt writes only new files"
                           : "cannot create " + path_ + ": " + ckpt::OsErrorText(errno);
    return false;
  }
  published_ = true;
  return true;
}

}  // namespace ckpt_cli
