// ckpt-io-worker: placeholder entry point until the worker pool lands; exits with a usage error.
#include <cstdio>

int main() {
  std::fprintf(stderr, "ckpt-io-worker: started without the pool protocol\n");
  return 2;
}
