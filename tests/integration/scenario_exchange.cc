// Ranks exchanging what they read, and ranks failing to join, run on N ranks by ckpt-launch from
// tests/integration/run.sh. Each mode checks what every rank sees through the public C API and exits non-zero,
// saying why, if a behaviour is broken. Usage: ckpt_scenario_exchange MODE ARGS...
//
//   load-replicated DIR         every rank loads save-replicated's state (ckpt_scenario_core): even ranks all of
//                               "big" (received in place), odd ranks its left column half (received into a
//                               buffer, then scattered into rows); prints bytes read
//   load-replicated-expect-failure DIR   the same with a rank dying (CKPT_FAULT_EXIT_BEFORE_EXCHANGE) or stopping
//                               (CKPT_FAULT_STOP_BEFORE_EXCHANGE): every other rank must fail with
//                               CKPT_E_PEER_FAILED or CKPT_E_TIMEOUT, within 1.5 x CKPT_TIMEOUT_MS + 2 s
//   context-fails CODE TEXT     creating the context must fail with CODE on this rank, naming TEXT
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

// Every rank asks for everything save-replicated stored, checks it, and prints what it read and exchanged.
int LoadReplicated(const char* dir, bool expect_failure) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  const uint64_t big_cols = s.rank % 2 == 0 ? kBigCols : kBigCols / 2;
  auto& big = buffers.New(kBigRows * big_cols);
  AddShard(s, state, "big", {kBigRows, kBigCols}, {kBigRows, big_cols}, {0, 0}, big);
  for (int i = 0; i < 8; ++i) {
    const uint64_t n = 1000 * (i + 1);
    auto& small = buffers.New(n);
    const std::string key = "small." + std::to_string(i);
    AddShard(s, state, key.c_str(), {n}, {n}, {0}, small);
  }
  const auto start = std::chrono::steady_clock::now();
  const int32_t status = ckpt_load(s.ctx, state, dir, nullptr, s.err);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (expect_failure) {
    if (status != CKPT_E_PEER_FAILED && status != CKPT_E_TIMEOUT) {
      Die(s.rank,
          std::string("expected a peer failure, got ") + ckpt_status_string(status) + ": " + ckpt_error_message(s.err));
    }
    // One stall costs one timeout, plus the transport's 2 s to cancel and the agreement's quarter of the timeout,
    // never one timeout per wait (the exchange's, then the agreement's: twice the timeout).
    const char* timeout_ms = std::getenv("CKPT_TIMEOUT_MS");
    const double bound = timeout_ms != nullptr ? 1.5 * std::atof(timeout_ms) / 1000.0 + 2.0 : 0.0;
    if (timeout_ms != nullptr && waited > bound) {
      Die(s.rank, "failed after " + std::to_string(waited) + " s, more than " + std::to_string(bound) + " s");
    }
    std::printf("rank %d: peer failed in the exchange, reported after %.1f s: %s\n", s.rank, waited,
                ckpt_error_message(s.err));
    if (s.rank == 0) std::printf("peer died in the exchange: %s\n", ckpt_error_message(s.err));
    ckpt_state_free(state);
    return 0;
  }
  s.Check(status, "load");
  for (uint64_t r = 0; r < kBigRows; ++r) {
    for (uint64_t c = 0; c < big_cols; ++c) {
      if (buffers.floats[0][r * big_cols + c] != ValueAt(4, r * kBigCols + c)) {
        Die(s.rank, "big[" + std::to_string(r) + ", " + std::to_string(c) + "] holds a wrong value");
      }
    }
  }
  for (int i = 0; i < 8; ++i) CheckRows(s, "small", 10 + i, buffers.floats[1 + i], 0);
  const ckpt_context_stats stats = Stats(s);
  std::printf("rank %d transport %d bytes_read %llu bytes_sent %llu bytes_received %llu\n", s.rank, stats.transport,
              (unsigned long long)stats.bytes_read, (unsigned long long)stats.bytes_sent,
              (unsigned long long)stats.bytes_received);
  ckpt_state_free(state);
  return 0;
}

int ContextFails(int32_t expected, const char* text) {
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.timeout_ms = 20000;
  ckpt_context_t* ctx = nullptr;
  const int32_t status = ckpt_context_create(&opts, &ctx, err);
  const std::string message = ckpt_error_message(err);
  if (status != expected || message.find(text) == std::string::npos) {
    Die(-1, "context creation: expected status " + std::to_string(expected) + " naming '" + text + "', got " +
                ckpt_status_string(status) + ": " + message);
  }
  std::printf("context refused as expected: %s\n", message.c_str());
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return 0;
}

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: ckpt_scenario_exchange MODE ARGS... (see the comment at the top of scenario_exchange.cc)\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "load-replicated") return LoadReplicated(argv[2], false);
  if (mode == "load-replicated-expect-failure") return LoadReplicated(argv[2], true);
  if (mode == "context-fails" && argc == 4) return ContextFails(std::atoi(argv[2]), argv[3]);
  std::fprintf(stderr, "ckpt_scenario_exchange: unknown mode or wrong arguments: %s\n", mode.c_str());
  return 2;
}
