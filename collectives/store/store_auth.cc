#include "collectives/store/store_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>

#include "common/os_error.h"

namespace ckpt::coll::store_auth {
namespace {

// Distinct labels keep a client's proof from ever being accepted as a server's, or the reverse.
constexpr std::string_view kHelloLabel = "ckpt store hello v2";
constexpr std::string_view kWelcomeLabel = "ckpt store welcome v2";

std::string Hmac(std::string_view secret, std::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // HMAC() fails only for an unknown digest or an allocation failure; an empty proof then matches nothing.
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length) == nullptr) {
    return std::string();
  }
  return std::string(reinterpret_cast<const char*>(digest), length);
}

}  // namespace

Result<std::string> RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t filled = 0;
  while (filled < n) {
    const ssize_t got = getrandom(bytes.data() + filled, n - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return OsError("getrandom failed", errno);
    }
    filled += static_cast<size_t>(got);
  }
  return bytes;
}

Result<std::string> NewSecret() {
  ASSIGN_OR_RETURN(std::string random, RandomBytes(32));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret;
  for (unsigned char byte : random) {
    secret += kHex[byte >> 4];
    secret += kHex[byte & 15];
  }
  return secret;
}

Status ValidateSecret(std::string_view secret, std::string_view origin) {
  if (secret.size() < kMinSecretBytes) {
    return InvalidArgument(std::string(origin) + " has " + std::to_string(secret.size()) +
                           " bytes; a job secret needs at least " + std::to_string(kMinSecretBytes) +
                           " (for example 32 random hex digits)");
  }
  return Status::Ok();
}

std::string HelloProof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce,
                       std::string_view hello_fields) {
  std::string message(kHelloLabel);
  message.append(server_nonce).append(client_nonce).append(hello_fields);
  return Hmac(secret, message);
}

std::string WelcomeProof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce) {
  std::string message(kWelcomeLabel);
  message.append(server_nonce).append(client_nonce);
  return Hmac(secret, message);
}

std::string MessageProof(std::string_view secret, std::string_view label, std::string_view fields) {
  std::string message(label);
  message.append(fields);
  return Hmac(secret, message);
}

bool ProofsMatch(std::string_view expected, std::string_view got) {
  return expected.size() == kProofBytes && got.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), got.data(), expected.size()) == 0;
}

}  // namespace ckpt::coll::store_auth
