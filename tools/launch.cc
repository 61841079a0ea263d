// ckpt-launch: runs N ranks of a program on this host with the environment torchrun gives its workers, so that
// examples and tests can start a multi-rank job without MPI or Python. It also gives them what ckpt's own store
// needs: a port of its own (CKPT_STORE_PORT) and a secret made for this job (CKPT_JOB_SECRET).
//
// Children are spawned with posix_spawn (never a hand-rolled fork + exec), each in its own process group so that
// stopping a rank also stops the helper processes it started. The launcher blocks SIGCHLD, SIGINT and SIGTERM and
// takes them with sigtimedwait: one loop handles exits, forwarded signals and deadlines, with no async handlers.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/os_error.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotStart = 127;

constexpr const char* kUsage =
    "usage: ckpt-launch -n N [--port P] [--timeout SEC] [--grace SEC] [--node-names A,A,B,B] [--] PROGRAM [ARGS...]\n"
    "       ckpt-launch --free-port\n"
    "\n"
    "Runs N ranks of PROGRAM on this host. Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "MASTER_ADDR=127.0.0.1 and MASTER_PORT (and CKPT_NODE_NAME with --node-names) in its environment, and for\n"
    "ckpt's store CKPT_STORE_PORT (without --port) and CKPT_JOB_SECRET (a new random one, unless already set).\n"
    "\n"
    "  -n, --ranks N       number of ranks to start (required)\n"
    "  --port P            MASTER_PORT; ckpt's store then takes P + 1 (default: free ports for both)\n"
    "  --timeout SEC       stop every rank after SEC seconds and exit 124\n"
    "  --grace SEC         after a rank fails, how long the others may run before SIGTERM, and how long after\n"
    "                      SIGTERM before SIGKILL (default 5)\n"
    "  --node-names LIST   comma-separated node name of every rank, to simulate several nodes; LOCAL_RANK and\n"
    "                      LOCAL_WORLD_SIZE then count ranks of the same node\n"
    "  --free-port         print a free TCP port on 127.0.0.1 (below the kernel's ephemeral range) and exit\n"
    "\n"
    "Exit status: 0 if every rank exits 0; otherwise the first failing rank's exit code (128 + signal if it was\n"
    "killed); 124 on timeout; 127 if PROGRAM cannot be started; 2 on usage errors.\n";

struct Options {
  int ranks = 0;
  int port = 0;          // 0: pick a free port
  double timeout_s = 0;  // 0: no timeout
  double grace_s = 5;
  bool print_free_port = false;
  std::vector<std::string> node_names;  // empty: one node
  std::vector<std::string> command;
};

// Reports a usage error and returns the usage exit code.
int UsageError(const std::string& message) {
  std::fprintf(stderr, "ckpt-launch: %s (see ckpt-launch --help)\n", message.c_str());
  return kExitUsage;
}

std::optional<long> ParseInteger(const std::string& text, long min, long max) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return std::nullopt;
  return value;
}

std::optional<double> ParseSeconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value <= 0) return std::nullopt;
  return value;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    parts.push_back(text.substr(begin, comma - begin));
    if (comma == std::string::npos) return parts;
    begin = comma + 1;
  }
}

// Parses argv into `options`; returns 0 on success, or the exit code to leave with (usage error or --help).
int ParseArguments(int argc, char** argv, Options& options) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the program starts here
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return -1;
    }
    if (arg == "--free-port") {
      options.print_free_port = true;
      continue;
    }
    // Every other option takes a value: "--opt VALUE" or "--opt=VALUE".
    std::string value;
    const size_t equals = arg.find('=');
    if (arg.rfind("--", 0) == 0 && equals != std::string::npos) {
      value = arg.substr(equals + 1);
      arg.resize(equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return UsageError("option " + arg + " needs a value");
    }
    if (arg == "-n" || arg == "--ranks") {
      const auto ranks = ParseInteger(value, 1, 4096);
      if (!ranks) return UsageError("-n must be a number of ranks from 1 to 4096, not '" + value + "'");
      options.ranks = static_cast<int>(*ranks);
    } else if (arg == "--port") {
      const auto port = ParseInteger(value, 1, 65535);
      if (!port) return UsageError("--port must be a TCP port from 1 to 65535, not '" + value + "'");
      options.port = static_cast<int>(*port);
    } else if (arg == "--timeout" || arg == "--grace") {
      const auto seconds = ParseSeconds(value);
      if (!seconds) return UsageError(arg + " must be a positive number of seconds, not '" + value + "'");
      (arg == "--timeout" ? options.timeout_s : options.grace_s) = *seconds;
    } else if (arg == "--node-names") {
      options.node_names = SplitCommas(value);
    } else {
      return UsageError("unknown option " + arg);
    }
  }
  options.command.assign(argv + i, argv + argc);
  if (options.print_free_port) return 0;
  if (options.ranks == 0) return UsageError("-n N is required");
  if (options.command.empty()) return UsageError("no program to run");
  if (!options.node_names.empty()) {
    if (options.node_names.size() != static_cast<size_t>(options.ranks)) {
      return UsageError("--node-names lists " + std::to_string(options.node_names.size()) + " names for " +
                        std::to_string(options.ranks) + " ranks");
    }
    for (const std::string& name : options.node_names) {
      if (name.empty()) return UsageError("--node-names contains an empty name");
    }
  }
  return 0;
}

// The first port the kernel hands out by itself (to connect() and bind(0)); ports below it are never chosen for
// another socket behind our back.
int FirstEphemeralPort() {
  FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  int low = 32768, high = 60999;
  if (range != nullptr) {
    if (std::fscanf(range, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(range);
  }
  return low;
}

// Finds `count` distinct ports free on 127.0.0.1, at random below the kernel's ephemeral range: a port from that
// range, picked by binding port 0, can be given to any process's next connection before a rank binds it (UCX and
// the store make many). Only another program choosing the same number at the same moment could take one now.
std::optional<std::vector<int>> PickFreePorts(int count) {
  constexpr int kLowestPort = 10000;
  const int end = FirstEphemeralPort();
  if (end - kLowestPort < 1000) {
    std::fprintf(stderr, "ckpt-launch: the kernel's ephemeral ports start at %d: too few ports below to choose from\n",
                 end);
    return std::nullopt;
  }
  std::vector<int> ports;
  for (int attempt = 0; attempt < 1000 && static_cast<int>(ports.size()) < count; ++attempt) {
    uint32_t random = 0;
    if (getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) break;
    const int port = kLowestPort + static_cast<int>(random % static_cast<uint32_t>(end - kLowestPort));
    if (std::find(ports.begin(), ports.end(), port) != ports.end()) continue;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) ports.push_back(port);
    close(fd);
  }
  if (static_cast<int>(ports.size()) < count) {
    std::fprintf(stderr, "ckpt-launch: cannot find %d free ports on 127.0.0.1 below %d\n", count, end);
    return std::nullopt;
  }
  return ports;
}

// 32 random bytes as hex: the job's secret, which every rank's store connection must prove it knows.
std::optional<std::string> NewJobSecret() {
  unsigned char random[32];
  if (getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    std::fprintf(stderr, "ckpt-launch: getrandom: %s\n", ckpt::OsErrorText(errno).c_str());
    return std::nullopt;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret;
  for (const unsigned char byte : random) {
    secret += kHex[byte >> 4];
    secret += kHex[byte & 15];
  }
  return secret;
}

// What every rank of one job shares: the launcher's port, ckpt's store's port (0: derived by ckpt from
// MASTER_PORT), and the job's secret.
struct JobEnvironment {
  int master_port = 0;
  int store_port = 0;
  std::string secret;
};

// The environment of one rank: ours, with the launcher's variables replaced.
std::vector<std::string> RankEnvironment(const Options& options, int rank, const JobEnvironment& job) {
  int local_rank = rank;
  int local_world_size = options.ranks;
  if (!options.node_names.empty()) {
    const auto& names = options.node_names;
    local_rank = static_cast<int>(std::count(names.begin(), names.begin() + rank, names[rank]));
    local_world_size = static_cast<int>(std::count(names.begin(), names.end(), names[rank]));
  }
  std::vector<std::string> ours = {
      "RANK=" + std::to_string(rank),
      "WORLD_SIZE=" + std::to_string(options.ranks),
      "LOCAL_RANK=" + std::to_string(local_rank),
      "LOCAL_WORLD_SIZE=" + std::to_string(local_world_size),
      "MASTER_ADDR=127.0.0.1",
      "MASTER_PORT=" + std::to_string(job.master_port),
      "CKPT_JOB_SECRET=" + job.secret,
  };
  if (job.store_port != 0) ours.push_back("CKPT_STORE_PORT=" + std::to_string(job.store_port));
  if (!options.node_names.empty()) ours.push_back("CKPT_NODE_NAME=" + options.node_names[rank]);

  auto replaced = [&ours](const char* entry) {
    const char* equals = std::strchr(entry, '=');
    const size_t name_length = equals ? static_cast<size_t>(equals - entry) : std::strlen(entry);
    return std::any_of(ours.begin(), ours.end(), [&](const std::string& own) {
      return own.compare(0, name_length + 1, entry, name_length + 1) == 0;
    });
  };
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!replaced(*entry)) environment.emplace_back(*entry);
  }
  environment.insert(environment.end(), ours.begin(), ours.end());
  return environment;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

struct Rank {
  int rank;
  pid_t pid;
  bool running;
};

// Starts the ranks, watches them, and stops them all when one fails, on a signal, or at the timeout.
class Supervisor {
 public:
  explicit Supervisor(const Options& options) : options_(options) {}

  int Run(const JobEnvironment& job);

 private:
  using Deadline = std::optional<Clock::time_point>;

  bool Spawn(int rank, const JobEnvironment& job);
  void ReapExited();
  void OnExit(Rank& child, int wait_status);
  void OnSignal(int signal_number);
  void OnDeadlines();
  void SignalRunning(int signal_number);
  void StopAll(const char* reason);
  int Running() const;
  std::optional<Clock::duration> TimeToNextDeadline() const;
  Clock::duration Grace() const;
  int ExitCode() const;

  const Options& options_;
  std::vector<Rank> ranks_;
  std::optional<int> first_failure_code_;
  int first_failed_rank_ = -1;
  int received_signal_ = 0;
  bool timed_out_ = false;
  bool stopping_ = false;  // SIGTERM or a forwarded signal was sent: later deaths are ours
  Deadline timeout_at_;
  Deadline terminate_at_;  // SIGTERM to the survivors of a failure
  Deadline kill_at_;       // SIGKILL to whatever survived SIGTERM
};

Clock::duration Supervisor::Grace() const {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_s));
}

bool Supervisor::Spawn(int rank, const JobEnvironment& job) {
  std::vector<std::string> environment = RankEnvironment(options_, rank, job);
  std::vector<std::string> arguments = options_.command;
  std::vector<char*> envp = CStrings(environment);
  std::vector<char*> argv = CStrings(arguments);

  // The child gets an empty mask and default handling of the signals we take or a parent may have ignored.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t empty;
  sigemptyset(&empty);
  sigset_t handled = HandledSignals();
  sigaddset(&handled, SIGPIPE);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setsigmask(&attributes, &empty);
  posix_spawnattr_setsigdefault(&attributes, &handled);

  pid_t pid = 0;
  const int error = posix_spawnp(&pid, argv[0], nullptr, &attributes, argv.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    std::fprintf(stderr, "ckpt-launch: cannot start rank %d: %s: %s\n", rank, argv[0],
                 ckpt::OsErrorText(error).c_str());
    return false;
  }
  ranks_.push_back(Rank{rank, pid, true});
  return true;
}

int Supervisor::Running() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
}

// Signals each running rank's process group, which also reaches the helper processes the rank started.
void Supervisor::SignalRunning(int signal_number) {
  for (const Rank& child : ranks_) {
    if (!child.running) continue;
    if (kill(-child.pid, signal_number) != 0) kill(child.pid, signal_number);  // it left its group
  }
}

void Supervisor::StopAll(const char* reason) {
  if (Running() > 0) {
    std::fprintf(stderr, "ckpt-launch: %s: sending SIGTERM to %d running rank(s)\n", reason, Running());
  }
  stopping_ = true;
  SignalRunning(SIGTERM);
  terminate_at_.reset();
  if (!kill_at_) kill_at_ = Clock::now() + Grace();
}

void Supervisor::OnExit(Rank& child, int wait_status) {
  child.running = false;
  int code = 0;
  std::string report = "rank " + std::to_string(child.rank) + " (pid " + std::to_string(child.pid) + ") ";
  if (WIFSIGNALED(wait_status)) {
    const int signal_number = WTERMSIG(wait_status);
    code = 128 + signal_number;
    report += "was killed by signal " + std::to_string(signal_number) + " (" + strsignal(signal_number) + ")";
  } else {
    code = WEXITSTATUS(wait_status);
    report += "exited with code " + std::to_string(code);
  }
  if (code == 0) return;
  // The first failure decides the exit code; failures after a stop was requested are its consequences.
  if (!first_failure_code_ && !stopping_) {
    first_failure_code_ = code;
    first_failed_rank_ = child.rank;
    if (Running() > 0) {
      char stopping[96];
      std::snprintf(stopping, sizeof(stopping), "; stopping the other %d running rank(s) in %g s", Running(),
                    options_.grace_s);
      report += stopping;
      terminate_at_ = Clock::now() + Grace();
    }
  }
  std::fprintf(stderr, "ckpt-launch: %s\n", report.c_str());
}

void Supervisor::ReapExited() {
  while (true) {
    int wait_status = 0;
    const pid_t pid = waitpid(-1, &wait_status, WNOHANG);
    if (pid <= 0) return;  // 0: none left to reap now; -1 (ECHILD): no children at all
    for (Rank& child : ranks_) {
      if (child.pid == pid && child.running) OnExit(child, wait_status);
    }
  }
}

// SIGINT, SIGTERM and SIGHUP go to the ranks so that they can stop cleanly; a second one kills them.
void Supervisor::OnSignal(int signal_number) {
  if (received_signal_ != 0) {
    std::fprintf(stderr, "ckpt-launch: received %s again: sending SIGKILL\n", strsignal(signal_number));
    SignalRunning(SIGKILL);
    return;
  }
  received_signal_ = signal_number;
  std::fprintf(stderr, "ckpt-launch: received %s: forwarding it to %d running rank(s)\n", strsignal(signal_number),
               Running());
  stopping_ = true;
  SignalRunning(signal_number);
  terminate_at_.reset();
  if (!kill_at_) kill_at_ = Clock::now() + Grace();
}

void Supervisor::OnDeadlines() {
  const Clock::time_point now = Clock::now();
  if (timeout_at_ && now >= *timeout_at_) {
    timeout_at_.reset();
    timed_out_ = true;
    char reason[64];
    std::snprintf(reason, sizeof(reason), "timed out after %g s", options_.timeout_s);
    StopAll(reason);
  }
  if (terminate_at_ && now >= *terminate_at_) StopAll("a rank failed");
  if (kill_at_ && now >= *kill_at_) {
    kill_at_.reset();
    if (Running() > 0) {
      std::fprintf(stderr, "ckpt-launch: %d rank(s) survived SIGTERM: sending SIGKILL\n", Running());
      SignalRunning(SIGKILL);
    }
  }
}

std::optional<Clock::duration> Supervisor::TimeToNextDeadline() const {
  std::optional<Clock::time_point> next;
  for (const Deadline& deadline : {timeout_at_, terminate_at_, kill_at_}) {
    if (deadline && (!next || *deadline < *next)) next = deadline;
  }
  if (!next) return std::nullopt;
  return std::max(Clock::duration::zero(), *next - Clock::now());
}

int Supervisor::ExitCode() const {
  if (timed_out_) return kExitTimeout;
  if (first_failure_code_) return *first_failure_code_;
  if (received_signal_ != 0) return 128 + received_signal_;
  return 0;
}

int Supervisor::Run(const JobEnvironment& job) {
  if (options_.timeout_s > 0) {
    timeout_at_ =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  }
  for (int rank = 0; rank < options_.ranks; ++rank) {
    if (!Spawn(rank, job)) {
      StopAll("a rank could not be started");
      first_failure_code_ = kExitCannotStart;
      first_failed_rank_ = rank;
      break;
    }
  }
  const sigset_t handled = HandledSignals();
  while (Running() > 0) {
    siginfo_t info;
    int signal_number;
    if (const auto wait = TimeToNextDeadline()) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(*wait).count();
      const timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      signal_number = sigtimedwait(&handled, &info, &timeout);
    } else {
      signal_number = sigwaitinfo(&handled, &info);
    }
    if (signal_number == SIGCHLD) {
      ReapExited();
    } else if (signal_number > 0) {
      OnSignal(signal_number);
    } else if (errno != EAGAIN && errno != EINTR) {
      std::fprintf(stderr, "ckpt-launch: waiting for signals: %s\n", ckpt::OsErrorText(errno).c_str());
      SignalRunning(SIGKILL);
    }
    OnDeadlines();
  }
  const int code = ExitCode();
  if (code != 0 && first_failed_rank_ >= 0 && !timed_out_) {
    std::fprintf(stderr, "ckpt-launch: exiting with %d: rank %d failed first\n", code, first_failed_rank_);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const int code = ParseArguments(argc, argv, options); code != 0) return code < 0 ? 0 : code;

  // Blocked before any child exists, so that no exit or signal can slip between spawning and waiting.
  const sigset_t handled = HandledSignals();
  sigprocmask(SIG_BLOCK, &handled, nullptr);

  if (options.print_free_port) {
    const auto ports = PickFreePorts(1);
    if (!ports) return 1;
    std::printf("%d\n", ports->front());
    return 0;
  }
  JobEnvironment job;
  job.master_port = options.port;
  if (job.master_port == 0) {
    const auto ports = PickFreePorts(2);
    if (!ports) return 1;
    job.master_port = (*ports)[0];
    job.store_port = (*ports)[1];
  }
  // A secret the user exported is kept: it may be shared with processes this launcher does not start.
  const char* exported = std::getenv("CKPT_JOB_SECRET");
  if (exported != nullptr && exported[0] != '\0') {
    job.secret = exported;
  } else if (std::optional<std::string> secret = NewJobSecret()) {
    job.secret = std::move(*secret);
  } else {
    return 1;
  }
  Supervisor supervisor(options);
  return supervisor.Run(job);
}
