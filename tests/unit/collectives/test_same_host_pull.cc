// Same-host pull (collectives/transport/same_host_pull.h): a process is found by its description only where its
// published value reads back, and a pull hands over the peer's bytes only while the peer's check word still vouches for
// them.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/transport/same_host_pull.h"

namespace ckpt::coll {
namespace {

// This test process as a prober; its host and namespaces never change while the tests run.
const PullableProcess& Self() {
  static const PullableProcess self = [] {
    Result<PullableProcess> process = PullableProcess::Create();
    if (!process.ok()) throw std::runtime_error(process.status().message());
    return std::move(process).value();
  }();
  return self;
}

pid_t ProbePullSource(std::string_view description) { return Self().Probe(description); }

// A child process that publishes its description, then serves commands until the test lets it go. Its buffer and
// check word lie where the parent's copies do (fork): the test pulls from it, and makes it zero its check word.
class PullableChild {
 public:
  // `own_network`: the child moves to a network namespace of its own before it describes itself.
  explicit PullableChild(bool own_network = false) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("pipe failed");
    bytes_.assign(1 << 20, 0);
    for (size_t i = 0; i < bytes_.size(); ++i) bytes_[i] = static_cast<char>(i * 131 + 7);
    check_ = 0x5eed5eed5eed5eedULL;
    pid_ = fork();
    if (pid_ == 0) {
      close(to_child[1]);
      close(from_child[0]);
      Result<PullableProcess> process =
          own_network && unshare(CLONE_NEWNET) != 0 ? Internal("unshare failed") : PullableProcess::Create();
      const std::string mine = process.ok() ? process.value().description() : "";
      (void)!write(from_child[1], mine.data(), mine.size());
      char command = 0;
      while (read(to_child[0], &command, 1) == 1) {
        static_cast<volatile uint64_t&>(check_) = 0;  // the one command: withdraw
        (void)!write(from_child[1], "k", 1);
      }
      _exit(0);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
    char buffer[512];  // one write of less than PIPE_BUF arrives whole; none at all if the child failed
    const ssize_t got = read(from_child_, buffer, sizeof buffer);
    child_description_ = got > 0 ? std::string(buffer, static_cast<size_t>(got)) : "";
  }
  ~PullableChild() {
    Exit();
    close(from_child_);
  }

  // Makes the child zero its check word, and returns once it has.
  void Withdraw() {
    char done = 0;
    ASSERT_EQ(write(to_child_, "w", 1), 1);
    ASSERT_EQ(read(from_child_, &done, 1), 1);
  }
  // Lets the child exit, and reaps it.
  void Exit() {
    if (pid_ <= 0) return;
    close(to_child_);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  pid_t pid() const { return pid_; }
  const std::string& description() const { return child_description_; }
  PullDescriptor Descriptor() const {
    return PullDescriptor{reinterpret_cast<uintptr_t>(bytes_.data()), bytes_.size(),
                          reinterpret_cast<uintptr_t>(&check_), check_};
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  std::string child_description_;
  std::vector<char> bytes_;
  uint64_t check_ = 0;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

TEST(SameHostPullTest, AProcessOnThisHostIsFoundByItsDescription) {
  PullableChild child;
  ASSERT_FALSE(child.description().empty());
  EXPECT_EQ(ProbePullSource(child.description()), child.pid());
}

TEST(SameHostPullTest, ThisProcessIsFoundByItsOwnDescription) {
  Result<PullableProcess> process = PullableProcess::Create();
  ASSERT_TRUE(process.ok()) << process.status().message();
  EXPECT_EQ(process.value().Probe(process.value().description()), getpid());
}

TEST(SameHostPullTest, AWrongValueAnotherHostOrGarbageFindsNothing) {
  PullableChild child;
  const std::string& text = child.description();
  const size_t last = text.rfind(' ');
  const std::string value = text.substr(last + 1);
  const std::string wrong_value = text.substr(0, last + 1) + (value == "1" ? "2" : "1");
  EXPECT_EQ(ProbePullSource(wrong_value), 0);
  EXPECT_EQ(ProbePullSource("another-boot-id/1:2" + text.substr(text.find(' '))), 0);
  EXPECT_EQ(ProbePullSource(""), 0);
  EXPECT_EQ(ProbePullSource("host"), 0);
  EXPECT_EQ(ProbePullSource(text.substr(0, text.find(' ')) + " -5 0 0"), 0);
}

// Ranks that see different networks keep to the network, as ranks of different machines do: that is what hosts
// simulated with network namespaces test.
TEST(SameHostPullTest, AProcessInAnotherNetworkNamespaceIsNotPulledFrom) {
  PullableChild child(/*own_network=*/true);
  ASSERT_FALSE(child.description().empty()) << "the child could not enter a network namespace of its own (root?)";
  EXPECT_EQ(ProbePullSource(child.description()), 0);
}

TEST(SameHostPullTest, APullCopiesThePeersBytes) {
  PullableChild child;
  const pid_t pid = ProbePullSource(child.description());
  ASSERT_EQ(pid, child.pid());
  std::vector<char> received(child.bytes().size());
  const Status status = PullFrom(pid, child.Descriptor(), {MemoryRun{received.data(), received.size()}}, "rank 1");
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(received, child.bytes());
}

// A pull scattered over more runs than one process_vm_readv takes (IOV_MAX), of uneven sizes (some empty), each
// with a gap after it: the runs hold the peer's bytes in order, and the gaps are untouched.
TEST(SameHostPullTest, AScatteredPullFillsItsRunsInOrderAndNothingBetween) {
  PullableChild child;
  const pid_t pid = ProbePullSource(child.description());
  ASSERT_EQ(pid, child.pid());
  const uint64_t total = child.bytes().size();
  constexpr uint64_t kGap = 16;
  std::vector<char> destination(total + 4096 * kGap, 0x7f);
  std::vector<MemoryRun> runs;
  std::vector<std::pair<uint64_t, uint64_t>> placed;  // (offset in destination, size)
  uint64_t at = 0, offset = 0;
  for (uint64_t i = 0; at < total; ++i) {
    const uint64_t size = std::min<uint64_t>(total - at, i % 7 == 3 ? 0 : 64 + (i * 97) % 700);
    runs.push_back(MemoryRun{destination.data() + offset, size});
    placed.emplace_back(offset, size);
    at += size, offset += size + kGap;
  }
  ASSERT_GT(runs.size(), 1024u);
  ASSERT_LE(offset, destination.size());
  const Status status = PullFrom(pid, child.Descriptor(), runs, "rank 1");
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<char> gathered;
  for (const auto& [begin, size] : placed) {
    gathered.insert(gathered.end(), destination.begin() + begin, destination.begin() + begin + size);
    for (uint64_t g = 0; g < kGap; ++g) ASSERT_EQ(destination[begin + size + g], 0x7f) << "a gap was written";
  }
  EXPECT_EQ(gathered, child.bytes());
  // Runs that hold fewer bytes than the peer announced are refused before anything is read.
  runs.back().size -= 1;
  EXPECT_EQ(PullFrom(pid, child.Descriptor(), runs, "rank 1").code(), Code::kMismatch);
}

// A descriptor announcing its bytes in a list of runs that is too long, or whose runs do not add up to its size (a
// hostile or broken peer), is refused before any byte is copied.
TEST(SameHostPullTest, ADescriptorWhoseRunsAreTooManyOrDoNotAddUpIsCorrupt) {
  PullableChild child;
  const pid_t pid = ProbePullSource(child.description());
  ASSERT_EQ(pid, child.pid());
  std::vector<char> received(child.bytes().size(), 0x7f);
  const std::vector<MemoryRun> into{MemoryRun{received.data(), received.size()}};
  PullDescriptor too_many = child.Descriptor();
  too_many.run_count = kMaxPulledRuns + 1;
  Status status = PullFrom(pid, too_many, into, "rank 1");
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  EXPECT_NE(status.message().find("rank 1 announced 1048577 runs"), std::string::npos) << status.message();
  PullDescriptor garbage = child.Descriptor();  // the "list" is the child's bytes, not runs
  garbage.run_count = 2;
  status = PullFrom(pid, garbage, into, "rank 1");
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  EXPECT_NE(status.message().find("rank 1's send lists runs of"), std::string::npos) << status.message();
  EXPECT_EQ(received, std::vector<char>(received.size(), 0x7f));
}

TEST(SameHostPullTest, APullOfWithdrawnBytesFailsNamingThePeer) {
  PullableChild child;
  const pid_t pid = ProbePullSource(child.description());
  ASSERT_EQ(pid, child.pid());
  child.Withdraw();
  std::vector<char> received(child.bytes().size());
  const Status status = PullFrom(pid, child.Descriptor(), {MemoryRun{received.data(), received.size()}}, "rank 1");
  EXPECT_EQ(status.code(), Code::kPeerFailed) << status.message();
  EXPECT_NE(status.message().find("rank 1 withdrew"), std::string::npos) << status.message();
}

TEST(SameHostPullTest, APullFromAnExitedPeerFailsNamingThePeer) {
  PullableChild child;
  const pid_t pid = ProbePullSource(child.description());
  ASSERT_EQ(pid, child.pid());
  const PullDescriptor descriptor = child.Descriptor();
  child.Exit();
  std::vector<char> received(child.bytes().size());
  const Status status = PullFrom(pid, descriptor, {MemoryRun{received.data(), received.size()}}, "rank 1");
  EXPECT_EQ(status.code(), Code::kPeerFailed) << status.message();
  EXPECT_NE(status.message().find("rank 1 exited"), std::string::npos) << status.message();
}

TEST(SameHostPullTest, CheckValuesAreNeverZeroOrRepeated) {
  Result<PullableProcess> process = PullableProcess::Create();
  ASSERT_TRUE(process.ok()) << process.status().message();
  std::vector<uint64_t> values;
  for (int i = 0; i < 1000; ++i) values.push_back(process.value().NextCheckValue());
  std::sort(values.begin(), values.end());
  EXPECT_NE(values.front(), 0u);
  EXPECT_EQ(std::adjacent_find(values.begin(), values.end()), values.end());
}

}  // namespace
}  // namespace ckpt::coll
