// ResolveSettings of s3_client.h: the AWS conventions (environment, then the shared files of the profile), plus
// ckpt's own CKPT_S3_* variables. Every setting read from the environment is read here.
#include <cstdlib>
#include <optional>
#include <string>

#include "io/s3/s3_client.h"
#include "io/s3/shared_config.h"

namespace ckpt::s3 {
namespace {

constexpr uint64_t kMinPartBytes = 5ull << 20;
constexpr uint64_t kMaxPartBytes = 5ull << 30;

std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// A whole decimal number in [min, max], or kInvalidArgument naming `origin` (a variable or file:line).
Result<uint64_t> ParseBounded(const std::string& origin, const std::string& text, uint64_t min, uint64_t max) {
  uint64_t value = 0;
  bool digits = !text.empty() && text.size() <= 19;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (digits) value = std::stoull(text);
  if (!digits || value < min || value > max) {
    return InvalidArgument(origin + "=" + Quoted(text) + " is not a number from " + std::to_string(min) + " to " +
                           std::to_string(max));
  }
  return value;
}

template <typename Apply>
Status ApplyNumber(const char* variable, uint64_t min, uint64_t max, Apply apply) {
  std::optional<std::string> text = Env(variable);
  if (!text) return Status::Ok();
  ASSIGN_OR_RETURN(uint64_t value, ParseBounded(variable, *text, min, max));
  apply(value);
  return Status::Ok();
}

Result<Addressing> ParseAddressing(const std::string& origin, const std::string& text) {
  if (text == "path") return Addressing::kPath;
  if (text == "virtual") return Addressing::kVirtualHosted;
  if (text == "auto") return Addressing::kAuto;
  return InvalidArgument(origin + ": addressing style " + Quoted(text) + " is none of path, virtual, auto");
}

Result<std::string> CheckedEndpoint(const std::string& origin, std::string endpoint) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  bool has_scheme = endpoint.rfind("http://", 0) == 0 || endpoint.rfind("https://", 0) == 0;
  size_t authority = endpoint.find("://") + 3;
  if (!has_scheme || endpoint.size() == authority || endpoint.find('/', authority) != std::string::npos) {
    return InvalidArgument(origin + ": endpoint " + Quoted(endpoint) +
                           " is not of the form http(s)://host[:port] (no path)");
  }
  return endpoint;
}

std::string HomeFile(const char* variable, const char* below_home) {
  if (std::optional<std::string> path = Env(variable)) return *path;
  std::optional<std::string> home = Env("HOME");
  return home ? *home + "/" + below_home : std::string();
}

// The profile's values from both files: the credentials file's [NAME] over the config file's [profile NAME]
// ([default] in both for "default").
struct ProfileFiles {
  Profile values;
  bool found = false;
  std::string credentials_path, config_path;
};

Result<ProfileFiles> ReadProfile(const std::string& name) {
  ProfileFiles profile;
  profile.credentials_path = HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  profile.config_path = HomeFile("AWS_CONFIG_FILE", ".aws/config");
  if (!profile.config_path.empty()) {
    ASSIGN_OR_RETURN(SharedFile config, ReadSharedFile(profile.config_path));
    auto section = config.find(name == "default" ? name : "profile " + name);
    if (section != config.end()) {
      profile.values = section->second;
      profile.found = true;
    }
  }
  if (!profile.credentials_path.empty()) {
    ASSIGN_OR_RETURN(SharedFile credentials, ReadSharedFile(profile.credentials_path));
    auto section = credentials.find(name);
    if (section != credentials.end()) {
      for (auto& [key, value] : section->second) profile.values[key] = value;
      profile.found = true;
    }
  }
  return profile;
}

const ProfileValue* Find(const Profile& profile, const std::string& name) {
  auto it = profile.find(name);
  return it == profile.end() || it->second.value.empty() ? nullptr : &it->second;
}

Status ResolveCredentials(const std::string& profile_name, const ProfileFiles& files, Settings* settings) {
  std::optional<std::string> key = Env("AWS_ACCESS_KEY_ID"), secret = Env("AWS_SECRET_ACCESS_KEY");
  if (key.has_value() != secret.has_value()) {
    return InvalidArgument(std::string(key ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") + " is set but " +
                           (key ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") + " is not");
  }
  if (key) {
    settings->access_key_id = *key;
    settings->secret_access_key = *secret;
    settings->session_token = Env("AWS_SESSION_TOKEN").value_or("");
    return Status::Ok();
  }
  const ProfileValue* file_key = Find(files.values, "aws_access_key_id");
  const ProfileValue* file_secret = Find(files.values, "aws_secret_access_key");
  if (file_key == nullptr || file_secret == nullptr) {
    std::string where = files.found ? "profile " + Quoted(profile_name) + " has no " +
                                          (file_key ? "aws_secret_access_key" : "aws_access_key_id")
                                    : "profile " + Quoted(profile_name) + " is in neither " +
                                          Quoted(files.credentials_path) + " nor " + Quoted(files.config_path);
    return InvalidArgument("no S3 credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set and " + where);
  }
  settings->access_key_id = file_key->value;
  settings->secret_access_key = file_secret->value;
  if (const ProfileValue* token = Find(files.values, "aws_session_token")) settings->session_token = token->value;
  settings->profile = profile_name;
  return Status::Ok();
}

Status ResolveWhere(const ProfileFiles& files, Settings* settings) {
  if (std::optional<std::string> region = Env("AWS_REGION") ? Env("AWS_REGION") : Env("AWS_DEFAULT_REGION")) {
    settings->region = *region;
  } else if (const ProfileValue* value = Find(files.values, "region")) {
    settings->region = value->value;
  }
  const char* endpoint_variable = Env("AWS_ENDPOINT_URL_S3") ? "AWS_ENDPOINT_URL_S3"
                                  : Env("AWS_ENDPOINT_URL")  ? "AWS_ENDPOINT_URL"
                                                             : nullptr;
  const ProfileValue* profile_endpoint = Find(files.values, "s3.endpoint_url");
  if (profile_endpoint == nullptr) profile_endpoint = Find(files.values, "endpoint_url");
  if (endpoint_variable != nullptr) {
    ASSIGN_OR_RETURN(settings->endpoint, CheckedEndpoint(endpoint_variable, *Env(endpoint_variable)));
  } else if (profile_endpoint != nullptr) {
    ASSIGN_OR_RETURN(settings->endpoint, CheckedEndpoint(profile_endpoint->origin, profile_endpoint->value));
  } else {
    settings->endpoint = "https://s3." + settings->region + ".amazonaws.com";
  }
  if (std::optional<std::string> style = Env("CKPT_S3_ADDRESSING")) {
    ASSIGN_OR_RETURN(settings->addressing, ParseAddressing("CKPT_S3_ADDRESSING", *style));
  } else if (const ProfileValue* value = Find(files.values, "s3.addressing_style")) {
    ASSIGN_OR_RETURN(settings->addressing, ParseAddressing(value->origin, value->value));
  }
  settings->ca_bundle = Env("AWS_CA_BUNDLE").value_or("");
  return Status::Ok();
}

Status ResolveTuning(Settings* settings) {
  RETURN_IF_ERROR(ApplyNumber("AWS_MAX_ATTEMPTS", 1, 100, [&](uint64_t v) { settings->max_attempts = v; }));
  RETURN_IF_ERROR(ApplyNumber("CKPT_S3_CONNECTIONS", 1, 1024, [&](uint64_t v) { settings->connections = v; }));
  RETURN_IF_ERROR(
      ApplyNumber("CKPT_S3_PART_BYTES", kMinPartBytes, kMaxPartBytes, [&](uint64_t v) { settings->part_bytes = v; }));
  RETURN_IF_ERROR(ApplyNumber("CKPT_S3_STALL_MS", 1000, 3600000,
                              [&](uint64_t v) { settings->stall_timeout = std::chrono::milliseconds(v); }));
  return Status::Ok();
}

}  // namespace

Result<Settings> ResolveSettings() {
  Settings settings;
  std::string profile_name = Env("AWS_PROFILE").value_or("default");
  ASSIGN_OR_RETURN(ProfileFiles files, ReadProfile(profile_name));
  if (Env("AWS_PROFILE") && !files.found) {
    return InvalidArgument("AWS_PROFILE=" + Quoted(profile_name) + " names a profile in neither " +
                           Quoted(files.credentials_path) + " nor " + Quoted(files.config_path));
  }
  RETURN_IF_ERROR(ResolveCredentials(profile_name, files, &settings));
  RETURN_IF_ERROR(ResolveWhere(files, &settings));
  RETURN_IF_ERROR(ResolveTuning(&settings));
  return settings;
}

}  // namespace ckpt::s3
