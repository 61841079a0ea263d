// The transfers of one UCX transport exchange as UCX sees them: their bookkeeping, the request parameters whose
// completion callbacks update it, and the one verdict the exchange reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collectives/transport/same_host_pull.h"
#include "collectives/transport/transport.h"
#include "collectives/transport/ucx_library.h"
#include "common/status.h"

namespace ckpt::coll::ucx {

enum class Kind : uint8_t { kSend, kReceive };

struct Batch;

// One send or receive of an Exchange call.
struct Transfer {
  Kind kind;
  int peer;
  uint64_t tag;
  uint64_t size;
  Batch* batch;
  void* request = nullptr;  // UCX's request while in flight
  bool done = false;
  ucs_status_t status = UCS_OK;
  uint64_t received = 0;
  // The acknowledgement of a same-host pull: received, it completes the caller's send; sent, it follows a receive.
  bool pull_ack = false;
};

// A receive served by same-host pull: its descriptor's receive, and where the pulled bytes go (`runs`, the caller's
// TransferRecv::runs, where they land scattered).
struct PendingPull {
  const Transfer* descriptor_receive;
  const PullDescriptor* descriptor;
  void* dst;
  uint64_t size;
  const std::vector<MemoryRun>* runs;
  bool served = false;
};

// Everything one Exchange call posted. Transfers, descriptors and words are UCX buffers or callback arguments: the
// vectors are reserved up front and never reallocate.
struct Batch {
  explicit Batch(const UcxApi& api) : ucx(api) {}
  const UcxApi& ucx;  // for the completion callbacks, which get only a Transfer
  std::vector<Transfer> transfers;
  size_t in_flight = 0;
  std::map<int, std::string> failed_peers;
  std::string timeout_detail;
  std::string mismatch_detail;  // a pulled receive whose sender announced another size

  std::vector<PullDescriptor> descriptors;  // sent for pulled sends, received for pulled receives
  std::vector<PendingPull> pulls;
  std::vector<uint64_t> check_words;  // one per pulled send: its check value while the send stands, then 0
  std::vector<uint64_t> ack_words;    // the payloads of acknowledgements sent and received
  // UCX's iovecs of scattered sends and receives, and the runs of scattered pulled sends as their receivers read
  // them, one list per transfer (each list's storage stays put as lists move).
  std::vector<std::vector<ucp_dt_iov_t>> scatter_lists;
  std::vector<std::vector<PulledRun>> pulled_run_lists;

  bool HasPendingWith(int peer) const;
};

// "rank 3".
std::string RankName(int rank);

// Adds a transfer, counted in flight before it is posted: UCX may complete it inside the posting call.
Transfer& Begin(Batch& batch, Kind kind, int peer, uint64_t tag, uint64_t size);

// The parameters of ucp_tag_send_nbx / ucp_tag_recv_nbx, whose callbacks free the request and finish `transfer`.
ucp_request_param_t SendParam(Transfer& transfer);
ucp_request_param_t ReceiveParam(Transfer& transfer);

// Records what a posting call returned: a request still in flight, an immediate completion, or a request whose
// callback already ran (and freed it) inside the call.
void Track(Transfer& transfer, ucs_status_ptr_t posted);

// Marks the transfer complete with `status`, out of flight.
void Finish(Transfer* transfer, ucs_status_t status, uint64_t received);

// The one error an Exchange reports: failed peers first, then a timeout, then a pulled receive whose size the sender
// contradicted, then the first failed transfer.
Status Verdict(const Batch& batch);

}  // namespace ckpt::coll::ucx
