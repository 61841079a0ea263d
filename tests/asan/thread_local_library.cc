// A library with a thread-local that owns heap memory, loaded with dlopen as ckpt loads libcudart, NCCL and UCX:
// its thread-local block is dynamic TLS, which LeakSanitizer must scan to see the memory as reachable.
#include <string>

namespace {
thread_local std::string t_text;
}

extern "C" __attribute__((visibility("default"))) void FillThreadLocal() { t_text.assign(200, 'x'); }
