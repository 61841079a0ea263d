// A file that the `ckpt` tool writes for its user (cat --npy), made as ckpt export makes its files: written under a
// temporary name beside it and given its name only once complete, without replacing anything. A symbolic link
// planted at the name is thus refused, never written through, and a failed write leaves nothing behind.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

namespace ckpt_cli {

class OutputFile {
 public:
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Removes the temporary file unless Publish gave it its name.
  ~OutputFile();

  // Creates the temporary file beside `path` (which need not exist yet), or says why it cannot in `*why`.
  static std::unique_ptr<OutputFile> Create(const std::string& path, std::string* why);

  std::FILE* stream() const { return stream_; }
  // Closes the file and renames it to its path; false, with `*why`, if writing failed or the path exists (a file,
  // a directory or a link).
  bool Publish(std::string* why);

 private:
  OutputFile(std::string path, std::string temporary, std::FILE* stream);

  std::string path_;
  std::string temporary_;
  std::FILE* stream_;
  bool published_ = false;
};

}  // namespace ckpt_cli
