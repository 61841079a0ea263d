// Exits through LeakSanitizer's check while two threads hold heap memory only through a dlopened library's
// thread-locals. Passes when LeakSanitizer finds that memory reachable and reports nothing; with the argument
// `leak` it also drops a heap block, which LeakSanitizer must still report (the test expects the report).
// Usage: asan_dlopened_thread_locals LIBRARY [leak]
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIBRARY [leak]\n", argv[0]);
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  auto fill = reinterpret_cast<void (*)()>(dlsym(library, "FillThreadLocal"));
  if (fill == nullptr) {
    std::fprintf(stderr, "dlsym FillThreadLocal: %s\n", dlerror());
    return 2;
  }
  fill();
  // A thread still alive at exit, as ckpt's progress and stream threads may be: its thread-local block is scanned.
  std::thread([fill] {
    fill();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (argc > 2 && std::strcmp(argv[2], "leak") == 0) {
    volatile char* dropped = new char[64];
    dropped[0] = 1;
    dropped = nullptr;
  }
  return 0;
}
