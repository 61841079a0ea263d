// Mutual authentication of the TCP store's connections with the job's secret. The server opens every connection with a
// challenge (a fresh nonce); the client answers with its hello, its own nonce and an HMAC-SHA256 over both nonces and
// the hello's fields; the server's welcome carries an HMAC over both nonces in the other direction. The secret never
// crosses the network, a recorded exchange cannot be replayed (the nonces are fresh), and a client learns that the
// server it talks to is the job's own before it sends anything else.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ckpt::coll::store_auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256
// A secret shorter than this is refused: it could be guessed by anyone able to connect.
inline constexpr size_t kMinSecretBytes = 16;

// `n` bytes from the kernel's random generator.
Result<std::string> RandomBytes(size_t n);

// A new secret for a job: random, printable (so that it can also travel in an environment variable).
Result<std::string> NewSecret();

// kInvalidArgument naming `origin` if `secret` is too short to authenticate anything.
Status ValidateSecret(std::string_view secret, std::string_view origin);

// The client's proof: over both nonces and the hello's own fields, so that none of them can be altered in flight.
std::string HelloProof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce,
                       std::string_view hello_fields);
// The server's proof, answering the client's nonce.
std::string WelcomeProof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce);

// A proof over `fields` of a message that is no handshake (the agents' replication messages): `label` names the kind
// of message, so that a proof of one kind is never accepted for another.
std::string MessageProof(std::string_view secret, std::string_view label, std::string_view fields);

// Constant-time comparison, so that timing does not reveal how much of a forged proof was right.
bool ProofsMatch(std::string_view expected, std::string_view got);

}  // namespace ckpt::coll::store_auth
