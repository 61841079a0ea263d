// SharedClient of s3_client.h: one client per process, made again when the environment it was resolved from
// changes.
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <string_view>
#include <vector>

#include "io/s3/s3_client.h"

extern char** environ;

namespace ckpt::s3 {
namespace {

// The AWS_* and CKPT_S3_* variables, sorted: what ResolveSettings reads from the environment.
std::string EnvironmentFingerprint() {
  std::vector<std::string_view> relevant;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view variable(*entry);
    if (variable.substr(0, 4) == "AWS_" || variable.substr(0, 8) == "CKPT_S3_" || variable.substr(0, 5) == "HOME=") {
      relevant.push_back(variable);
    }
  }
  std::sort(relevant.begin(), relevant.end());
  std::string fingerprint;
  for (std::string_view variable : relevant) fingerprint.append(variable).push_back('\0');
  return fingerprint;
}

}  // namespace

Result<Client*> SharedClient() {
  static std::mutex mutex;
  static std::string fingerprint;
  static Client* current = nullptr;
  // Clients replaced after an environment change stay alive: another thread may still be using its pointer.
  static std::vector<std::unique_ptr<Client>>* clients = new std::vector<std::unique_ptr<Client>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::string now = EnvironmentFingerprint();
  if (current != nullptr && now == fingerprint) return current;
  ASSIGN_OR_RETURN(Settings settings, ResolveSettings());
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(settings));
  current = client.get();
  clients->push_back(std::move(client));
  fingerprint = std::move(now);
  return current;
}

}  // namespace ckpt::s3
