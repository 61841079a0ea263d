#include "io/s3/shared_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

namespace ckpt::s3 {
namespace {

std::string_view Trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

bool IsIndented(std::string_view line) { return !line.empty() && (line[0] == ' ' || line[0] == '\t'); }

// Reads the lines one by one, remembering the section and the nested block they fall in.
class Parser {
 public:
  explicit Parser(const std::string& path) : path_(path) {}

  Status Line(int number, std::string_view raw) {
    std::string_view line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') return Status::Ok();
    std::string origin = path_ + ":" + std::to_string(number);
    if (line.front() == '[') {
      if (line.back() != ']' || Trim(line.substr(1, line.size() - 2)).empty()) {
        return InvalidArgument(origin + ": malformed section header " + Quoted(line));
      }
      section_ = &file_[std::string(Trim(line.substr(1, line.size() - 2)))];
      nested_.clear();
      return Status::Ok();
    }
    size_t equals = line.find('=');
    if (equals == std::string_view::npos || Trim(line.substr(0, equals)).empty()) {
      return InvalidArgument(origin + ": expected \"name = value\" or \"[section]\", found " + Quoted(line));
    }
    if (section_ == nullptr) return InvalidArgument(origin + ": " + Quoted(line) + " comes before any [section]");
    std::string name(Trim(line.substr(0, equals)));
    std::string value(Trim(line.substr(equals + 1)));
    if (!IsIndented(raw)) nested_.clear();
    if (!IsIndented(raw) && value.empty()) {
      nested_ = name;  // "s3 =": the indented lines after it belong to it
      return Status::Ok();
    }
    std::string full_name = IsIndented(raw) && !nested_.empty() ? nested_ + "." + name : name;
    (*section_)[full_name] = ProfileValue{value, origin};
    return Status::Ok();
  }

  SharedFile Take() { return std::move(file_); }

 private:
  const std::string& path_;
  SharedFile file_;
  Profile* section_ = nullptr;
  std::string nested_;
};

}  // namespace

Result<SharedFile> ParseSharedFile(const std::string& path, const std::string& text) {
  Parser parser(path);
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) RETURN_IF_ERROR(parser.Line(number, line));
  return parser.Take();
}

Result<SharedFile> ReadSharedFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return SharedFile{};
    return IoError("cannot read " + Quoted(path) + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseSharedFile(path, text.str());
}

}  // namespace ckpt::s3
