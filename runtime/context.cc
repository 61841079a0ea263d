#include "runtime/context.h"

#include <cstdio>

#include "collectives/solo_control_plane.h"
#include "collectives/tcp_store.h"
#include "common/settings.h"

namespace ckpt::runtime {
namespace {

LogSink StandardErrorSink(int rank) {
  const int max_level = static_cast<int>(settings::PositiveFromEnv(settings::kLogLevelVar, settings::kDefaultLogLevel));
  return [rank, max_level](LogLevel level, const std::string& message) {
    if (static_cast<int>(level) > max_level) return;
    static const char* const kNames[] = {"error", "warning", "info"};
    std::fprintf(stderr, "ckpt[rank %d] %s: %s\n", rank, kNames[static_cast<int>(level)], message.c_str());
  };
}

}  // namespace

Result<std::unique_ptr<Context>> Context::Create(ContextConfig config) {
  std::unique_ptr<Context> ctx(new Context());
  ASSIGN_OR_RETURN(ctx->identity_, coll::ResolveProcessIdentity(config.identity));
  ctx->timeout_ = config.timeout.count() > 0
                      ? config.timeout
                      : std::chrono::milliseconds(
                            settings::PositiveFromEnv(settings::kTimeoutVar, settings::kDefaultTimeoutMs));
  ctx->log_ = config.log ? std::move(config.log) : StandardErrorSink(ctx->identity_.rank);
  if (config.allgather) {
    ctx->control_ = coll::MakeCallbackControlPlane(ctx->rank(), ctx->world_size(), std::move(config.allgather));
  } else if (ctx->world_size() == 1) {
    ctx->control_ = coll::MakeSoloControlPlane();
  } else {
    coll::TcpStoreConfig store;
    store.rank = ctx->rank();
    store.world_size = ctx->world_size();
    store.host = ctx->identity_.store_host;
    store.port = ctx->identity_.store_port;
    store.timeout = ctx->timeout_;
    ASSIGN_OR_RETURN(ctx->control_, coll::TcpStore::Connect(store));
  }
  return ctx;
}

void Context::Log(LogLevel level, const std::string& message) const { log_(level, message); }

}  // namespace ckpt::runtime
