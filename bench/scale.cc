// bench/scale: how the control plane grows with the number of ranks, simulated with the library's real planning
// code and wire encodings (runtime/save/save_partition.h, save_plan.h, load_plan.h, manifest.h) on synthetic jobs
// (bench/scale_model.h), one rank's work at a time.
//
// Save, as the library runs it: every rank partitions its descriptor by key owner; each owner decodes, checks and
// plans its keys and routes the items; each writer merges its items. Every rank's share of that work is timed on
// its own to find the busiest rank, whose work is then replayed alone in a fresh process: its time there (best of
// kReplayRuns) is the figure, and its peak memory that process's.
// Load, as the library runs it (bench/scale_load.h): every rank decodes the manifest without the tensors' chunks and
// sends each tensor's owner its request; owners decode their tensors' chunks, plan them and route the parts; each
// rank merges its part, decoding the chunks it reads, and places its reads in rounds. The rank with the largest sum
// of steps is replayed alone in a fresh process, as the save's is, and its planning there (best of kReplayRuns) is
// the figure; reading and decoding the manifest (its header and first message, and the sections of the tensors
// whose chunks the busiest rank decodes) is a figure of its own, and the peak memory includes it;
// scale_manifest_read_mib is how much of the file that rank reads. (On local storage, under CKPT_LOAD_READS=auto, a
// rank also decodes the tensors it asks for, to estimate its own reads; on a shared file system it does not.)
// Control-plane bytes are counted per rank under the job's own collectives (ckpt_collectives): an all-to-all moves
// each message once between its two ranks; a gather to rank 0 delivers every contribution to it; a broadcast is a
// binomial tree, so its busiest sender sends ceil(log2 ranks) copies. They are compared with the bytes of every
// rank's encoded descriptor. A job without collectives of its own runs the same messages over the peer plane
// (collectives/peer/peer_control_plane.h), over its grid (collectives/peer/peer_grid.h: a hop per dimension, each
// counted), with frames and acks around them and each hop ended at rank 0's store: scale_peer_busiest_control_ratio.
// Were the TCP store to route them (CKPT_PEER_CONTROL=0), rank 0's server would relay every byte of every rank, which
// scale_store_rank0_control_ratio shows.
//
// Links: each rank's descriptors to other processes under the peer plane, its peer links (a sender keeps a link to
// every rank it ever sent to, its neighbours in the grid) and its two store connections, whose server ends rank 0
// holds in a direct job, and in a grid the relay of the rank's row (collectives/store/store_relay.h), which holds one
// link to rank 0: scale_links_per_rank_max (the most any rank holds, a relay's or rank 0's), scale_rank0_links, and
// scale_peer_links_per_rank_max for the peer links alone. The load's data transport adds a connection to each rank a
// rank exchanges tensor data with, from its view of the load plan: scale_exchange_peers_per_rank_max, and
// scale_descriptors_per_rank_max for the most one rank holds in all.
//
// Each step's messages are spooled to files by receiver (bench/scale_spool.h) and each rank reads its own when its
// turn comes, and a rank's view of the load plan is merged again (untimed) in each step that needs it: a process
// holds one rank's inputs at a time beside the manifest, where holding them all took 10.8 GB at 4,096 ranks (and
// slowed every rank's timed work in that large heap). The ranks of a step are shared among --workers processes (one
// per core by default), forked from the one holding the manifest; the load's slowest ranks are timed again alone.
//
// Failure detection: while the ranks wait for a straggler, each asks its store server whether a rank died once per the
// library's PeerCheckInterval (collectives/store/tcp_store.h) for the ranks asking that server, not simulated in real
// time but taken from that same function. In a grid a rank asks its row's relay, which answers from the deaths rank 0
// pushes it, so rank 0 hears only itself: scale_rank0_requests_per_s, scale_server_requests_per_s_max (the busiest
// relay, or rank 0 in a direct job), beside every rank asking rank 0 each 250 ms.
//
// Usage: ckpt_bench_scale [--ranks 1024,4096,16384,32768] [--layouts dist|plain|both] [--limit-s 300] [--workers N];
// the spools go under $TMPDIR (/tmp where unset). Both layouts by default: with a distributed optimizer (whose
// figures the growth exponent compares) and without one (`_plain`).
// scale_growth_exponent_max is the steepest growth of the figures per factor of four in ranks, between the largest job
// size run whose quarter was also run and that quarter (16,384 and 65,536 ranks when both are run).
// Prints `name value unit` lines; a figure whose child ran past the limit prints the limit and a `#` line saying so.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/scale_common.h"
#include "bench/scale_load.h"
#include "bench/scale_model.h"
#include "bench/scale_spool.h"
#include "collectives/store/store_relay.h"
#include "collectives/store/tcp_store.h"
#include "common/bytes.h"
#include "common/os_error.h"
#include "common/settings.h"
#include "io/checksum.h"
#include "runtime/save/save_partition.h"

namespace ckpt::bench {
namespace {

// One rank's save work as owner and as writer; returns its seconds, and the routed messages by writer.
double OwnerWork(const ParallelLayout& layout, int owner, Messages inbox, std::vector<std::string>* routed,
                 runtime::SavePlanOptions options) {
  const Clock::time_point start = Clock::now();
  Result<std::vector<runtime::RankDescriptor>> owned =
      runtime::DecodeOwnedDescriptors(ToIncoming(std::move(inbox), layout.world()), owner);
  Check(owned.status(), "decoding owned descriptors");
  Check(runtime::ValidateCoverage(*owned, owner), "coverage");
  options.rotation = owner;
  const runtime::SavePlan plan = runtime::PlanSave(*owned, options);
  *routed = runtime::RouteWriteItems(plan, *owned, owner);
  return Since(start);
}

std::string LayoutName(const ParallelLayout& layout) { return layout.distributed_optimizer ? "" : "_plain"; }

// --- the busiest rank's save alone, for its memory and its time -----------------------------------------------

int ChildSave(const ParallelLayout& layout, int rank, const std::string& writer_inbox) {
  const int ranks = layout.world();
  Messages inbox;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> parts = runtime::PartitionDescriptor(DescribeRank(layout, r), ranks);
    if (!parts[rank].empty()) inbox.emplace_back(r, std::move(parts[rank]));
  }
  const runtime::RankDescriptor own = DescribeRank(layout, rank);
  const Messages items_in = ReadMessages(writer_inbox).at(0);
  double best_s = std::numeric_limits<double>::max();
  for (int run = 0; run < kReplayRuns; ++run) {
    const Clock::time_point start = Clock::now();
    (void)runtime::PartitionDescriptor(own, ranks);
    const double partition_s = Since(start);
    std::vector<std::string> routed;
    const double owner_s = OwnerWork(layout, rank, inbox, &routed, {});
    Messages copy = items_in;
    const Clock::time_point merging = Clock::now();
    runtime::ManifestSkeleton skeleton;
    Result<runtime::SavePlan> plan =
        runtime::MergeWriteItems(ToIncoming(std::move(copy), ranks), rank, rank == 0 ? &skeleton : nullptr);
    const double merge_s = Since(merging);
    Check(plan.status(), "merging");
    best_s = std::min(best_s, partition_s + owner_s + merge_s);
  }
  std::printf("%llu %.6f\n", static_cast<unsigned long long>(PeakRssKib()), best_s);
  return 0;
}

// Runs this program again with `args`; its standard output, or empty if it ran past `limit_s` (then *peak_kib is
// its peak memory so far).
std::string RunChild(const std::vector<std::string>& args, int limit_s, uint64_t* peak_kib) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) std::exit(1);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    close(pipe_fds[0]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  const Clock::time_point start = Clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    *peak_kib = std::max(*peak_kib, PeakRssKib(pid));
    if (Since(start) > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      close(pipe_fds[0]);
      return {};
    }
    usleep(200 * 1000);
  }
  std::string out;
  char chunk[256];
  for (ssize_t n; (n = read(pipe_fds[0], chunk, sizeof chunk)) > 0;) out.append(chunk, n);
  close(pipe_fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench/scale: child %s failed\n", args[1].c_str());
    std::exit(1);
  }
  return out;
}

// --- one job size -------------------------------------------------------------------------------------------------

struct Figures {
  double save_plan_s = 0, load_plan_s = 0, peak_rss_mib = 0, manifest_mib = 0, control_ratio = 0;
};

void Print(const std::string& name, double value, const char* unit) {
  std::printf("%s %.4g %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

// The rank connected to the most other processes, peer links and store connections together, and how many.
std::pair<int, uint64_t> PartnersMax(const ControlBytes& save, const ControlBytes& load, int ranks, int columns) {
  std::pair<int, uint64_t> most{0, 0};
  std::vector<uint32_t> partners;
  for (int r = 0; r < ranks; ++r) {
    partners.clear();
    for (const ControlBytes* bytes : {&save, &load}) {
      for (uint32_t link : bytes->links[r]) partners.push_back(link / 2);
    }
    if (columns == 0) {
      if (r == 0) {
        for (int other = 1; other < ranks; ++other) partners.push_back(static_cast<uint32_t>(other));
      } else {
        partners.push_back(0);
      }
    } else if (r == 0) {
      for (int row_start = 0; row_start < ranks; row_start += columns) {
        const int relay = ckpt::coll::StoreRelayOf(std::max(row_start, 1), ranks, columns);
        if (relay > 0) partners.push_back(static_cast<uint32_t>(relay));
      }
    } else if (const int relay = ckpt::coll::StoreRelayOf(r, ranks, columns); relay != r) {
      partners.push_back(static_cast<uint32_t>(relay));
    } else {
      partners.push_back(0);
      const int row_start = r / columns * columns;
      for (int member = std::max(row_start, 1); member < std::min(row_start + columns, ranks); ++member) {
        partners.push_back(static_cast<uint32_t>(member));
      }
    }
    std::sort(partners.begin(), partners.end());
    partners.erase(std::unique(partners.begin(), partners.end()), partners.end());
    const uint64_t count = partners.size() - static_cast<uint64_t>(std::binary_search(partners.begin(), partners.end(),
                                                                                      static_cast<uint32_t>(r)));
    if (count > most.second) most = {r, count};
  }
  return most;
}

Figures Simulate(const ParallelLayout& layout, const ParallelLayout& target, int limit_s, int workers,
                 const std::string& tmp) {
  const int ranks = layout.world();
  const std::string suffix = LayoutName(layout) + "_" + std::to_string(ranks);
  ControlBytes save_bytes(ranks);
  std::vector<double> rank_s(ranks, 0);
  std::vector<std::array<double, 3>> steps(ranks, {0, 0, 0});  // partitioning, owning, merging
  uint64_t descriptor_bytes = 0, descriptors = 0;
  Spool descriptor_parts(tmp + "/descriptor-parts", ranks), writer_items(tmp + "/writer-items", ranks);
  // A rank's timed steps, its messages added to `out` (where not null).
  auto partition = [&](int r, Spool* out) {
    const runtime::RankDescriptor desc = DescribeRank(layout, r);
    RankResult result;
    result.counts[0] = static_cast<double>(desc.tensors.size() + desc.objects.size());
    result.counts[1] = static_cast<double>(runtime::EncodeRankDescriptor(desc).size());
    const Clock::time_point start = Clock::now();
    std::vector<std::string> parts = runtime::PartitionDescriptor(desc, ranks);
    result.seconds = Since(start);
    for (int owner = 0; out != nullptr && owner < ranks; ++owner) {
      if (!parts[owner].empty()) out->Add(r, owner, parts[owner]);
    }
    return result;
  };
  auto own = [&](int owner, Spool* out) {
    std::vector<std::string> routed;
    RankResult result;
    result.seconds = OwnerWork(layout, owner, descriptor_parts.Inbox(owner), &routed, {});
    for (int writer = 0; out != nullptr && writer < ranks; ++writer) {
      if (!routed[writer].empty()) out->Add(owner, writer, routed[writer]);
    }
    return result;
  };
  auto merge = [&](int writer, runtime::ManifestSkeleton* skeleton) {
    const std::vector<std::string> incoming = ToIncoming(writer_items.Inbox(writer), ranks);
    const Clock::time_point start = Clock::now();
    Result<runtime::SavePlan> plan = runtime::MergeWriteItems(incoming, writer, skeleton);
    const double seconds = Since(start);
    Check(plan.status(), "merging");
    return std::make_pair(seconds, std::move(plan).value());
  };

  const std::vector<RankResult> partitioned = RunStep(
      ranks, workers, [&](int r, Spool& out) { return partition(r, &out); }, descriptor_parts);
  for (int r = 0; r < ranks; ++r) {
    steps[r][0] = partitioned[r].seconds;
    descriptors += static_cast<uint64_t>(partitioned[r].counts[0]);
    descriptor_bytes += static_cast<uint64_t>(partitioned[r].counts[1]);
  }
  descriptor_parts.CountInto(&save_bytes);
  save_bytes.AllToAll();
  save_bytes.Agreement(kProposalBytes, kVerdictBytes);  // proposals
  save_bytes.Agreement(0, kAgreementBytes);             // coverage
  save_bytes.Agreement(0, kAgreementBytes);             // plan

  const std::vector<RankResult> owned = RunStep(
      ranks, workers, [&](int r, Spool& out) { return own(r, &out); }, writer_items);
  for (int r = 0; r < ranks; ++r) steps[r][1] = owned[r].seconds;
  writer_items.CountInto(&save_bytes);
  save_bytes.AllToAll();

  // Each writer's merge, and the manifest rank 0 would commit: one data file per writer, chunks back to back. Writer
  // 0 merges first and names the tensors; each writer's items go into the manifest as soon as it has merged them.
  runtime::Manifest manifest;
  std::map<std::string, size_t> tensor_index, object_index;
  for (int writer = 0; writer < ranks; ++writer) {
    runtime::ManifestSkeleton skeleton;
    auto [seconds, plan] = merge(writer, writer == 0 ? &skeleton : nullptr);
    steps[writer][2] = seconds;
    if (writer == 0) {
      manifest.world_size = ranks;
      manifest.node_count = skeleton.node_count;
      manifest.tensors = std::move(skeleton.tensors);
      manifest.objects = std::move(skeleton.objects);
      for (size_t t = 0; t < manifest.tensors.size(); ++t) tensor_index[manifest.tensors[t].key] = t;
      for (size_t o = 0; o < manifest.objects.size(); ++o) object_index[manifest.objects[o].key] = o;
    }
    uint64_t offset = 0;
    for (runtime::WriteItem& item : plan.items) {
      runtime::StoredBytes bytes;
      bytes.file_index = static_cast<uint32_t>(writer);
      bytes.file_offset = offset;
      bytes.byte_length = item.bytes;
      bytes.block_size = kBlockSize;
      bytes.block_checksums.assign(io::BlockCount(item.bytes, kBlockSize), 0);
      offset += (item.bytes + 4095) / 4096 * 4096;
      if (item.is_object) {
        manifest.objects[object_index.at(item.key)].pieces.push_back({item.index, std::move(bytes)});
      } else {
        manifest.tensors[tensor_index.at(item.key)].chunks.push_back({item.box, std::move(bytes)});
      }
    }
    manifest.files.push_back({"data/" + std::to_string(writer) + "-0.bin", offset, ""});
  }
  // As for the load (bench/scale_load.cc), the slowest ranks' steps are timed again before the busiest is chosen.
  for (int r = 0; r < ranks; ++r) rank_s[r] = steps[r][0] + steps[r][1] + steps[r][2];
  const int busiest = RetimedBusiest(
      ranks, [&](int r) { return rank_s[r]; },
      [&](int r) {
        runtime::ManifestSkeleton skeleton;
        steps[r][0] = std::min(steps[r][0], partition(r, nullptr).seconds);
        steps[r][1] = std::min(steps[r][1], own(r, nullptr).seconds);
        steps[r][2] = std::min(steps[r][2], merge(r, r == 0 ? &skeleton : nullptr).first);
        rank_s[r] = steps[r][0] + steps[r][1] + steps[r][2];
      });
  WriteMessages(tmp + "/writer-inbox", {writer_items.Inbox(busiest)});
  for (runtime::TensorRecord& t : manifest.tensors) {
    std::sort(t.chunks.begin(), t.chunks.end(), [](const auto& a, const auto& b) { return a.box < b.box; });
  }
  manifest.format_major = runtime::FormatMajorFor(manifest);
  Result<std::string> encoded = runtime::EncodeManifest(manifest);
  Check(encoded.status(), "encoding the manifest");
  std::ofstream(tmp + "/MANIFEST", std::ios::binary) << *encoded;
  ControlBytes load_bytes(ranks);
  const LoadFigures load = SimulateLoad(target, manifest, workers, &load_bytes, tmp + "/load-inputs");
  const double manifest_mib = static_cast<double>(encoded->size()) / (1 << 20);
  manifest = runtime::Manifest();

  Figures f;
  f.manifest_mib = manifest_mib;
  const std::string layout_flag = layout.distributed_optimizer ? "dist" : "plain";
  uint64_t save_kib = 0, load_kib = 0;
  const std::string save_out = RunChild({"ckpt_bench_scale", "--child-save", std::to_string(ranks), layout_flag,
                                         std::to_string(busiest), tmp + "/writer-inbox"},
                                        limit_s, &save_kib);
  f.save_plan_s = rank_s[busiest];
  if (!save_out.empty()) {
    unsigned long long kib = 0;
    std::sscanf(save_out.c_str(), "%llu %lf", &kib, &f.save_plan_s);
    save_kib = kib;
  }
  const std::string load_out =
      RunChild({"ckpt_bench_scale", "--child-load", std::to_string(ranks), layout_flag, std::to_string(load.busiest),
                std::to_string(load.round_count), tmp + "/MANIFEST", tmp + "/load-inputs"},
               limit_s, &load_kib);
  double decode_s = limit_s, replay_s = limit_s;
  size_t tensors_decoded = 0, tensors = 0;
  unsigned long long manifest_read = 0;
  if (!load_out.empty()) {
    unsigned long long kib = 0;
    std::sscanf(load_out.c_str(), "%lf %lf %llu %zu %zu %llu", &decode_s, &replay_s, &kib, &tensors_decoded, &tensors,
                &manifest_read);
    load_kib = kib;
  } else {
    std::printf(
        "# the replay of rank %d's load at %d ranks ran past %d s and was stopped: its figures are lower "
        "bounds\n",
        load.busiest, ranks, limit_s);
  }
  f.load_plan_s = replay_s;
  f.peak_rss_mib = std::max(save_kib, load_kib) / 1024.0;
  const double save_ratio = static_cast<double>(save_bytes.Busiest()) / descriptor_bytes;
  const double load_ratio = static_cast<double>(load_bytes.Busiest()) / descriptor_bytes;
  f.control_ratio = std::max(save_ratio, load_ratio);

  std::printf(
      "# %d ranks%s: the busiest rank's save planning is rank %d's: %.3f s partitioning its descriptor, %.3f s "
      "planning the keys it owns, %.3f s merging its items in the simulation; %.3f s replayed alone, best of %d\n",
      ranks, LayoutName(layout).c_str(), busiest, steps[busiest][0], steps[busiest][1], steps[busiest][2],
      f.save_plan_s, kReplayRuns);
  std::printf(
      "# %d ranks%s: the busiest rank's load planning took %.3f s in the simulation; %.3f s replayed alone, "
      "best of %d\n",
      ranks, LayoutName(layout).c_str(), load.busiest_plan_s, f.load_plan_s, kReplayRuns);
  Print("scale_descriptors" + suffix, static_cast<double>(descriptors), "descriptors");
  Print("scale_descriptor_mib" + suffix, static_cast<double>(descriptor_bytes) / (1 << 20), "MiB");
  Print("scale_save_plan_s" + suffix, f.save_plan_s, "s");
  Print("scale_save_peak_rss_mib" + suffix, save_kib / 1024.0, "MiB");
  Print("scale_save_busiest_control_ratio" + suffix, save_ratio, "x");
  Print("scale_load_manifest_decode_s" + suffix, decode_s, "s");
  Print("scale_load_tensors_decoded" + suffix, static_cast<double>(tensors_decoded), "tensors");
  Print("scale_load_tensors" + suffix, static_cast<double>(tensors), "tensors");
  Print("scale_load_plan_s" + suffix, f.load_plan_s, "s");
  Print("scale_load_rounds" + suffix, load.round_count, "rounds");
  Print("scale_load_peak_rss_mib" + suffix, load_kib / 1024.0, "MiB");
  Print("scale_load_busiest_control_ratio" + suffix, load_ratio, "x");
  Print("scale_peak_rss_mib" + suffix, f.peak_rss_mib, "MiB");
  Print("scale_manifest_mib" + suffix, f.manifest_mib, "MiB");
  Print("scale_manifest_read_mib" + suffix, static_cast<double>(manifest_read) / (1 << 20), "MiB");
  Print("scale_busiest_control_ratio" + suffix, f.control_ratio, "x");
  Print("scale_peer_busiest_control_ratio" + suffix,
        static_cast<double>(std::max(save_bytes.PeerBusiest(), load_bytes.PeerBusiest())) / descriptor_bytes, "x");
  // Descriptors to other processes: each rank's peer links and its two store connections (collectives/store/
  // tcp_store.h: its own and the auxiliary one of its background saves). In a grid every rank but rank 0 reaches the
  // store through its row's relay (collectives/store/store_relay.h): rank 0 holds the server ends of its own two and a
  // link from each row's relay, a relay the server ends of its members' two and its own link to rank 0; in a direct
  // job rank 0 holds the server ends of every rank's two.
  const std::pair<int, uint64_t> save_links = save_bytes.PeerLinksMax();
  const std::pair<int, uint64_t> load_links = load_bytes.PeerLinksMax();
  std::printf("# %d ranks%s: rank %d holds the most peer links in the save (%llu), rank %d in the load (%llu)\n", ranks,
              LayoutName(layout).c_str(), save_links.first, static_cast<unsigned long long>(save_links.second),
              load_links.first, static_cast<unsigned long long>(load_links.second));
  const uint64_t peer_links = std::max(save_links.second, load_links.second);
  auto peer_links_of = [&](int rank) {
    return static_cast<uint64_t>(std::max(save_bytes.links[rank].size(), load_bytes.links[rank].size()));
  };
  const int columns = save_bytes.grid.direct() ? 0 : ckpt::coll::StoreRelayColumns(ranks);
  constexpr uint64_t kOwnStoreConnections = 2;
  const uint64_t rows = columns > 0 ? (static_cast<uint64_t>(ranks) + columns - 1) / columns : 0;
  // The data transport's endpoints (collectives/transport/ucx_transport.h): a rank connects to each rank it exchanges
  // tensor data with at their first exchange; over TCP, one socket per pair of ranks (UCX joins the two endpoints of
  // a pair: UcxTransportSetupTest.ARankConnectsToAPeerAtItsFirstExchangeWithItOnly counts them).
  auto exchange_links_of = [&](int rank) { return static_cast<uint64_t>(load.exchange_partners[rank]); };
  const uint64_t rank0_links = peer_links_of(0) + kOwnStoreConnections +
                               (columns > 0 ? kOwnStoreConnections + rows : kOwnStoreConnections * ranks);
  uint64_t links_max = rank0_links;
  uint64_t descriptors_max = rank0_links + exchange_links_of(0);
  int busiest_relay = -1;
  uint64_t relay_members_max = 0;
  for (int r = 1; r < ranks; ++r) {
    uint64_t held = peer_links_of(r) + kOwnStoreConnections;
    if (columns > 0 && ckpt::coll::StoreRelayOf(r, ranks, columns) == r) {
      const auto members = static_cast<uint64_t>(ckpt::coll::StoreRelayMembers(r, ranks, columns));
      held += kOwnStoreConnections * members + 1;
      if (members > relay_members_max) {
        relay_members_max = members;
        busiest_relay = r;
      }
    }
    links_max = std::max(links_max, held);
    descriptors_max = std::max(descriptors_max, held + exchange_links_of(r));
  }
  if (columns > 0) {
    std::printf(
        "# %d ranks%s: %llu rows, each reaching the store through a relay on one of its ranks; rank 0 holds %llu "
        "descriptors to other processes, the relay on rank %d serves %llu ranks\n",
        ranks, LayoutName(layout).c_str(), static_cast<unsigned long long>(rows),
        static_cast<unsigned long long>(rank0_links), busiest_relay,
        static_cast<unsigned long long>(relay_members_max));
  }
  // The processes a rank holds any connection to: its peers, and its store's other ends (its relay; a relay's members
  // and rank 0; rank 0's relays, or in a direct job every rank).
  const std::pair<int, uint64_t> partners = PartnersMax(save_bytes, load_bytes, ranks, columns);
  std::printf("# %d ranks%s: rank %d is connected to the most other processes (%llu)\n", ranks,
              LayoutName(layout).c_str(), partners.first, static_cast<unsigned long long>(partners.second));
  Print("scale_peers_per_rank_max" + suffix, static_cast<double>(partners.second), "ranks");
  Print("scale_peer_links_per_rank_max" + suffix, static_cast<double>(peer_links), "links");
  Print("scale_exchange_peers_per_rank_max" + suffix,
        static_cast<double>(*std::max_element(load.exchange_partners.begin(), load.exchange_partners.end())), "ranks");
  Print("scale_links_per_rank_max" + suffix, static_cast<double>(links_max), "links");
  Print("scale_descriptors_per_rank_max" + suffix, static_cast<double>(descriptors_max), "descriptors");
  Print("scale_rank0_links" + suffix, static_cast<double>(rank0_links), "links");
  Print("scale_store_rank0_control_ratio" + suffix,
        static_cast<double>(save_bytes.store_relay + load_bytes.store_relay) / descriptor_bytes, "x");
  // Death checks: each rank asks its store server (rank 0's, or its relay, which answers them itself) once per
  // PeerCheckInterval for the ranks that ask that server. Rank 0's server then hears only rank 0 itself in a grid.
  const int askers = columns > 0 ? columns : ranks;
  const auto interval =
      ckpt::coll::PeerCheckInterval(askers, std::chrono::milliseconds(ckpt::settings::kDefaultTimeoutMs));
  const double per_rank = 1000.0 / static_cast<double>(interval.count());
  Print("scale_rank0_requests_per_s" + suffix, (columns > 0 ? 1 : ranks) * per_rank, "/s");
  Print("scale_server_requests_per_s_max" + suffix,
        static_cast<double>(columns > 0 ? std::max<uint64_t>(relay_members_max, 1) : ranks) * per_rank, "/s");
  Print("scale_rank0_requests_per_s_every_250ms" + suffix, (ranks - 1) * 4.0, "/s");
  Print("scale_death_found_within_s" + suffix, static_cast<double>(interval.count()) / 1000.0, "s");
  return f;
}

std::vector<int> ParseRanks(const std::string& list) {
  std::vector<int> ranks;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) ranks.push_back(std::atoi(item.c_str()));
  return ranks;
}

// The simulation's folder under $TMPDIR (/tmp where unset: the manifest, the spools, a replay's inputs, gigabytes at
// scale), removed whenever this process exits, also through a failed Check, which exits at once. Only by the process
// that made it: the workers forked from it exit too.
std::string scratch_folder;
pid_t scratch_owner = 0;
void RemoveScratchFolder() {
  std::error_code ignored;
  if (getpid() == scratch_owner) std::filesystem::remove_all(scratch_folder, ignored);
}

ParallelLayout SaveLayout(int ranks, bool distributed) { return LayoutFor(ranks, 8, 16, distributed); }
ParallelLayout LoadLayout(int ranks, bool distributed) { return LayoutFor(ranks, 4, 8, distributed); }

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 5 && args[0] == "--child-save") {
    return ChildSave(SaveLayout(std::stoi(args[1]), args[2] == "dist"), std::stoi(args[3]), args[4]);
  }
  if (args.size() == 7 && args[0] == "--child-load") {
    return ReplayLoad(LoadLayout(std::stoi(args[1]), args[2] == "dist"), std::stoi(args[3]),
                      static_cast<uint32_t>(std::stoul(args[4])), args[5], args[6]);
  }
  std::vector<int> ranks = {1024, 4096, 16384, 32768};
  std::vector<bool> layouts = {true, false};  // with a distributed optimizer, without
  int limit_s = 300;
  int workers = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    if (args[i] == "--ranks") ranks = ParseRanks(args[i + 1]);
    if (args[i] == "--limit-s") limit_s = std::stoi(args[i + 1]);
    if (args[i] == "--workers") workers = std::max(1, std::stoi(args[i + 1]));
    if (args[i] == "--layouts" && args[i + 1] == "dist") layouts = {true};
    if (args[i] == "--layouts" && args[i + 1] == "plain") layouts = {false};
  }
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string parent = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  std::string pattern = parent + "/ckpt-bench-scale-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) Check(OsError("cannot create a folder in " + parent, errno), "starting");
  scratch_folder = pattern;
  scratch_owner = getpid();
  std::atexit(RemoveScratchFolder);
  const std::string tmp = scratch_folder;
  std::map<int, Figures> figures;
  for (bool distributed : layouts) {
    for (int n : ranks) {
      const Figures f = Simulate(SaveLayout(n, distributed), LoadLayout(n, distributed), limit_s, workers, tmp);
      if (distributed) figures[n] = f;
    }
  }
  for (auto largest = figures.rbegin(); largest != figures.rend(); ++largest) {
    if (!figures.count(largest->first / 4)) continue;
    const Figures& a = figures[largest->first / 4];
    const Figures& b = largest->second;
    auto exponent = [](double from, double to) { return std::log(to / from) / std::log(4.0); };
    const double growth = std::max({exponent(a.save_plan_s, b.save_plan_s), exponent(a.load_plan_s, b.load_plan_s),
                                    exponent(a.peak_rss_mib, b.peak_rss_mib), exponent(a.manifest_mib, b.manifest_mib),
                                    exponent(a.control_ratio, b.control_ratio)});
    std::printf("# the growth exponent is taken from %d to %d ranks\n", largest->first / 4, largest->first);
    Print("scale_growth_exponent_max", growth, "exponent");
    break;
  }
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }
