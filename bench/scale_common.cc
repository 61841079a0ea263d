#include "bench/scale_common.h"

#include <numeric>
#include <sstream>

namespace ckpt::bench {

void WriteMessages(const std::string& path, const std::vector<Messages>& lists) {
  ByteWriter out;
  out.U32(static_cast<uint32_t>(lists.size()));
  for (const Messages& messages : lists) {
    out.U32(static_cast<uint32_t>(messages.size()));
    for (const auto& [from, message] : messages) {
      out.I32(from);
      out.Bytes(message);
    }
  }
  std::ofstream(path, std::ios::binary) << out.data();
}

int RetimedBusiest(int ranks, const std::function<double(int)>& seconds, const std::function<void(int)>& retime) {
  std::vector<int> order(ranks);
  std::iota(order.begin(), order.end(), 0);
  const size_t candidates = std::min<size_t>(kRetimedRanks, order.size());
  std::partial_sort(order.begin(), order.begin() + candidates, order.end(),
                    [&](int a, int b) { return seconds(a) > seconds(b); });
  int busiest = order.front();
  for (size_t i = 0; i < candidates; ++i) {
    retime(order[i]);
    if (seconds(order[i]) > seconds(busiest)) busiest = order[i];
  }
  return busiest;
}

std::vector<Messages> ReadMessages(const std::string& path) {
  std::stringstream buffer;
  buffer << std::ifstream(path, std::ios::binary).rdbuf();
  const std::string bytes = buffer.str();
  ByteReader in(bytes, path);
  uint32_t lists = 0;
  Check(in.U32(&lists), "reading messages");
  std::vector<Messages> out(lists);
  for (Messages& messages : out) {
    uint32_t count = 0;
    Check(in.U32(&count), "reading messages");
    messages.resize(count);
    for (auto& [from, message] : messages) {
      Check(in.I32(&from), "reading messages");
      Check(in.Bytes(&message), "reading messages");
    }
  }
  return out;
}

}  // namespace ckpt::bench
