// The TCP store's handshake messages, for both ends (collectives/store/tcp_store_wire.h has the frames, store_auth.h
// the proofs): the server's challenge, the client's hello, the server's welcome. Magic and version are checked before
// anything else is read: another version may lay the rest out differently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ckpt::coll::store_handshake {

std::string EncodeChallenge(std::string_view server_nonce);
// The server's nonce; kInvalidArgument for what is not a ckpt store, kVersion for another protocol version.
Result<std::string> DecodeChallenge(std::string_view payload, const std::string& server_address);

struct Hello {
  int32_t rank = 0;
  int32_t world_size = 0;
  uint64_t timeout_ms = 0;
  bool auxiliary = false;
  // A store relay's connection to rank 0 (collectives/store/store_relay.h), and where it listens for its row.
  bool relay = false;
  std::string relay_host;
  int32_t relay_port = 0;
  std::string client_nonce;
  std::string proof;
};

// A hello whose proof answers `server_nonce` with `secret`.
std::string EncodeHello(Hello hello, std::string_view secret, std::string_view server_nonce);
// Whether `payload` is a well-formed hello whose proof answers `server_nonce` with `secret`: the hello, or why not
// (kInvalidArgument naming the rank it claimed when the proof is wrong).
Result<Hello> DecodeAuthenticHello(std::string_view payload, std::string_view secret, std::string_view server_nonce);

// The server's answer to an authentic hello: its own proof, over the client's nonce.
std::string EncodeWelcome(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce);
// kInvalidArgument unless `payload` proves that the server knows `secret`.
Status CheckWelcome(std::string_view payload, std::string_view secret, std::string_view server_nonce,
                    std::string_view client_nonce, const std::string& server_address);

// Where a rank reaches rank 0's store instead of connecting to it: its row's relay, or (host empty) itself, as the
// relay it must start. Signed over both nonces, so that nobody but the job's store can send a rank elsewhere.
struct Redirect {
  uint32_t columns = 0;  // the length of the rows whose ranks share one relay (store_relay.h)
  std::string host;
  int32_t port = 0;
};
std::string EncodeRedirect(const Redirect& redirect, std::string_view secret, std::string_view server_nonce,
                           std::string_view client_nonce);
// The redirect, or kInvalidArgument unless its proof answers the nonces with `secret`.
Result<Redirect> DecodeRedirect(std::string_view payload, std::string_view secret, std::string_view server_nonce,
                                std::string_view client_nonce, const std::string& server_address);

}  // namespace ckpt::coll::store_handshake
