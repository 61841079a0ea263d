#include "collectives/store/store_handshake.h"

#include "collectives/store/store_auth.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"

namespace ckpt::coll::store_handshake {
namespace {

constexpr uint8_t kRoleRank = 0;
constexpr uint8_t kRoleAuxiliary = 1;
constexpr uint8_t kRoleRelay = 2;
constexpr char kRedirectLabel[] = "ckpt store redirect v4";

std::string RedirectFields(const Redirect& redirect) {
  ByteWriter out;
  out.U32(redirect.columns);
  out.Bytes(redirect.host);
  out.I32(redirect.port);
  return out.Take();
}

std::string RedirectProof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce,
                          std::string_view fields) {
  std::string signed_bytes(server_nonce);
  signed_bytes.append(client_nonce).append(fields);
  return store_auth::MessageProof(secret, kRedirectLabel, signed_bytes);
}

}  // namespace

std::string EncodeChallenge(std::string_view server_nonce) {
  ByteWriter out;
  out.U32(store_wire::kMagic);
  out.U32(store_wire::kVersion);
  out.Bytes(server_nonce);
  return out.Take();
}

Result<std::string> DecodeChallenge(std::string_view payload, const std::string& server_address) {
  ByteReader reader(payload, "the store's challenge");
  uint32_t magic = 0, version = 0;
  RETURN_IF_ERROR(reader.U32(&magic));
  if (magic != store_wire::kMagic) return InvalidArgument("the server at " + server_address + " is not a ckpt store");
  RETURN_IF_ERROR(reader.U32(&version));
  if (version != store_wire::kVersion) {
    return VersionError("the store on rank 0 speaks store protocol version " + std::to_string(version) +
                        ", this rank speaks " + std::to_string(store_wire::kVersion));
  }
  std::string nonce;
  RETURN_IF_ERROR(reader.Bytes(&nonce));
  RETURN_IF_ERROR(reader.ExpectDone());
  if (nonce.size() != store_auth::kNonceBytes) return Corrupt("the store's challenge has a bad nonce");
  return nonce;
}

std::string EncodeHello(Hello hello, std::string_view secret, std::string_view server_nonce) {
  ByteWriter out;
  out.U32(store_wire::kMagic);
  out.U32(store_wire::kVersion);
  out.I32(hello.rank);
  out.I32(hello.world_size);
  out.U64(hello.timeout_ms);
  out.U8(hello.relay ? kRoleRelay : hello.auxiliary ? kRoleAuxiliary : kRoleRank);
  if (hello.relay) {
    out.Bytes(hello.relay_host);
    out.I32(hello.relay_port);
  }
  out.Bytes(hello.client_nonce);
  // The proof covers every field before it, so that none can be altered in flight.
  out.Bytes(store_auth::HelloProof(secret, server_nonce, hello.client_nonce, out.data()));
  return out.Take();
}

Result<Hello> DecodeAuthenticHello(std::string_view payload, std::string_view secret, std::string_view server_nonce) {
  ByteReader reader(payload, "store hello");
  uint32_t magic = 0, version = 0;
  RETURN_IF_ERROR(reader.U32(&magic));
  if (magic != store_wire::kMagic) return InvalidArgument("not a ckpt store client (bad magic)");
  RETURN_IF_ERROR(reader.U32(&version));
  if (version != store_wire::kVersion) {
    return VersionError("the client speaks store protocol version " + std::to_string(version) +
                        ", the store on rank 0 speaks " + std::to_string(store_wire::kVersion));
  }
  Hello hello;
  uint8_t role = 0;
  RETURN_IF_ERROR(reader.I32(&hello.rank));
  RETURN_IF_ERROR(reader.I32(&hello.world_size));
  RETURN_IF_ERROR(reader.U64(&hello.timeout_ms));
  RETURN_IF_ERROR(reader.U8(&role));
  if (role > kRoleRelay) return InvalidArgument("store hello: unknown role " + std::to_string(role));
  if (role == kRoleRelay) {
    RETURN_IF_ERROR(reader.Bytes(&hello.relay_host));
    RETURN_IF_ERROR(reader.I32(&hello.relay_port));
    if (hello.relay_host.empty() || hello.relay_port < 1 || hello.relay_port > 65535) {
      return InvalidArgument("store hello: a relay at an invalid address");
    }
  }
  RETURN_IF_ERROR(reader.Bytes(&hello.client_nonce));
  const std::string_view signed_fields = payload.substr(0, reader.position());
  RETURN_IF_ERROR(reader.Bytes(&hello.proof));
  RETURN_IF_ERROR(reader.ExpectDone());
  if (hello.client_nonce.size() != store_auth::kNonceBytes) return InvalidArgument("store hello: bad nonce");
  hello.auxiliary = role == kRoleAuxiliary;
  hello.relay = role == kRoleRelay;
  const std::string expected = store_auth::HelloProof(secret, server_nonce, hello.client_nonce, signed_fields);
  if (!store_auth::ProofsMatch(expected, hello.proof)) {
    return InvalidArgument("refused a connection that claimed to be rank " + std::to_string(hello.rank) +
                           " but does not know the job's secret (CKPT_JOB_SECRET differs between ranks, or this is "
                           "another job's store)");
  }
  return hello;
}

std::string EncodeWelcome(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce) {
  ByteWriter out;
  out.Bytes(store_auth::WelcomeProof(secret, server_nonce, client_nonce));
  return out.Take();
}

Status CheckWelcome(std::string_view payload, std::string_view secret, std::string_view server_nonce,
                    std::string_view client_nonce, const std::string& server_address) {
  ByteReader reader(payload, "the store's welcome");
  std::string proof;
  RETURN_IF_ERROR(reader.Bytes(&proof));
  RETURN_IF_ERROR(reader.ExpectDone());
  if (!store_auth::ProofsMatch(store_auth::WelcomeProof(secret, server_nonce, client_nonce), proof)) {
    return InvalidArgument("the store at " + server_address +
                           " does not know the job's secret: it is not this job's store");
  }
  return Status::Ok();
}

std::string EncodeRedirect(const Redirect& redirect, std::string_view secret, std::string_view server_nonce,
                           std::string_view client_nonce) {
  const std::string fields = RedirectFields(redirect);
  ByteWriter out;
  out.Bytes(RedirectProof(secret, server_nonce, client_nonce, fields));
  return out.Take() + fields;
}

Result<Redirect> DecodeRedirect(std::string_view payload, std::string_view secret, std::string_view server_nonce,
                                std::string_view client_nonce, const std::string& server_address) {
  ByteReader reader(payload, "the store's redirect");
  std::string proof;
  Redirect redirect;
  RETURN_IF_ERROR(reader.Bytes(&proof));
  const size_t fields_start = reader.position();
  RETURN_IF_ERROR(reader.U32(&redirect.columns));
  RETURN_IF_ERROR(reader.Bytes(&redirect.host));
  RETURN_IF_ERROR(reader.I32(&redirect.port));
  RETURN_IF_ERROR(reader.ExpectDone());
  const std::string_view fields = payload.substr(fields_start);
  if (!store_auth::ProofsMatch(RedirectProof(secret, server_nonce, client_nonce, fields), proof)) {
    return InvalidArgument("the store at " + server_address +
                           " sent this rank elsewhere without knowing the job's secret: it is not this job's store");
  }
  if (redirect.columns < 2 || (!redirect.host.empty() && (redirect.port < 1 || redirect.port > 65535))) {
    return Corrupt("the store at " + server_address + " sent this rank to an invalid relay");
  }
  return redirect;
}

}  // namespace ckpt::coll::store_handshake
