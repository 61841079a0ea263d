// The UCX transport's collective bring-up (ucx_transport.h): every rank agrees on the network devices, opens its
// worker, exchanges its worker address and how same-host peers pull from it, keeps the others' addresses, connects to
// the peers it pulls from, and learns from their verdicts which peers pull from it. Endpoints to the other peers come
// later, at the first exchange with each.
#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/transport/ucx_config.h"
#include "collectives/transport/ucx_transport.h"
#include "collectives/transport/ucx_transport_impl.h"

namespace ckpt::coll {
namespace ucx {

Status UcxTransport::Open(const std::string& net_devices) {
  UcxWorkerOptions options;
  options.net_devices = net_devices;
  options.expected_endpoints = peers_.size();
  // Never used by two threads at once (mutex_), but by more than one thread.
  options.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ASSIGN_OR_RETURN(worker_, UcxWorker::Open(ucx_, options));
  return Status::Ok();
}

// The pull description, a newline (descriptions hold none), then the worker address's bytes.
Result<std::string> UcxTransport::ConnectionInfo() const {
  ASSIGN_OR_RETURN(const std::string address, worker_->Address());
  return (pulling_allowed_ ? pullable_.description() : "") + "\n" + address;
}

Status UcxTransport::Connect(const std::vector<std::string>& infos) {
  pull_sources_.assign(peers_.size(), 0);
  pullers_.assign(peers_.size(), false);
  addresses_.assign(peers_.size(), std::string());
  for (const Peer& peer : peers_) {
    const std::string& info = infos[peer.rank];
    const size_t newline = info.find('\n');
    if (newline == std::string::npos || newline + 1 == info.size()) {
      return PeerFailed(RankName(peer.rank) + " sent a malformed UCX connection record (" +
                        std::to_string(info.size()) + " bytes)");
    }
    if (pulling_allowed_ && peer.rank != rank_) {
      pull_sources_[peer.rank] = pullable_.Probe(std::string_view(info).substr(0, newline));
    }
    addresses_[peer.rank] = info.substr(newline + 1);
  }
  // The peers this rank pulls from share its host and its shared memory, where an endpoint takes no descriptor: theirs
  // are made now, while every rank is alive, as UCX 1.13's shared-memory endpoint to a process that has since left
  // fails to attach its segment (logging an error, and leaking). The others wait for a first exchange.
  for (Peer& peer : peers_) {
    if (pull_sources_[peer.rank] != 0) ConnectTo(peer);
  }
  return Status::Ok();
}

void UcxTransport::ConnectTo(Peer& peer) {
  if (peer.ep != nullptr || !peer.failure.empty()) return;  // connected, or failed for good
  const ucs_status_t status = worker_->Connect(addresses_[peer.rank], OnEndpointError, &peer, &peer.ep);
  if (status != UCS_OK) {
    peer.ep = nullptr;
    peer.failure = std::string("creating a UCX endpoint to it failed: ") + ucx_.status_string(status);
  }
}

// An endpoint over TCP is a socket, and at least a connection's memory on other transports: a rank holds them only
// for the ranks it exchanges with (a load's readers and consumers), never for the whole world.
void UcxTransport::ConnectPartners(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) {
  for (const TransferSend& send : sends) ConnectTo(peers_[send.peer]);
  for (const TransferRecv& recv : recvs) ConnectTo(peers_[recv.peer]);
}

std::string UcxTransport::PullSources() const {
  std::string sources;
  for (size_t r = 0; r < pull_sources_.size(); ++r) {
    if (pull_sources_[r] != 0) sources += " " + std::to_string(r);
  }
  return sources;
}

// Each verdict is "ok" followed by that rank's PullSources.
void UcxTransport::LearnPullers(const std::vector<std::string>& verdicts) {
  for (size_t r = 0; r < verdicts.size() && r < pullers_.size(); ++r) {
    std::istringstream sources(verdicts[r].substr(std::min<size_t>(2, verdicts[r].size())));
    long long source = 0;
    while (sources >> source) {
      if (source == rank_) pullers_[r] = true;
    }
  }
}

}  // namespace ucx

namespace {

using ucx::UcxTransport;

// The ranks whose allgather contribution was empty, as "1, 3".
std::string RanksThatSentNothing(const std::vector<std::string>& contributions) {
  std::string ranks;
  for (size_t r = 0; r < contributions.size(); ++r) {
    if (contributions[r].empty()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return ranks;
}

// Collective: this rank's UCX network devices (empty: every device). A job whose every rank reaches the store over
// loopback runs on one host, and loopback alone serves it. Across hosts, a rank keeps to the interface through which
// it reaches the store, the job's network; the store's own host reaches it over loopback and cannot tell which of
// its interfaces the other hosts use, so it keeps them all.
Result<std::string> AgreeOnNetDevices(ControlPlane& control, const std::string& job_host) {
  const Result<NetworkInterface> reaching =
      job_host.empty() ? Result<NetworkInterface>(NotFound("no job host")) : InterfaceReaching(job_host);
  const std::string route = !reaching.ok() ? "unknown" : reaching.value().loopback ? "loopback" : "network";
  ASSIGN_OR_RETURN(const std::vector<std::string> routes, control.AllGather(route));
  if (!reaching.ok()) return std::string();
  const bool one_host =
      std::all_of(routes.begin(), routes.end(), [](const std::string& other) { return other == "loopback"; });
  if (reaching.value().loopback && !one_host) return std::string();
  return NetDevicesFor(reaching.value().name);
}

}  // namespace

Result<std::unique_ptr<Transport>> MakeUcxTransport(ControlPlane& control, const UcxTransportOptions& options) {
  if (control.world_size() > ucx::kMaxRanks) {
    return InvalidArgument("the UCX transport supports at most " + std::to_string(ucx::kMaxRanks) + " ranks, not " +
                           std::to_string(control.world_size()));
  }
  ASSIGN_OR_RETURN(const std::string net_devices, AgreeOnNetDevices(control, options.job_host));
  const Result<const UcxApi*> ucx = options.ucx != nullptr ? Result<const UcxApi*>(options.ucx) : LoadUcx();
  Result<PullableProcess> pullable = PullableProcess::Create();
  std::unique_ptr<UcxTransport> transport;
  Status opened = ucx.ok() ? pullable.status() : ucx.status();
  if (opened.ok()) {
    transport = std::make_unique<UcxTransport>(*ucx.value(), control.rank(), control.world_size(),
                                               options.close_timeout, std::move(pullable.value()));
    opened = transport->Open(net_devices);
  }
  Result<std::string> info = opened.ok() ? transport->ConnectionInfo() : Result<std::string>(opened);
  // An empty contribution tells the others that this rank has no worker.
  ASSIGN_OR_RETURN(std::vector<std::string> infos, control.AllGather(info.ok() ? info.value() : ""));
  if (!info.ok()) return info.status();
  const std::string unavailable = RanksThatSentNothing(infos);
  if (!unavailable.empty()) return Unsupported("UCX is unavailable on rank " + unavailable);
  Status connected = transport->Connect(infos);
  if (connected.ok()) connected = transport->StartBackgroundProgress();
  // The verdict carries the peers this rank pulls from: a sender announces instead of sending only to a puller.
  ASSIGN_OR_RETURN(std::vector<std::string> verdicts,
                   control.AllGather(connected.ok() ? "ok" + transport->PullSources() : ""));
  RETURN_IF_ERROR(connected);
  const std::string failed = RanksThatSentNothing(verdicts);
  if (!failed.empty()) return Unsupported("setting up UCX failed on rank " + failed);
  transport->LearnPullers(verdicts);
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace ckpt::coll
